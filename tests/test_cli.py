"""The `mpcheck` command: exit codes, formats, selection, bad input, stdin,
fixes, parallel output, subcommands. Most tests run the CLI in this process
with the fake rules of lint_fakes.py; the last ones run the real rules in a
subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from lint_fakes import make_project, write

from mpcheck import cli
from mpcheck.lint import pipeline, schedule

REPO = Path(__file__).resolve().parent.parent


def run_cli(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path, monkeypatch, fake_rules):
    return make_project(
        tmp_path,
        monkeypatch,
        {
            "pkg/model.py": "class Split(nn.Module):  # split\n    pass\n\nnet = Split().cuda()\n",
            "pkg/train.py": "from .model import Split\nfrom torch.nn import DataParallel\ndp = DataParallel(Split())\n",
            "pkg/clean.py": "import torch\nx = torch.zeros(3)\n",
        },
    )


def test_findings_exit_1_text_format_sorted(project, capsys):
    code, out, err = run_cli(capsys, "--no-cache")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"{os.path.join('pkg', 'model.py')}:4:14: MP901 moves the model to the current device"
    assert lines[1] == f"{os.path.join('pkg', 'train.py')}:3:6: MP902 Split from pkg.model is split"
    assert lines[2] == "Found 2 findings (1 fixable with --fix)."
    assert err == ""


def test_clean_run_says_how_many_files_passed(project, capsys):
    code, out, err = run_cli(capsys, "--no-cache", "pkg/clean.py")
    assert (code, out, err) == (0, "All checks passed (1 file).\n", "")
    code, out, _ = run_cli(capsys, "--no-cache", "--output-format", "full", "pkg/clean.py", "pkg/__init__.py")
    assert (code, out) == (0, "All checks passed (2 files).\n")
    # The machine formats stay machine-readable: nothing but the (empty) document.
    assert run_cli(capsys, "--no-cache", "--output-format", "json", "pkg/clean.py")[1] == "[]\n"
    assert run_cli(capsys, "--no-cache", "--output-format", "github", "pkg/clean.py")[1] == ""
    assert "All checks" not in run_cli(capsys, "--no-cache", "--output-format", "sarif", "pkg/clean.py")[1]


def test_output_file_takes_the_report_and_stdout_stays_empty(project, capsys, tmp_path):
    report = tmp_path / "report.json"
    code, out, err = run_cli(capsys, "--no-cache", "--output-format", "json", "-o", str(report))
    assert (code, out, err) == (1, "", "")
    assert [(f["code"], f["line"]) for f in json.loads(report.read_text())] == [("MP901", 4), ("MP902", 3)]
    code, out, err = run_cli(capsys, "--no-cache", "--output-file", str(tmp_path / "no" / "such" / "dir.txt"))
    assert code == 2 and out == "" and "cannot write the report to" in err


def test_exit_zero(project, capsys):
    code, out, _ = run_cli(capsys, "--no-cache", "--exit-zero")
    assert code == 0 and "MP901" in out


def test_missing_path_exit_2_names_it_and_the_rest_is_checked(project, capsys):
    code, out, err = run_cli(capsys, "--no-cache", "pkg/model.py", "nope/missing.py", "gone.py")
    assert code == 2
    assert err.splitlines() == [
        "mpcheck: error: path not found: nope/missing.py",
        "mpcheck: error: path not found: gone.py",
    ]
    assert "Traceback" not in err
    assert out.splitlines()[0].startswith(f"{os.path.join('pkg', 'model.py')}:4:14: MP901 ")
    # Even when what remains is clean, or is nothing, the missing path makes it exit 2.
    assert run_cli(capsys, "--no-cache", "pkg/clean.py", "nope.py")[0] == 2
    assert run_cli(capsys, "--no-cache", "nope.py")[0] == 2


def test_git_ignored_folder_named_explicitly_is_checked(project, capsys):
    (project / ".git").mkdir()
    write(
        project,
        {
            ".gitignore": "vendor/\n*_pb2.py\n",
            "vendor/lib/site-packages/dep/mod.py": "net = Split().cuda()\n",
            "vendor/lib/site-packages/dep/api_pb2.py": "net = Split().cuda()\n",
        },
    )
    code, out, _ = run_cli(capsys, "--no-cache")
    assert (code, "vendor" in out) == (1, False)  # walked from the root, vendor/ is ignored
    code, out, _ = run_cli(capsys, "--no-cache", "vendor/lib/site-packages/dep")
    assert code == 1
    # The folder's own file is checked; the other patterns still apply below it.
    assert out.splitlines()[:-1] == [
        f"{os.path.join('vendor', 'lib', 'site-packages', 'dep', 'mod.py')}:1:14: MP901 moves the model to the current device"
    ]


@pytest.mark.parametrize("args", [("README.md",), ("empty",), ("README.md", "setup.cfg")])
def test_no_python_file_exit_0_quietly(project, capsys, args):
    write(project, {"README.md": "# hi\n", "setup.cfg": "", "empty/.keep": ""})
    code, out, err = run_cli(capsys, "--no-cache", *args)
    assert (code, out, err) == (0, "", "")


def test_no_python_file_machine_formats_print_an_empty_document(project, capsys):
    write(project, {"README.md": "# hi\n"})
    assert run_cli(capsys, "--no-cache", "--output-format", "json", "README.md") == (0, "[]\n", "")
    code, out, _ = run_cli(capsys, "--no-cache", "--output-format", "sarif", "README.md")
    doc = json.loads(out)
    assert code == 0 and doc["version"] == "2.1.0" and doc["runs"][0]["results"] == []
    assert doc["runs"][0]["tool"]["driver"]["name"] == "mpcheck"
    assert run_cli(capsys, "--no-cache", "--output-format", "github", "README.md") == (0, "", "")
    code, out, _ = run_cli(capsys, "--no-cache", "--statistics", "--output-format", "json", "README.md")
    assert (code, json.loads(out)) == (0, [])


def test_usage_error_exit_2(project, capsys):
    code, _, err = run_cli(capsys, "--output-format", "xml")
    assert code == 2 and "xml" in err


def test_unknown_code_exit_2_names_it(project, capsys):
    code, out, err = run_cli(capsys, "--no-cache", "--select", "MP901,MP4242")
    assert code == 2 and "MP4242" in err and out == ""


def test_select_ignore_extend_select_prefix_all(project, capsys):
    _, out, _ = run_cli(capsys, "--no-cache", "--select", "MP901")
    assert "MP901" in out and "MP902" not in out
    _, out, _ = run_cli(capsys, "--no-cache", "--ignore", "MP901")
    assert "MP901" not in out and "MP902" in out
    _, out, _ = run_cli(capsys, "--no-cache", "--select", "MP901", "--extend-select", "MP902")
    assert "MP901" in out and "MP902" in out
    _, out, _ = run_cli(capsys, "--no-cache", "--select", "MP90", "--ignore", "MP902")
    assert "MP901" in out and "MP902" not in out
    _, out, _ = run_cli(capsys, "--no-cache", "--ignore", "ALL")
    assert out == "All checks passed (4 files).\n"


def test_config_selects_and_flags_override(project, capsys):
    (project / "pyproject.toml").write_text("[tool.mpcheck]\nignore = ['MP902']\n")
    code, out, _ = run_cli(capsys, "--no-cache")
    assert code == 1 and "MP901" in out and "MP902" not in out
    _, out, _ = run_cli(capsys, "--no-cache", "--select", "MP902")
    assert "MP901" not in out and "MP902" in out
    _, out, _ = run_cli(capsys, "--no-cache", "--isolated")
    assert "MP902" in out


def test_config_per_file_ignores(project, capsys):
    (project / "pyproject.toml").write_text("[tool.mpcheck]\nper-file-ignores = { 'pkg/model.py' = ['MP901'] }\n")
    _, out, _ = run_cli(capsys, "--no-cache")
    assert "MP901" not in out and "MP902" in out


@pytest.mark.parametrize(
    "table, named",
    [
        ("colour = 'always'", "colour"),
        ("select = ['MP901', 'XY123']", "XY123"),
        ("per-file-ignores = { 'a.py' = ['MP77'] }", "MP77"),
        ("select = 'MP901", "invalid TOML"),
        ("exclude = 3", "exclude"),
    ],
)
def test_bad_config_exit_2_names_it(project, capsys, table, named):
    (project / "pyproject.toml").write_text(f"[tool.mpcheck]\n{table}\n")
    code, out, err = run_cli(capsys, "--no-cache")
    assert code == 2 and named in err and "pyproject.toml" in err
    assert "Traceback" not in err and out == ""


def test_bad_input_is_mp000_and_other_files_still_checked(project, capsys):
    write(
        project,
        {
            "pkg/broken.py": "x = 1\ndef f(:\n    y.cuda()\n",
            "pkg/latin.py": b"x = 1\ns = '\xe9t\xe9'  # cuda\n",
        },
    )
    os.symlink(project / "gone.py", project / "pkg" / "dangling.py")
    code, out, err = run_cli(capsys, "--no-cache")
    assert code == 1 and "Traceback" not in err
    lines = out.splitlines()
    assert f"{os.path.join('pkg', 'broken.py')}:2:7: MP000 invalid syntax" in lines
    assert any(line.startswith(f"{os.path.join('pkg', 'latin.py')}:2:6: MP000 not UTF-8") for line in lines)
    assert any(line.startswith(f"{os.path.join('pkg', 'dangling.py')}:1:1: MP000 cannot read") for line in lines)
    assert any("MP901" in line and "model.py" in line for line in lines)
    assert any("MP902" in line for line in lines)


def test_a_named_file_that_does_not_parse_is_mp000_even_with_no_rule_word(project, capsys):
    """The pre-filter never parses a file with no rule word; one named on the command line (as pre-commit
    names each changed file) is still compiled, so a syntax error there is reported, cache or not. A walk
    over a folder keeps skipping it (rules/MP000-syntax-error.md, "When it stays silent")."""
    write(project, {"pkg/plain.py": "x = 1\ndef f(:\n    pass\n", "pkg/fine.py": "x = 1\n"})
    named = os.path.join("pkg", "plain.py")
    for _ in range(2):  # the second run has a cache: a named file's check is not skipped by it
        code, out, err = run_cli(capsys, named, os.path.join("pkg", "fine.py"))
        assert code == 1 and out.splitlines()[0] == f"{named}:2:7: MP000 could not parse: invalid syntax", out
    code, out, err = run_cli(capsys, "--no-cache", "pkg")
    assert "plain.py" not in out
    (project / "pkg" / "plain.py").write_text("# mpcheck: noqa: MP000\ndef f(:\n    pass\n")
    code, out, err = run_cli(capsys, "--no-cache", named)
    assert code == 0 and "MP000" not in out


def test_internal_error_exit_2_no_traceback_others_reported(project, capsys, monkeypatch):
    from mpcheck import analysis

    real = analysis.analyze

    def explode(path, source, *a, **k):
        if path.endswith("train.py"):
            raise ValueError("boom")
        return real(path, source, *a, **k)

    monkeypatch.setattr(analysis, "analyze", explode)
    code, out, err = run_cli(capsys, "--no-cache", "--jobs", "1")
    assert code == 2
    assert "internal error while checking" in err and "train.py" in err and "boom" in err
    assert "Traceback" not in err
    assert "MP901" in out  # the other file's finding is not lost


def test_unexpected_exception_is_one_line_exit_2(project, capsys, monkeypatch):
    monkeypatch.setattr(pipeline, "lint", lambda *a, **k: 1 / 0)
    code, _, err = run_cli(capsys, "--no-cache")
    assert code == 2 and "internal error: ZeroDivisionError" in err and "Traceback" not in err


def test_stdin_with_filename(project, capsys, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"m = Net().cuda()\n")))
    code, out, _ = run_cli(capsys, "--no-cache", "-", "--stdin-filename", "pkg/new.py")
    assert code == 1
    assert out.splitlines()[0] == "pkg/new.py:1:10: MP901 moves the model to the current device"


def test_stdin_filename_without_dash_is_usage_error(project, capsys):
    code, _, err = run_cli(capsys, "--stdin-filename", "x.py")
    assert code == 2 and "--stdin-filename" in err


def test_statistics(project, capsys):
    write(project, {"pkg/more.py": "a.cuda()\nb.cuda()\n"})
    code, out, _ = run_cli(capsys, "--no-cache", "--statistics")
    assert code == 1
    assert out.splitlines() == ["3  MP901  fake-cuda [*]", "1  MP902  fake-dp"]
    code, out, _ = run_cli(capsys, "--no-cache", "--statistics", "--output-format", "json")
    assert code == 1 and json.loads(out) == [
        {"code": "MP901", "name": "fake-cuda", "count": 3, "fixable": True},
        {"code": "MP902", "name": "fake-dp", "count": 1, "fixable": False},
    ]


def test_json_output(project, capsys):
    code, out, _ = run_cli(capsys, "--no-cache", "--output-format", "json")
    data = json.loads(out)
    assert code == 1 and [d["code"] for d in data] == ["MP901", "MP902"]
    for key in ("code", "name", "path", "line", "column", "end_line", "end_column", "message", "severity"):
        assert key in data[0]
    assert data[1]["severity"] == "warning" and data[1]["devices"] == ["cuda:0", "cuda:1"]


def test_full_output_has_source_and_caret(project, capsys):
    _, out, _ = run_cli(capsys, "--no-cache", "--output-format", "full", "--select", "MP901")
    assert "4 | net = Split().cuda()" in out
    assert "\n  | " + " " * 13 + "^^^^^^^\n" in out
    assert "help: say which device" in out


def test_color_only_when_asked(project, capsys):
    _, out, _ = run_cli(capsys, "--no-cache")
    assert "\x1b[" not in out  # captured output is not a terminal
    _, out, _ = run_cli(capsys, "--no-cache", "--color", "always")
    assert "\x1b[" in out
    _, out, _ = run_cli(capsys, "--no-cache", "--color", "always", "--output-format", "json")
    assert "\x1b[" not in out


def test_parallel_output_identical_to_serial(project, capsys, monkeypatch):
    files = {
        f"many/m{i:03d}.py": "import torch\n" * (i % 7) + f"x{i} = Net().cuda()\ny = z.cuda()\n" for i in range(60)
    }
    files.update(
        {f"many/n{i:03d}.py": f"from pkg.model import Split\nd = DataParallel(Split())  # {i}\n" for i in range(20)}
    )
    write(project, files)
    used = []
    real_pool = pipeline._pool_map
    monkeypatch.setattr(pipeline, "_pool_map", lambda *a: used.append(1) or real_pool(*a))
    # pkg/model.py is linted and imported: its summary and its lint share a parse (lint/schedule.py).
    real_scheduled = schedule._in_pool
    monkeypatch.setattr(schedule, "_in_pool", lambda *a: used.append(1) or real_scheduled(*a))
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_CHARS", 0)
    _, serial, _ = run_cli(capsys, "--no-cache", "--jobs", "1", "--output-format", "json")
    assert not used
    _, parallel, _ = run_cli(capsys, "--no-cache", "--jobs", "2", "--output-format", "json")
    assert used, "the process pool was not used"
    assert parallel == serial
    found = json.loads(serial)
    assert len(found) == 60 * 2 + 20 + 2
    assert [(f["path"], f["line"], f["column"]) for f in found] == sorted(
        (f["path"], f["line"], f["column"]) for f in found
    )


def test_fix_applies_safe_fixes_atomically(project, capsys):
    code, out, _ = run_cli(capsys, "--no-cache", "--fix")
    assert (project / "pkg/model.py").read_text().endswith('net = Split().to("cuda:0")\n')
    assert code == 1  # the MP902 finding has no fix and remains
    assert "MP901" not in out and "MP902" in out and "1 fixed" in out
    assert not [p for p in (project / "pkg").iterdir() if p.name.startswith(".mpcheck-fix-")]


def test_diff_shows_without_writing(project, capsys):
    before = (project / "pkg/model.py").read_text()
    code, out, _ = run_cli(capsys, "--no-cache", "--diff")
    assert code == 1
    assert '-net = Split().cuda()\n+net = Split().to("cuda:0")' in out
    assert (project / "pkg/model.py").read_text() == before


def test_unsafe_fix_only_on_request_and_never_breaks_the_file(project, capsys):
    write(project, {"pkg/half.py": "m = model.half()\n"})
    run_cli(capsys, "--no-cache", "--fix")
    assert (project / "pkg/half.py").read_text() == "m = model.half()\n"  # unsafe: not applied
    code, out, err = run_cli(capsys, "--no-cache", "--fix", "--unsafe-fixes", "pkg/half.py")
    # The fake MP903 fix breaks the syntax: reported, file untouched, finding still shown.
    assert (project / "pkg/half.py").read_text() == "m = model.half()\n"
    assert "would not parse" in err and "pkg/half.py" in err
    assert code == 1 and "MP903" in out


def test_rule_subcommand(capsys):
    code, out, _ = run_cli(capsys, "rule", "MP000")
    assert code == 0 and out.startswith("# MP000: syntax-error") and "## Why is this bad?" in out
    code, out, _ = run_cli(capsys, "rule", "syntax-error")
    assert code == 0 and out.startswith("# MP000")
    code, out, _ = run_cli(capsys, "rule", "--all")
    assert code == 0
    assert any(line.startswith("MP000  syntax-error") for line in out.splitlines())
    code, _, err = run_cli(capsys, "rule", "MP999")
    assert code == 2 and "MP999" in err


def test_runtime_face_missing_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.setitem(cli._RUNTIME_FACES, "run", "mpcheck.runtime.no_such_cli")
    code, _, err = run_cli(capsys, "run", "train.py")
    assert code == 2 and "mpcheck run" in err and "not available" in err


def test_runtime_face_dispatch(capsys, monkeypatch):
    import types

    fake = types.ModuleType("fake_dryrun_cli")
    fake.main = lambda argv: 7 if argv == ["--gpus", "4", "t.py"] else 0
    monkeypatch.setitem(sys.modules, "fake_dryrun_cli", fake)
    monkeypatch.setitem(cli._RUNTIME_FACES, "dryrun", "fake_dryrun_cli")
    code, _, _ = run_cli(capsys, "dryrun", "--gpus", "4", "t.py")
    assert code == 7


def test_version(capsys):
    import mpcheck

    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.strip() == f"mpcheck {mpcheck.__version__}"


# ---------------------------------------------------------------- real rules, real process

SPLIT_MODEL = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn


    class SplitNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stage0 = nn.Linear(8, 8).to("cuda:0")
            self.stage1 = nn.Linear(8, 2).to("cuda:1")

        def forward(self, x):
            x = self.stage0(x.to("cuda:0"))
            return self.stage1(x.to("cuda:1"))
    """
)


