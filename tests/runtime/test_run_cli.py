"""`mpcheck run`: the program runs as python would run it, then the report."""

import json
import subprocess
import sys
import textwrap

import pytest

from mpcheck.runtime.commands import run
from mpcheck.runtime.commands.run import main

SPLIT = textwrap.dedent(
    """
    import sys
    import torch
    from torch import nn

    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.Linear(8, 8)
            self.second = nn.Linear(8, 8, device="meta")

        def forward(self, x):
            h = self.first(x)
            return self.second(h)

    net = Split()
    out = net(torch.randn(2, 8))
    print("argv", sys.argv[1:], __name__)
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    """
)


@pytest.fixture(autouse=True)
def checks_without_cuda(monkeypatch):
    """The checks are the same on any device: these tests run the command in-process on CPU and meta
    tensors, past its refusal to run where CUDA is missing (tested on its own below)."""
    monkeypatch.setattr(run, "cuda_available", lambda: True)


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(SPLIT)
    return p


def test_missing_script_exits_2_naming_it(capsys, tmp_path):
    missing = tmp_path / "nope.py"
    assert main([str(missing)]) == 2
    assert "nope.py" in capsys.readouterr().err


def test_no_program_exits_2(capsys):
    assert main([]) == 2
    assert "no program given" in capsys.readouterr().err


def test_raise_mode_prints_the_error_and_the_report(capsys, script):
    assert main([str(script)]) == 1
    err = capsys.readouterr().err
    assert "DeviceMismatchError" in err and "MP001" in err
    assert f"{script}:14" in err  # `return self.second(h)`
    assert "mpcheck runtime report" in err


def test_move_mode_runs_to_the_end_with_argv_and_exit_status(capsys, script):
    assert main(["--on-mismatch", "move", str(script), "3"]) == 3
    out, err = capsys.readouterr()
    assert "argv ['3'] __main__" in out
    assert "net.second" in err  # the module path is named after the user's variable
    # the program succeeded but an error-level finding was reported: exit 1
    assert main(["--on-mismatch", "move", str(script)]) == 1


def test_json_output_has_findings_transfers_memory(capsys, script, tmp_path):
    report = tmp_path / "r.json"
    trace = tmp_path / "t.json"
    main(["--on-mismatch=move", "--output-format", "json", "-o", str(report), "--trace", str(trace), str(script)])
    data = json.loads(report.read_text())
    assert set(data) >= {"findings", "transfers", "memory"}
    (f,) = data["findings"]
    assert {"code", "name", "path", "line", "column", "message", "severity", "devices", "modules", "suggestion"} <= set(
        f
    )
    assert f["code"] == "MP001" and f["line"] == 14 and f["modules"] == ["net.second"]
    assert data["memory"]["cpu"]["params"] == (64 + 8) * 4
    tr = json.loads(trace.read_text())
    assert "traceEvents" in tr


def test_dash_c_and_dash_m(capsys, tmp_path, monkeypatch):
    assert main(["-c", "import sys; print('hi', sys.argv); sys.exit(5)", "x"]) == 5
    assert "hi ['-c', 'x']" in capsys.readouterr().out
    (tmp_path / "mymod.py").write_text("import sys\nprint('mod', __name__, sys.argv[1:])\n")
    monkeypatch.chdir(tmp_path)
    assert main(["-m", "mymod", "a"]) == 0
    assert "mod __main__ ['a']" in capsys.readouterr().out


def test_uncaught_exception_gives_1_and_a_traceback(capsys):
    assert main(["-c", "raise ValueError('boom')"]) == 1
    err = capsys.readouterr().err
    assert "ValueError: boom" in err and "Traceback" in err


def test_options_after_the_script_belong_to_the_script(capsys, tmp_path):
    p = tmp_path / "a.py"
    p.write_text("import sys; print(sys.argv[1:])\n")
    assert main([str(p), "--strict", "-o", "x"]) == 0
    assert "['--strict', '-o', 'x']" in capsys.readouterr().out


def test_abbreviated_options_keep_their_values(capsys, script, tmp_path):
    # argparse accepts `--sel CODES` for `--select CODES`: CODES is the option's, not the program.
    report = tmp_path / "r.json"
    assert main(["--on-mis", "move", "--output-f", "json", "--sel", "MP001", "-o", str(report), str(script), "4"]) == 4
    assert "argv ['4'] __main__" in capsys.readouterr().out
    assert [f["code"] for f in json.loads(report.read_text())["findings"]] == ["MP001"]
    # an ambiguous prefix is argparse's error, exit 2, and no program runs
    assert main(["--o", "x", str(script)]) == 2
    assert "ambiguous option" in capsys.readouterr().err


def test_the_console_script_dispatches_run(script):
    import torch

    r = subprocess.run(
        [sys.executable, "-m", "mpcheck.cli", "run", "--on-mismatch", "move", str(script), "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if torch.cuda.is_available():
        assert r.returncode == 1 and "MP001" in r.stderr, r.stderr
    else:
        assert r.returncode == 2 and "CUDA is not available" in r.stderr, r.stderr


def test_without_cuda_the_program_does_not_run_and_the_dry_run_is_suggested(capsys, script, monkeypatch):
    monkeypatch.setattr(run, "cuda_available", lambda: False)
    assert main(["--on-mismatch", "move", str(script), "0"]) == 2
    out, err = capsys.readouterr()
    assert "argv" not in out  # the program did not run
    assert "CUDA is not available" in err and f"mpcheck dryrun --gpus N {script}" in err
    assert "Traceback" not in err and "No device findings" not in err
    assert main(["--help"]) == 0
    assert "on a machine without CUDA" in " ".join(capsys.readouterr().out.split())


def test_output_paths_are_those_of_the_launch_folder_when_the_program_changes_folder(capsys, tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "prog.py").write_text("import os\nos.chdir('elsewhere')\n")
    monkeypatch.chdir(tmp_path)
    assert main(["--output-format", "json", "-o", "r.json", "--trace", "t.json", "prog.py"]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["findings"] == []
    assert "traceEvents" in json.loads((tmp_path / "t.json").read_text())
    assert list((tmp_path / "elsewhere").iterdir()) == []
