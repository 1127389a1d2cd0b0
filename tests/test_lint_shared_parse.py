"""A linted file that other linted files import is parsed once: its summary is cut
from the tree its lint uses (lint/slices.py summary_tree), in the same task, once
the summaries it needs are made (lint/schedule.py). The summary must be the one
the cut text gives, and the importer's finding that depends on it must stay, in
one process and in workers, and through an import cycle."""

from __future__ import annotations

import json
import textwrap

import pytest
from lint_fakes import write
from test_lint_slices import MODULE

from mpcheck import cli, parsing
from mpcheck.devices.summary import summarize_module
from mpcheck.lint import pipeline, schedule
from mpcheck.lint.slices import summary_source, summary_tree


def from_text(text, names):
    return summarize_module(parsing.parse(summary_source(text, names)), "m")


def from_tree(text, names):
    tree = summary_tree(parsing.parse(text), text, names)
    assert tree is not None
    return summarize_module(tree, "m")


@pytest.mark.parametrize("names", [["Net"], ["place"], ["Half", "SECOND"], ["Other"], ["LATE"], ["nothing"]])
def test_the_tree_cut_summarises_as_the_text_cut(names):
    assert from_tree(MODULE, names) == from_text(MODULE, names)
    assert json.dumps(from_tree(MODULE, names), sort_keys=True) == json.dumps(from_text(MODULE, names), sort_keys=True)


def test_a_dropped_method_becomes_the_same_stub_and_a_class_line_of_two_statements_stays():
    text = textwrap.dedent(
        """\
        import torch.nn as nn

        class Net(nn.Module):
            a = 1; b = 2
            def __init__(self):
                super().__init__()
                self.l = nn.Linear(2, 2).to("cuda:1")
            @property
            def unused(self):
                self.h = nn.Linear(2, 2).to("cuda:0")
                return self.h
            def forward(self, x):
                return self.l(x)
        """
    )
    tree = summary_tree(parsing.parse(text), text, ["Net"])
    assert tree is not None
    code = tree.code
    assert "def unused(self): self.h = None" in code and "@property" not in code and "a = 1; b = 2" in code
    assert summarize_module(tree, "m") == from_text(text, ["Net"])


def test_a_line_of_statements_over_several_lines_is_left_to_the_text_cut():
    # The text cut keeps lines, not statements: `x = (1,\n 2); y = 3` with only y needed would keep
    # a part of a statement. The tree cannot be cut the same way: None, the caller parses the text.
    text = "x = (1,\n     2); y = 3\nz = 4\n"
    assert summary_tree(parsing.parse(text), text, ["y"]) is None


def test_a_module_that_changes_the_default_device_is_summarised_whole():
    text = "import torch\ntorch.set_default_device('cuda:1')\ndef f():\n    return torch.zeros(1)\ndef g():\n    pass\n"
    tree = parsing.parse(text)
    assert summary_tree(tree, text, ["g"]) is tree


def test_the_schedule_runs_summaries_first_and_breaks_a_cycle_at_its_smallest_file():
    a = schedule.Lint("a", {"b.py"}, "a.py", 10)
    b = schedule.Lint("b", {"a.py"}, "b.py", 20)
    c = schedule.Lint("c", {"lib.py", "b.py"}, None, 5)
    plan = schedule.Schedule(["lib.py"], [a, b, c])
    order = []
    while plan:
        step = plan.next(idle=True)
        assert step is not None
        order.append(step.summary or (step.lint.key, step.lint.gives))
        made = [step.summary] if step.summary else ([step.lint.gives] if step.lint.gives else [])
        for path in made:
            plan.made(path)
    # a and b wait for each other: the smaller, a, gives its summary away (summary alone) before anything
    # runs; b then makes its own, which c waits for with lib's.
    assert order == ["a.py", "lib.py", ("b", "b.py"), ("a", None), ("c", None)]
    assert plan.split == 1


def test_a_busy_schedule_waits_instead_of_parsing_twice():
    a = schedule.Lint("a", {"b.py"}, None, 10)
    b = schedule.Lint("b", set(), "b.py", 20)
    plan = schedule.Schedule([], [a, b])
    assert plan.next(idle=False).lint is b
    assert plan.next(idle=False) is None and plan.split == 0
    plan.made("b.py")
    assert plan.next(idle=False).lint is a


SPLIT_A = (
    "import torch.nn as nn\nfrom b import NetB\n\n\nclass NetA(nn.Module):\n"
    "    def __init__(self):\n        super().__init__()\n"
    "        self.a = nn.Linear(4, 4).to('cuda:0')\n        self.b = nn.Linear(4, 4).to('cuda:1')\n\n\n"
    "wrapped = nn.DataParallel(NetB())\n"
)
SPLIT_B = SPLIT_A.replace("from b import NetB", "from a import NetA").replace("class NetA", "class NetB")
SPLIT_B = SPLIT_B.replace("DataParallel(NetB())", "DataParallel(NetA())")


