"""Which imported modules are summarised: only those on the look-up chain of a
name the linted file imports (the name's module, then the modules that re-export
it), with the real rules. A summary that decides a finding is still made and
used; a module the file imports nothing from that could matter is never parsed;
the cache follows the modules that matter and ignores the others."""

from __future__ import annotations

import json

import pytest
from lint_fakes import write

from mpcheck import analysis, cli

SPLIT = (
    "import torch.nn as nn\nfrom .helpers import width\n\n\nclass SplitNet(nn.Module):\n"
    "    def __init__(self):\n        super().__init__()\n"
    "        self.a = nn.Linear(width, 4).to('cuda:0')\n        self.b = nn.Linear(4, 4).to('cuda:1')\n"
)
TRAIN = "import torch.nn as nn\nfrom pkg import SplitNet\nfrom tools import log\n\nnet = nn.DataParallel(SplitNet())\nlog(net)\n"


@pytest.fixture
def calls(tmp_path, monkeypatch):
    write(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname='p'\n",
            "pkg/__init__.py": "from .split import SplitNet\n",
            "pkg/split.py": SPLIT,
            # Imported by split.py for its own use, and names a device: never looked at for train.py.
            "pkg/helpers.py": "width = 4\nspare = torch.zeros(1).cuda()\n",
            # Imported by train.py, but nothing in it can carry a device (no rule word): not parsed.
            "tools.py": "def log(x):\n    print(x)\n",
            "train.py": TRAIN,
        },
    )
    monkeypatch.chdir(tmp_path)
    seen: dict[str, list[str]] = {"summarize": [], "analyze": []}
    summarize, analyze = analysis.summarize, analysis.analyze

    def counting_summarize(path, *a, **k):
        seen["summarize"].append(str(path).replace("\\", "/").rpartition(str(tmp_path).replace("\\", "/") + "/")[2])
        return summarize(path, *a, **k)

    def counting_analyze(path, *a, **k):
        seen["analyze"].append(str(path))
        return analyze(path, *a, **k)

    monkeypatch.setattr(analysis, "summarize", counting_summarize)
    monkeypatch.setattr(analysis, "analyze", counting_analyze)
    return seen


def run(capsys, seen):
    seen["summarize"].clear()
    seen["analyze"].clear()
    cli.main(["--jobs", "1", "--select", "MP002", "--output-format", "json", "train.py"])
    return [(d["line"], d["code"]) for d in json.loads(capsys.readouterr().out)]


def test_the_summary_that_decides_the_finding_is_made_and_used(calls, capsys):
    # SplitNet is placed on two devices only according to pkg/split.py's summary, reached
    # through pkg/__init__'s re-export: without it, DataParallel around it goes unseen.
    assert run(capsys, calls) == [(5, "MP002")]
    assert sorted(calls["summarize"]) == ["pkg/__init__.py", "pkg/split.py"]


def test_the_cache_follows_the_modules_that_matter_only(calls, capsys, tmp_path):
    run(capsys, calls)
    # helpers.py is not on SplitNet's chain: editing it cannot change train.py's result.
    (tmp_path / "pkg/helpers.py").write_text("width = 8\nspare = torch.zeros(1).cuda()\n")
    assert run(capsys, calls) == [(5, "MP002")] and calls["analyze"] == []
    # split.py is: one device for both parts, and the finding goes.
    (tmp_path / "pkg/split.py").write_text(SPLIT.replace("cuda:1", "cuda:0"))
    assert run(capsys, calls) == [] and calls["analyze"] == ["train.py"]


def test_a_skipped_module_that_starts_to_matter_invalidates(calls, capsys, tmp_path):
    run(capsys, calls)
    # tools.py was skipped unparsed; now `log` is the class that is split: train.py is checked again.
    (tmp_path / "tools.py").write_text(
        SPLIT.replace("from .helpers import width", "width = 4").replace("SplitNet", "log")
    )
    (tmp_path / "train.py").write_text(TRAIN.replace("DataParallel(SplitNet())", "DataParallel(log())"))
    assert run(capsys, calls) == [(5, "MP002")]
    assert "tools.py" in calls["summarize"]
    (tmp_path / "train.py").write_text(TRAIN)
    assert run(capsys, calls) == [(5, "MP002")]  # back to the first text: its stored result
    (tmp_path / "tools.py").write_text("import torch\n\ndef log(x):\n    return x.cuda()\n")
    run(capsys, calls)
    assert calls["analyze"] == ["train.py"]  # tools.py changed and was consulted: not served stale


def test_one_file_is_parsed_while_workers_summarise_its_imports(calls, capsys, monkeypatch):
    # With several cores and one file to check, the file's libcst parse runs in this process while
    # worker processes make the summaries: the finding that needs them is the same.
    from mpcheck.lint import pipeline

    monkeypatch.setattr(pipeline, "PARALLEL_MIN_CHARS", 0)  # these files are small
    given: list[bool] = []
    analyze = analysis.analyze

    def noting_analyze(path, *a, **k):
        given.append(k.get("parsed") is not None)
        return analyze(path, *a, **k)

    monkeypatch.setattr(analysis, "analyze", noting_analyze)
    cli.main(["--jobs", "2", "--no-cache", "--select", "MP002", "--output-format", "json", "train.py"])
    assert [(d["line"], d["code"]) for d in json.loads(capsys.readouterr().out)] == [(5, "MP002")]
    assert given == [True]


def test_a_name_imported_only_to_name_a_type_is_not_summarised(calls, capsys, tmp_path):
    # train.py checked alone: SplitNet in annotations and isinstance tests only tells the device model
    # nothing, so pkg's modules are not summarised; a call of it is a use, and they are again.
    typed = (
        "import torch.nn as nn\nfrom pkg import SplitNet\n\n\n"
        "def wrap(net: SplitNet) -> SplitNet:\n    assert isinstance(net, (nn.Module, SplitNet))\n"
        "    return nn.DataParallel(net)\n"
    )
    (tmp_path / "train.py").write_text(typed)
    assert run(capsys, calls) == []
    assert calls["summarize"] == []
    (tmp_path / "train.py").write_text(typed + "\n\nwrap(SplitNet())\n")
    run(capsys, calls)
    assert sorted(calls["summarize"]) == ["pkg/__init__.py", "pkg/split.py"]


def test_type_only_names():
    from mpcheck.lint.uses import type_only_names

    source = (
        "from typing import TYPE_CHECKING\nfrom a import A, B, C, D, E, F, G, H\n"
        "if TYPE_CHECKING:\n    from b import T\n"
        "x: A = B()\n"  # the annotation is not run, the call is
        "def f(p: C, q=D, *r: T, **s: T) -> C:\n"
        "    try:\n        return isinstance(p, (C, E)) or issubclass(type(q), E)\n"
        "    except F:\n        return G\n"
        "h = lambda: H\n"
    )
    names = frozenset("ABCDEFGHT") | {"Unused"}
    assert type_only_names(source, names) == frozenset({"A", "C", "E", "F", "T", "Unused"})
    # A name used as a value anywhere counts (a default, a body, a lambda, a tested value).
    assert type_only_names("from a import K\nisinstance(K, int)\n", frozenset({"K"})) == frozenset()
    # A text that does not parse: every name counts as used.
    assert type_only_names("from a import K\ndef (\n", frozenset({"K"})) == frozenset()