def _mpcheck(*args, cwd, input=None):
    return subprocess.run(
        [sys.executable, "-m", "mpcheck.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        input=input,
        timeout=120,
    )


def _need_rules(*codes):
    """The real rules a test relies on are registered: a missing one fails the test."""
    from mpcheck.rules import rules_by_code

    missing = [c for c in codes if c not in rules_by_code()]
    assert not missing, f"rules {missing} are not in the registry"


def test_real_rules_end_to_end(tmp_path):
    _need_rules("MP002", "MP007")
    write(
        tmp_path,
        {
            "train.py": SPLIT_MODEL + "\n\ndp = nn.DataParallel(SplitNet())\nnet = SplitNet().cuda()\n",
            "ok.py": SPLIT_MODEL + "\n\nnet = SplitNet()\nnet = net.to(torch.float16)\n",
            "broken.py": "import torch\nx = torch.zeros(2).cuda(\n",
        },
    )
    n = SPLIT_MODEL.count("\n") + 2
    r = _mpcheck("--no-cache", "--output-format", "json", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    found = [(f["path"], f["line"], f["code"]) for f in json.loads(r.stdout)]
    assert found == [("broken.py", 2, "MP000"), ("train.py", n + 1, "MP002"), ("train.py", n + 2, "MP007")]
    r = _mpcheck("--no-cache", "ok.py", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (0, "All checks passed (1 file).\n", "")
    # The same through stdin, and a noqa on the line.
    src = SPLIT_MODEL + "\nnet = SplitNet().cuda()  # noqa: MP007\nnet2 = SplitNet().cuda()\n"
    r = _mpcheck("--no-cache", "-", "--stdin-filename", "x.py", cwd=tmp_path, input=src)
    assert r.returncode == 1 and r.stdout.startswith(f"x.py:{n + 1}:") and " MP007 " in r.stdout
    assert r.stdout.count("MP007") == 1


@pytest.mark.parametrize(
    "bad, where, said",
    [
        ("def f(:\n    pass\n", (1, 7), "invalid syntax"),
        ('print "a"\n', (1, 1), "Missing parentheses in call to 'print'"),
        ("x = (1,\n\n\ny = 2\n", (1, 5), "'(' was never closed"),
        ("if x:\ny = 1\n", (2, 1), "expected an indented block"),
    ],
)
def test_syntax_error_is_where_python_says_in_its_words(tmp_path, bad, where, said):
    _need_rules("MP007")
    # A split model first, so that the file is not skipped as irrelevant before it is parsed.
    prefix = SPLIT_MODEL + "\n\nnet = SplitNet().cuda()\n\n\n"
    write(tmp_path, {"broken.py": prefix + bad})
    r = _mpcheck("--no-cache", "--output-format", "json", cwd=tmp_path)
    (f,) = json.loads(r.stdout)
    assert (f["code"], f["line"], f["column"]) == ("MP000", prefix.count("\n") + where[0], where[1]), f
    assert said in f["message"] and "expected one of" not in f["message"]


def test_lint_never_imports_torch(tmp_path):
    write(tmp_path, {"model.py": SPLIT_MODEL, "train.py": "from model import SplitNet\nn = SplitNet().cuda()\n"})
    script = (
        "import mpcheck.cli, sys\n"
        "code = mpcheck.cli.main(['--no-cache', '.'])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('exit', code)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] in ("exit 0", "exit 1")


def test_sarif_output_carries_catalogue_metadata(project, capsys):
    write(project, {"pkg/broken.py": "def f(:\n    x.cuda()\n"})
    code, out, _ = run_cli(capsys, "--no-cache", "--output-format", "sarif")
    doc = json.loads(out)
    assert code == 1 and doc["version"] == "2.1.0"
    rules = {r["id"]: r for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    # MP000's text comes from rules/MP000-syntax-error.md; the fake rules' from their metadata.
    assert rules["MP000"]["help"]["markdown"].startswith("# MP000: syntax-error")
    assert rules["MP000"]["shortDescription"]["text"].startswith("The file could not be checked")
    assert rules["MP901"]["shortDescription"]["text"] == "Flags .cuda() calls."
    results = doc["runs"][0]["results"]
    assert [(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]) for r in results] == [
        ("MP000", "pkg/broken.py"),
        ("MP901", "pkg/model.py"),
        ("MP902", "pkg/train.py"),
    ]


def test_every_registered_rule_has_a_catalogue_entry():
    from mpcheck import catalogue
    from mpcheck.rules import all_rules

    docs = catalogue.load()
    for rule in all_rules():
        doc = docs.get(rule.code)
        assert doc is not None, f"{rule.code} has no rules/{rule.code}-{rule.name}.md"
        assert (doc.name, doc.severity) == (rule.name, rule.severity)
        assert doc.summary and doc.section("What it does") and doc.section("Example")


def test_fix_on_stdin_prints_the_fixed_source(project, capsys, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"m = Net().cuda()\n")))
    code, out, err = run_cli(capsys, "--no-cache", "--fix", "-", "--stdin-filename", "pkg/new.py")
    assert out == 'm = Net().to("cuda:0")\n'  # only the source: the report goes to stderr
    assert "1 fixed" in err
    assert code == 0
    assert not (project / "pkg" / "new.py").exists()


def _linted_lines(example: str) -> set[tuple[int, str]]:
    r = _mpcheck("--no-cache", "--output-format", "json", "examples/", cwd=REPO)
    assert r.returncode == 1, r.stderr  # .ci/run relies on it: the examples hold real mistakes
    return {(f["line"], f["code"]) for f in json.loads(r.stdout) if f["path"] == os.path.join("examples", example)}


def _dry_run(example: str) -> subprocess.CompletedProcess:
    pytest.importorskip("torch")
    return _mpcheck("dryrun", "--gpus", "2", f"examples/{example}", cwd=REPO)


def _reported_lines(example: str, output: str) -> set[tuple[int, str]]:
    import re

    pattern = re.compile(rf"^examples/{re.escape(example)}:(\d+):\d+: (MP\d+) ", re.M)
    return {(int(line), code) for line, code in pattern.findall(output)}


def test_dry_run_of_the_split_model_example_reports_what_the_linter_finds(monkeypatch):
    # The example runs at tiny sizes: its 16x16 mask copied every call (MP011) is 256 bytes, under
    # the run-time threshold of repeated transfers worth a warning; 0 reports every repeat.
    monkeypatch.setenv("MPCHECK_REPEAT_MIN_BYTES", "0")
    r = _dry_run("split_model.py")
    reported = _reported_lines("split_model.py", r.stdout + r.stderr)
    # At run time the loss's device mismatch is an MP001 (a cross-device argument), not the
    # linter's MP008: the lines are the same mistakes.
    assert {line for line, _ in reported} == {line for line, _ in _linted_lines("split_model.py")} == {42, 47, 53}
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr


def test_dry_run_of_the_training_example_reports_what_the_linter_finds():
    r = _dry_run("train.py")
    assert (
        _reported_lines("train.py", r.stdout + r.stderr) == _linted_lines("train.py") == {(14, "MP002"), (16, "MP007")}
    )
    assert r.returncode == 1, r.stderr


def test_dry_run_names_the_imported_module_relative_to_the_current_folder_as_the_script(tmp_path):
    import re

    pytest.importorskip("torch")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "stages.py").write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Split(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a = nn.Linear(4, 4).to('cuda:0')\n"
        "        self.b = nn.Linear(4, 4).to('cuda:1')\n\n"
        "    def forward(self, x):\n"
        "        return self.b(self.a(x))  # the hop to cuda:1 is missing\n"
    )
    (tmp_path / "pkg" / "train.py").write_text(
        "import torch\nfrom stages import Split\n\nSplit()(torch.randn(2, 4, device='cuda:0')).sum().backward()\n"
    )
    r = _mpcheck("dryrun", "--gpus", "2", "pkg/train.py", cwd=tmp_path)
    # every finding's "path:line:column:" head: the imported module's, as the script's, relative to the cwd
    heads = re.findall(r"^(\S+):(\d+):\d+: MP\d+ ", r.stdout + r.stderr, re.M)
    assert ("pkg/stages.py", "12") in heads, r.stdout + r.stderr
    assert not [h for h, _ in heads if os.path.isabs(h)], heads


def test_dry_run_of_the_training_example_runs_to_its_end():
    r = _dry_run("train.py")
    assert "Traceback" not in r.stderr, r.stderr


def test_a_python_without_libcst_gets_one_clear_error(tmp_path, monkeypatch, capsys):
    import importlib.util

    from mpcheck import cli

    (tmp_path / "a.py").write_text("import torch\nx = torch.zeros(2).cuda()\n")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "libcst" else real(name, *a))
    assert cli.main([str(tmp_path / "a.py"), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "needs libcst" in err and "internal error" not in err
