"""lint/parse_ahead.py: one file parsed in a forked process while the summaries are chosen gives
what parsing and analysing it here gives, and a forked process that dies costs only time."""

from __future__ import annotations

import os
import textwrap

import pytest

from mpcheck.lint import parse_ahead, pipeline

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="the parse is forked")


def _where(task, tree):
    """An analysis that says where it ran and what it was given."""
    return task, os.getpid(), type(tree).__name__, tree.code if tree is not None else None


@needs_fork
def test_the_tree_is_made_in_the_forked_process_and_the_result_comes_back():
    ahead = parse_ahead.ParseAhead("x = 1\n", _where)
    task, pid, kind, code = ahead.result(("task", 1))
    assert (task, kind, code) == (("task", 1), "Module", "x = 1\n")
    assert pid != os.getpid()
    ahead.close()


@needs_fork
def test_a_forked_process_that_died_is_replaced_by_this_one():
    ahead = parse_ahead.ParseAhead("y = 2\n", _where)
    ahead._proc.kill()  # out of memory, or killed by a user: no result will come
    ahead._proc.join()
    task, pid, kind, code = ahead.result(("again",))
    assert (task, pid, kind, code) == (("again",), os.getpid(), "Module", "y = 2\n")


@needs_fork
def test_closing_before_the_result_stops_the_forked_process():
    ahead = parse_ahead.ParseAhead("z = 3\n", _where)
    proc = ahead._proc
    ahead.close()
    assert not proc.is_alive()


def test_a_text_that_does_not_parse_reaches_the_analysis_as_no_tree():
    ahead = parse_ahead.ParseAhead("def (:\n", _where)
    assert ahead.result(("t",))[2:] == ("NoneType", None)


@needs_fork
def test_one_big_file_linted_with_workers_finds_what_one_process_finds(tmp_path, monkeypatch, capsys):
    # A file over the threshold, importing a module of its project (a summary to make), with a bug.
    (tmp_path / "parts.py").write_text(
        textwrap.dedent(
            """\
            import torch.nn as nn

            class Head(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(8, 2).to("cuda:1")

                def forward(self, x):
                    return self.fc(x)
            """
        )
    )
    filler = "".join(f"def helper_{i}(a, b):\n    return a + b * {i}\n\n\n" for i in range(1500))
    main = tmp_path / "train.py"
    main.write_text(
        textwrap.dedent(
            """\
            import torch
            import torch.nn as nn
            from parts import Head

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Linear(4, 8).to("cuda:0")
                    self.head = Head()

                def forward(self, x):
                    return self.head(self.body(x.to("cuda:0")))
            """
        )
        + filler
    )
    assert len(main.read_text()) >= pipeline.PARSE_AHEAD_MIN_CHARS
    made: list[int] = []
    real = parse_ahead.ParseAhead.__init__

    def counted(self, text, analyse):
        made.append(len(text))
        real(self, text, analyse)

    monkeypatch.setattr(parse_ahead.ParseAhead, "__init__", counted)
    monkeypatch.chdir(tmp_path)
    import json

    from mpcheck import cli

    def run(jobs):
        code = cli.main(["--no-cache", "--exit-zero", "--output-format", "json", "--jobs", str(jobs), "train.py"])
        assert code == 0
        return json.loads(capsys.readouterr().out)

    forked, here = run(2), run(1)
    assert made == [len(main.read_text())]  # forked for --jobs 2 only
    assert forked == here
    assert [(f["code"], f["line"]) for f in forked] == [("MP001", 12)]  # Head's cuda:1 gets cuda:0
