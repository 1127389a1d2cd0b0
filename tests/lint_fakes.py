"""Fake rules for the lint-pipeline tests: they exercise files, cache, noqa,
processes and reporters without depending on what the real rules decide.
(test_cli.py also runs the real rules end to end.) The `fake_rules` fixture that installs
them is in conftest.py.

- MP901 fake-cuda: every `.cuda()` call (needs "cuda"); carries a safe fix to `.to("cuda:0")`.
- MP902 fake-dp: `DataParallel(X())` where X is a class that an imported project
  module's summary lists as split (needs "DataParallel"); uses that module.
- MP903 fake-unsafe: every `.half()` (needs "half"); carries an unsafe fix that breaks the syntax.
"""

from __future__ import annotations

import ast
import re

from mpcheck.analysis import FileResult
from mpcheck.finding import Finding, Fix
from mpcheck.lint import rulemeta

FAKE_RULES = [
    rulemeta.RuleMeta("MP901", "fake-cuda", "error", "Flags .cuda() calls.", ("cuda",)),
    rulemeta.RuleMeta("MP902", "fake-dp", "warning", "Flags DataParallel on split classes.", ("DataParallel",)),
    rulemeta.RuleMeta("MP903", "fake-unsafe", "info", "Flags .half().", ("half",)),
]

CALLS = {"analyze": [], "summarize": []}


def fake_summarize(path, source, modname, gpus=(), parsed=None, project=None):
    CALLS["summarize"].append(modname)
    return {"split": re.findall(r"^class (\w+)\(.*\):  # split", source, re.M)}


def fake_analyze(path, source, codes, modname, project, gpus=(), callers=(), parsed=None, keeps_call=None):
    CALLS["analyze"].append(path)
    try:
        ast.parse(source)
    except SyntaxError as exc:
        return FileResult([Finding("MP000", "syntax-error", path, exc.lineno or 1, exc.offset or 1, exc.msg)])
    out, used = [], set()
    for i, line in enumerate(source.splitlines(), 1):
        j = line.find(".cuda()")
        if j >= 0 and "MP901" in codes:
            out.append(
                Finding(
                    "MP901",
                    "fake-cuda",
                    path,
                    i,
                    j + 1,
                    "moves the model to the current device",
                    end_line=i,
                    end_column=j + 8,
                    suggestion="say which device",
                    fix=Fix(i, j + 1, i, j + 8, '.to("cuda:0")'),
                )
            )
        m = re.search(r"DataParallel\((\w+)\(", line)
        if m and "MP902" in codes:
            for mod, summary in sorted(project.items()):
                if m.group(1) in summary["split"]:
                    used.add(mod)
                    out.append(
                        Finding(
                            "MP902",
                            "fake-dp",
                            path,
                            i,
                            m.start() + 1,
                            f"{m.group(1)} from {mod} is split",
                            severity="warning",
                            devices=("cuda:0", "cuda:1"),
                            modules=(m.group(1),),
                        )
                    )
        j = line.find(".half()")
        if j >= 0 and "MP903" in codes:
            out.append(
                Finding(
                    "MP903",
                    "fake-unsafe",
                    path,
                    i,
                    j + 1,
                    "half",
                    severity="info",
                    fix=Fix(i, j + 1, i, j + 8, ".half((", safe=False),
                )
            )
    return FileResult(out, sorted(used))


def write(root, files: dict[str, str | bytes]):
    """Create files under `root` (a pathlib.Path) from {relative path: content}."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def make_project(root, monkeypatch, files: dict[str, str | bytes]):
    """A project at `root` (a pyproject.toml and a package `pkg`) holding `files`, made the working folder."""
    write(root, {"pyproject.toml": "[project]\nname = 'demo'\n", "pkg/__init__.py": "", **files})
    monkeypatch.chdir(root)
    return root