@pytest.fixture
def cycle(tmp_path, monkeypatch):
    # a.py and b.py each wrap the other's split model in DataParallel (MP002): each finding needs
    # the other file's summary, and both files are linted: a cycle for the schedule.
    write(tmp_path, {"pyproject.toml": "[project]\nname='p'\n", "a.py": SPLIT_A, "b.py": SPLIT_B, "c.py": "import b\n"})
    monkeypatch.chdir(tmp_path)
    parses: list[str] = []
    parse = parsing.parse

    def counting_parse(source):
        parses.append(source)
        return parse(source)

    monkeypatch.setattr(parsing, "parse", counting_parse)
    return parses


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_import_cycle_of_linted_files_keeps_both_findings(cycle, capsys, monkeypatch, jobs):
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_CHARS", 0)
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_FILES", 1)
    cli.main(["--jobs", jobs, "--no-cache", "--select", "MP002", "--output-format", "json", "a.py", "b.py"])
    found = sorted((d["path"], d["line"], d["code"]) for d in json.loads(capsys.readouterr().out))
    assert found == [("a.py", 12, "MP002"), ("b.py", 12, "MP002")]


def test_a_linted_file_that_is_imported_is_parsed_once(tmp_path, monkeypatch, capsys, cycle):
    # b.py no longer imports a.py: no cycle. a.py's finding needs b.py's summary, and b.py is linted
    # too: one parse of b.py gives both (its cut text is never parsed).
    (tmp_path / "b.py").write_text(SPLIT_B.replace("from a import NetA", "").replace("NetA()", "nn.Linear(2, 2)"))
    cli.main(["--jobs", "1", "--no-cache", "--select", "MP002", "--output-format", "json", "a.py", "b.py"])
    found = sorted((d["path"], d["line"], d["code"]) for d in json.loads(capsys.readouterr().out))
    assert found == [("a.py", 12, "MP002")]
    b_text = (tmp_path / "b.py").read_text()
    assert cycle.count(b_text) == 1 and not any(t != b_text and "class NetB" in t for t in cycle)


def test_without_processes_the_schedule_runs_in_this_process(cycle, capsys, monkeypatch):
    import concurrent.futures

    class NoProcesses(concurrent.futures.ThreadPoolExecutor):
        def __init__(self, max_workers=None, mp_context=None):
            super().__init__(max_workers)

        def submit(self, *a, **k):
            raise OSError("no processes here")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", NoProcesses)
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_CHARS", 0)
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_FILES", 1)
    cli.main(["--jobs", "2", "--no-cache", "--select", "MP002", "--output-format", "json", "a.py", "b.py"])
    found = sorted((d["path"], d["line"], d["code"]) for d in json.loads(capsys.readouterr().out))
    assert found == [("a.py", 12, "MP002"), ("b.py", 12, "MP002")]


def test_a_free_worker_splits_only_a_file_no_bigger_than_what_is_running():
    """While other tasks run, parsing a big file twice costs more than waiting for the summary it needs."""
    big = schedule.Lint("big", {"small.py"}, "big.py", 500_000)
    small = schedule.Lint("small", {"big.py"}, "small.py", 1_000)
    other = schedule.Lint("other", {"big.py"}, None, 10)
    plan = schedule.Schedule([], [big, small, other])
    assert plan.next(idle=True, budget=20_000).summary == "small.py"  # the cheap side of the cycle
    plan = schedule.Schedule([], [schedule.Lint("b", {"x.py"}, "b.py", 500_000), schedule.Lint("c", {"b.py"}, None, 5)])
    assert plan.next(idle=True, budget=20_000) is None and plan.split == 0  # wait for the running task
    assert plan.next(idle=True).summary == "b.py" and plan.split == 1  # nothing runs: split it
    assert plan.size(schedule.Step(lint=big)) == 500_000
    sized = schedule.Schedule(["m.py"], [], {"m.py": 42})
    assert sized.size(sized.next(idle=True)) == 42


def test_the_longest_chain_of_work_starts_first():
    """The summary the biggest file waits for, then that file: a big file left to the end runs alone."""
    huge = schedule.Lint("huge", {"dep.py"}, "huge.py", 1_000_000)
    user = schedule.Lint("user", {"huge.py"}, None, 10)
    small = [schedule.Lint(f"s{i}", {f"lib{i}.py"}, None, 100) for i in range(3)]
    ready = schedule.Lint("ready", set(), None, 5_000)
    plan = schedule.Schedule(["lib0.py", "dep.py", "lib1.py", "lib2.py"], [huge, user, ready, *small])
    first = plan.next(idle=True)
    assert first.summary == "dep.py"
    plan.made("dep.py")
    for _ in range(3):
        plan.made(plan.next(idle=True).summary)
    assert plan.next(idle=True).lint is huge  # before the bigger-than-the-small files that are ready


def test_every_import_cycle_is_broken_before_the_run_and_only_once_per_cycle():
    # x -> y -> z -> x (one cycle) and p <-> q (another); r waits for x, outside any cycle.
    x = schedule.Lint("x", {"y.py"}, "x.py", 300)
    y = schedule.Lint("y", {"z.py"}, "y.py", 200)
    z = schedule.Lint("z", {"x.py"}, "z.py", 100)
    p = schedule.Lint("p", {"q.py"}, "p.py", 5)
    q = schedule.Lint("q", {"p.py"}, "q.py", 50)
    r = schedule.Lint("r", {"x.py"}, "r.py", 1)
    plan = schedule.Schedule([], [x, y, z, p, q, r])
    assert plan.split == 2 and z.gives is None and p.gives is None and x.gives == "x.py" and r.gives == "r.py"
    done = 0
    while plan:
        step = plan.next(idle=False)  # never idle: a cycle left would stop the run here
        assert step is not None
        done += 1
        made = [step.summary] if step.summary else ([step.lint.gives] if step.lint.gives else [])
        for path in made:
            plan.made(path)
    assert done == 8 and plan.split == 2
