"""A crash of a rule or of the device model is an internal error: named with the
file and the rule, exit 2, the other files still checked, and never stored in
the cache as a clean result (serially, through the process pool, and with a cache)."""

from __future__ import annotations

import os

import pytest
from lint_fakes import write

from mpcheck import analysis, cli
from mpcheck.lint import pipeline
from mpcheck.rules import rules_by_code

SPLIT_MODEL = (
    "import torch\nimport torch.nn as nn\n\n\nclass SplitNet(nn.Module):\n"
    "    def __init__(self):\n        super().__init__()\n"
    "        self.a = nn.Linear(4, 4).to('cuda:0')\n        self.b = nn.Linear(4, 4).to('cuda:1')\n"
)
LINES = SPLIT_MODEL.count("\n")


@pytest.fixture
def project(tmp_path, monkeypatch):
    write(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'demo'\n",
            "bad.py": SPLIT_MODEL + "\nnet = SplitNet().cuda()\n",
            "good.py": SPLIT_MODEL + "\ndp = nn.DataParallel(SplitNet())\n",
        },
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MPCHECK_DEBUG", raising=False)
    return tmp_path


@pytest.fixture
def mp007_crashes_on_bad(monkeypatch):
    """MP007's check raises on bad.py (saying in which process it ran) and works elsewhere."""
    rule = rules_by_code()["MP007"]
    real = rule.check

    def check(self, ctx):
        if ctx.path.endswith("bad.py"):
            raise KeyError(f"boom in {os.getpid()}")
        return real(self, ctx)

    monkeypatch.setattr(rule, "check", check)


def lint(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_rule_that_raises_is_an_internal_error_naming_file_and_rule(project, capsys, mp007_crashes_on_bad):
    code, out, err = lint(capsys, "--no-cache", "--jobs", "1")
    assert code == 2, (out, err)
    assert f"mpcheck: error: crashed while checking bad.py with rule MP007: KeyError: 'boom in {os.getpid()}'" in err
    assert "please report it" in err and "MPCHECK_DEBUG=1" in err and "Traceback" not in err
    assert f"good.py:{LINES + 2}:" in out and "MP002" in out  # the other file is still checked
    assert "bad.py" not in out


def test_a_run_with_a_crash_never_says_all_checks_passed(project, capsys, mp007_crashes_on_bad):
    (project / "good.py").write_text(SPLIT_MODEL)  # clean: the crash is the only news
    code, out, err = lint(capsys, "--no-cache", "--jobs", "1")
    assert code == 2 and "crashed while checking bad.py" in err
    assert "All checks passed" not in out + err


def test_analyze_raises_the_crash_to_its_caller(mp007_crashes_on_bad):
    with pytest.raises(analysis.RuleCrash, match="bad.py with rule MP007") as caught:
        analysis.analyze("bad.py", SPLIT_MODEL + "\nnet = SplitNet().cuda()\n", frozenset({"MP007"}), "bad", {})
    assert caught.value.code == "MP007" and isinstance(caught.value.__cause__, KeyError)


def test_the_traceback_under_mpcheck_debug(project, capsys, mp007_crashes_on_bad, monkeypatch):
    monkeypatch.setenv("MPCHECK_DEBUG", "1")
    code, _, err = lint(capsys, "--no-cache", "--jobs", "1")
    assert code == 2
    assert "crashed while checking bad.py with rule MP007" in err
    assert "Traceback" in err and "in check" in err  # the raising function's frame


def test_a_crash_in_a_worker_process(project, capsys, mp007_crashes_on_bad, monkeypatch):
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_FILES", 1)
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_CHARS", 0)
    code, out, err = lint(capsys, "--no-cache", "--jobs", "2")
    assert code == 2, (out, err)
    assert "crashed while checking bad.py with rule MP007: KeyError: 'boom in " in err
    assert f"boom in {os.getpid()}'" not in err  # it did run in another process
    assert "MP002" in out


def test_a_crashed_file_is_not_cached_as_clean(project, capsys, mp007_crashes_on_bad, monkeypatch):
    for _ in range(2):  # the second run may not take a stored "no findings" for bad.py
        code, out, err = lint(capsys)
        assert code == 2, (out, err)
        assert "crashed while checking bad.py with rule MP007" in err
        assert "MP002" in out  # good.py: from the analysis, then from the cache
    monkeypatch.undo()  # the rule works again: bad.py's MP007 is found
    monkeypatch.chdir(project)
    code, out, err = lint(capsys)
    assert code == 1, err
    assert f"bad.py:{LINES + 2}:" in out and "MP007" in out


def test_a_crash_of_the_summary_is_an_internal_error_and_not_cached(tmp_path, capsys, monkeypatch):
    from mpcheck.devices import summary

    write(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'demo'\n",
            "model.py": SPLIT_MODEL,
            "train.py": "import torch.nn as nn\nfrom model import SplitNet\n\ndp = nn.DataParallel(SplitNet())\n",
        },
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MPCHECK_DEBUG", raising=False)

    def explode(module, modname, gpus=(), project=None):
        raise ValueError(f"cannot summarise {modname}")

    monkeypatch.setattr(summary, "summarize_module", explode)
    for _ in range(2):  # train.py's result, made without model.py's summary, is not stored
        code, out, err = lint(capsys, "train.py")
        assert code == 2, (out, err)
        assert "internal error while summarising model.py: ValueError: cannot summarise model" in err
    monkeypatch.undo()  # the device model works again: the split class is known to train.py
    monkeypatch.chdir(tmp_path)
    code, out, err = lint(capsys, "train.py")
    assert code == 1 and "MP002" in out, err
