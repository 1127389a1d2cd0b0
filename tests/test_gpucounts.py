"""The assumed GPU count (devices/gpucount.py, rules/gpucounts.py): a finding that depends on
torch.cuda.device_count() is reported only when every count the code allows gives it, and says so;
a file that never asks the count is interpreted once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from mpcheck import analysis
from mpcheck.devices import model as device_model
from mpcheck.finding import Finding
from mpcheck.rules.gpucounts import CountRun, assumption, merge, worth_going_on

REPO = Path(__file__).resolve().parent.parent
ALL = frozenset({"MP001", "MP005", "MP006", "MP007", "MP008", "MP009", "MP011"})


def lint(source: str, gpus=(2, 4, 8)) -> list[Finding]:
    return analysis.analyze("x.py", textwrap.dedent(source), ALL, "x", {}, gpus).findings


def f(code="MP001", line=3, message="m", devices=("cuda:0", "cuda:1")) -> Finding:
    return Finding(code, "name", "x.py", line, 1, message, devices=devices)


# ----------------------------------------------------------------- merge


def test_kept_when_the_fewest_allowed_count_gives_it_naming_the_counts_that_do():
    runs = [
        CountRun(2, [f(line=3), f(line=5), f(line=6)], False),
        CountRun(4, [f(line=3), f(line=7)], False),
        CountRun(8, [f(line=3), f(line=6)], False),
    ]
    out = merge([], runs)
    assert [(x.line, x.message) for x in out] == [
        (3, "With 2, 4 or 8 GPUs: m"),
        (5, "With 2 GPUs: m"),
        (6, "With 2 or 8 GPUs: m"),
    ]  # line 7, with 4 GPUs only, is not kept: the program runs with 2


def test_refused_counts_do_not_count_and_the_bound_is_said():
    runs = [CountRun(2, [], True), CountRun(4, [f(message="a")], False), CountRun(8, [f(message="b")], False)]
    assert assumption(runs) == "with 4 GPUs or more"
    (out,) = merge([], runs)
    assert out.message == "With 4 GPUs (the fewest the code allows; likewise with 8): a"
    assert merge([], [CountRun(2, [f()], True), CountRun(4, [f()], True)]) == []  # no count allowed: nothing known


def test_worth_going_on_only_while_a_new_finding_is_common_to_the_allowed_counts():
    base = [f(line=1)]
    assert worth_going_on(base, [])
    assert not worth_going_on(base, [CountRun(2, [f(line=1)], False)])  # nothing beyond the base
    assert worth_going_on(base, [CountRun(2, [], True)])  # a refused count decides nothing
    assert worth_going_on(base, [CountRun(2, [f(line=3)], False)])
    assert worth_going_on(base, [CountRun(2, [f(line=3)], False), CountRun(4, [f(line=4)], False)])
    # what the fewest allowed count gives decides: nothing new with 2 GPUs, nothing to keep with 4 or 8
    assert not worth_going_on(base, [CountRun(2, [f(line=1)], False), CountRun(4, [f(line=4)], False)])
    assert worth_going_on(base, [CountRun(2, [], True), CountRun(4, [f(line=4)], False)])


def test_a_base_finding_is_not_repeated_and_keeps_its_message():
    base = [f(message="base")]
    out = merge(base, [CountRun(2, [f(message="two")], False), CountRun(4, [f(message="four")], False)])
    assert [x.message for x in out] == ["base"]


def test_a_constant_index_needs_an_upper_bound():
    same = f(code="MP009", devices=("cuda:7",))
    unbounded = [CountRun(2, [same], False), CountRun(4, [same], False)]
    assert merge([], unbounded) == []  # a machine with 8 GPUs has cuda:7
    bounded = [CountRun(2, [same], False), CountRun(4, [same], False), CountRun(8, [], True)]
    assert len(merge([], bounded)) == 1
    moving = [CountRun(2, [f(code="MP009", devices=("cuda:2",))], False)]
    moving.append(CountRun(4, [f(code="MP009", devices=("cuda:4",))], False))
    assert len(merge([], moving)) == 1  # devices[n]: the index follows the count


def test_a_fix_is_kept_only_when_every_count_gives_the_same_edit():
    from mpcheck.finding import Fix

    one, other = Fix(1, 1, 1, 2, "a"), Fix(1, 1, 1, 2, "b")
    runs = [CountRun(2, [replace(f(), fix=one)], False), CountRun(4, [replace(f(), fix=other)], False)]
    assert merge([], runs)[0].fix is None
    runs[1] = CountRun(4, [replace(f(), fix=one)], False)
    assert merge([], runs)[0].fix == one


# ----------------------------------------------------------------- end to end

ROUND_ROBIN = """
import torch
import torch.nn as nn

class Tower(nn.Module):
    def __init__(self, depth=8):
        super().__init__()
        n = torch.cuda.device_count()
        self.devices = [torch.device(f"cuda:{i}") for i in range(n)]
        self.layers = nn.ModuleList([nn.Linear(8, 8).to(self.devices[i % n]) for i in range(depth)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x.to(self.devices[i % len(self.devices)]))
        return x
"""


def test_a_finding_with_the_fewest_gpus_is_reported_with_the_counts_that_give_it():
    # 8 layers dealt over 8 GPUs is a plain chain; over 2 or 4 GPUs it ping-pongs.
    assert [x.code for x in lint(ROUND_ROBIN, gpus=(2,))] == ["MP006"]
    (found,) = lint(ROUND_ROBIN, gpus=(2, 4, 8))
    assert found.code == "MP006" and found.message.startswith("With 2 GPUs (likewise with 4): ")
    assert lint(ROUND_ROBIN, gpus=(8,)) == []
    assert (
        lint(
            ROUND_ROBIN.replace(
                "n = torch.cuda.device_count()", "n = torch.cuda.device_count()\n        assert n >= 8"
            ),
            gpus=(2, 4, 8),
        )
        == []
    )


def test_message_states_the_assumption_and_the_missing_device():
    (found,) = lint(
        """
        import torch

        n = torch.cuda.device_count()
        devices = [torch.device(f"cuda:{i}") for i in range(n)]
        head = torch.nn.Linear(4, 4).to(devices[n])
        """
    )
    assert found.code == "MP009" and found.line == 6
    assert found.message.startswith("With 2 GPUs (likewise with 4 or 8): `devices[n]` reads entry 2")
    assert "cuda:2 does not exist with 2 GPUs (the last is cuda:1)" in found.message


def test_count_unknown_says_nothing():
    assert lint("import torch\nx = torch.zeros(2).to(f'cuda:{k + 1}')\n") == []
    # the same code under counts, with k from device_count(): found
    src = "import torch\nk = torch.cuda.device_count() - 1\nx = torch.zeros(2).to(f'cuda:{k + 1}')\n"
    assert [x.code for x in lint(src)] == ["MP009"]
    assert lint(src, gpus=()) == []


HEAD_ON_LAST = """
import torch
import torch.nn as nn

n = torch.cuda.device_count()
{guard}
body = nn.Linear(8, 8).to("cuda:0")
head = nn.Linear(8, 8).to(f"cuda:{{n - 1}}")
y = head(body(torch.zeros(8).to("cuda:0")))
"""


@pytest.mark.parametrize("guard", ["assert n >= 4", "if n < 4:\n    raise SystemExit('needs 4 GPUs')"])
def test_an_assert_or_a_raise_bounds_the_count(guard):
    (found,) = lint(HEAD_ON_LAST.format(guard=guard))
    assert found.code == "MP001"
    assert found.message.startswith("With 4 GPUs (the fewest the code allows; likewise with 8): ")
    assert "cuda:3" in found.message
    assert lint(HEAD_ON_LAST.format(guard=guard), gpus=(2,)) == []  # the only count assumed is refused
    (unguarded,) = lint(HEAD_ON_LAST.format(guard=""))
    assert unguarded.message.startswith("With 2 GPUs (likewise with 4 or 8): ")


def test_a_file_that_never_asks_the_count_is_interpreted_once(monkeypatch):
    built = []
    real = device_model.Interp

    def counting(*args, **kw):
        built.append(args[3] if len(args) > 3 else kw.get("gpu_count"))
        return real(*args, **kw)

    monkeypatch.setattr(device_model, "Interp", counting)
    lint("import torch\nx = torch.zeros(2).to('cuda:1')\ny = x + torch.zeros(2).to('cuda:0')\n")
    assert built == [None]
    built.clear()
    # Asked, but the count changes nothing: the first count run finds nothing new, the others are skipped.
    lint("import torch\nn = torch.cuda.device_count()\nx = torch.zeros(2).to('cuda:1')\n")
    assert built == [None, 2]
    built.clear()
    lint(HEAD_ON_LAST.format(guard=""))  # a finding under every count: every count is run
    assert built == [None, 2, 4, 8]
    built.clear()
    lint(HEAD_ON_LAST.format(guard="assert n >= 4"))  # 2 is refused: it decides nothing
    assert built == [None, 2, 4, 8]


def test_gpus_flag_overrides_and_is_validated(tmp_path):
    (tmp_path / "t.py").write_text(textwrap.dedent(ROUND_ROBIN))
    (tmp_path / "pyproject.toml").write_text("[tool.mpcheck]\ngpus = [8]\n")

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "mpcheck", "--no-cache", *args, "t.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        )

    assert run().returncode == 0
    r = run("--gpus", "2")
    assert r.returncode == 1 and "MP006 With 2 GPUs:" in r.stdout
    r = run("--gpus", "2,three")
    assert r.returncode == 2 and "--gpus" in r.stderr
    (tmp_path / "pyproject.toml").write_text("[tool.mpcheck]\ngpus = [0]\n")
    r = run()
    assert r.returncode == 2 and "'gpus' must be" in r.stderr


def test_an_else_that_raises_bounds_the_count_too():
    guard = "if n >= 4:\n    pass\nelse:\n    raise SystemExit('needs 4 GPUs')"
    (found,) = lint(HEAD_ON_LAST.format(guard=guard))
    assert found.message.startswith("With 4 GPUs (the fewest the code allows; likewise with 8): ")


def test_a_one_line_if_that_raises_bounds_the_count():
    (found,) = lint(HEAD_ON_LAST.format(guard="if n < 4: raise SystemExit('needs 4 GPUs')"))
    assert found.message.startswith("With 4 GPUs (the fewest the code allows; likewise with 8): ")


def test_torch_accelerator_device_count_is_the_count_too():
    src = "import torch\nk = torch.accelerator.device_count()\nx = torch.zeros(2).to(f'cuda:{k}')\n"
    assert [x.code for x in lint(src)] == ["MP009"]


def test_an_index_under_a_test_the_model_cannot_decide_is_not_reported():
    src = """
    import torch

    def hop(x, k, ready):
        n = torch.cuda.device_count()
        k = n - 1
        if ready:  # unknown: it may be what keeps k + 1 below n
            x = x.to(f"cuda:{k + 1}")
        y = x.to(f"cuda:{k + 1}") if ready else x
        return x, y
    """
    assert lint(src) == []
    assert [x.line for x in lint(src.replace("if ready:", "if True:"))] == [8]


def test_a_move_past_the_last_gpu_stops_the_program_there_and_nothing_after_it_is_reported():
    # `h.to(f"cuda:{k + 1}")` after the last stage names cuda:n: CUDA stops at that move, so the head
    # it would have met is no second finding (MP001 "h is on cuda:2 but the head is on cuda:1").
    found = lint(
        """
        import torch
        import torch.nn as nn

        N = torch.cuda.device_count()

        class Pipe(nn.Module):
            def __init__(self):
                super().__init__()
                self.stages = nn.ModuleList(nn.Linear(8, 8).to(f"cuda:{k}") for k in range(N))
                self.head = nn.Linear(8, 2).to(f"cuda:{N - 1}")

            def forward(self, x):
                outs = []
                for mb in x.to("cuda:0").chunk(4):
                    h = mb
                    for k, stage in enumerate(self.stages):
                        h = stage(h)
                        h = h.to(f"cuda:{k + 1}")
                    outs.append(self.head(h))
                return torch.cat(outs)
        """
    )
    assert [(x.code, x.line) for x in found] == [("MP009", 19)]


def test_a_finding_some_allowed_counts_lack_gets_no_fix():
    from mpcheck.finding import Fix

    edit = Fix(1, 1, 1, 2, "a")
    runs = [CountRun(2, [replace(f(), fix=edit)], False), CountRun(4, [], False)]
    (out,) = merge([], runs)
    assert out.message == "With 2 GPUs: m" and out.fix is None  # with 4 GPUs the edit would fix nothing


# ----------------------------------------------------------------- MP032: a split that waits for one GPU more


def lint32(source: str, gpus=(2, 4, 8)) -> list[Finding]:
    return analysis.analyze("x.py", textwrap.dedent(source), frozenset({"MP032"}), "x", {}, gpus).findings


_PICK = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        n = torch.cuda.device_count()
        self.devs = {devs}
        self.enc = nn.Linear(64, 64).to(self.devs[0])
        self.dec = nn.Linear(64, 8).to(self.devs[1])

    def forward(self, x):
        return self.dec(self.enc(x.to(self.devs[0])).to(self.devs[1]))

model = Net()
out = model(torch.randn(4, 64))
"""


def test_mp032_a_conditional_expression_that_splits_only_with_one_gpu_more_is_the_threshold():
    (found,) = lint32(_PICK.format(devs='["cuda:0", "cuda:1"] if n > 2 else ["cuda:0", "cuda:0"]'))
    assert (found.code, found.line) == ("MP032", 9)
    assert "`n > 2` is false" in found.message and "with 2 GPUs cuda:1 idles" in found.message
    assert found.devices == ("cuda:0", "cuda:1")


@pytest.mark.parametrize(
    "devs",
    [
        '["cuda:0", "cuda:1"] if n >= 2 else ["cuda:0", "cuda:0"]',  # the split runs with 2 GPUs
        '["cuda:0", "cuda:1"]',  # no test: the same every count
        '[f"cuda:{i + 1}" for i in range(2)] if n > 2 else ["cuda:0", "cuda:0"]',  # cuda:2 is not there with 2
        '["cuda:0", "cuda:0"]',  # never split
    ],
)
def test_mp032_silent_where_the_fewest_count_cannot_run_the_split_or_runs_it(devs):
    assert lint32(_PICK.format(devs=devs)) == []


def test_mp032_silent_where_a_larger_count_also_uses_a_gpu_the_fewest_lacks():
    source = _PICK.format(devs='["cuda:0", "cuda:1"] if n > 2 else ["cuda:0", "cuda:0"]') + textwrap.dedent(
        """
        if torch.cuda.device_count() > 2:
            teacher = nn.Linear(64, 8).to("cuda:2")
        """
    )
    assert lint32(source) == []


def test_mp032_silent_where_the_code_refuses_the_fewest_count():
    source = _PICK.format(devs='["cuda:0", "cuda:1"] if n > 2 else ["cuda:0", "cuda:0"]').replace(
        "n = torch.cuda.device_count()", "n = torch.cuda.device_count()\n        assert n >= 4"
    )
    assert lint32(source) == []  # 4 is the fewest allowed, and it splits there


def test_mp032_counts_compared_are_the_allowed_ones():
    source = _PICK.format(devs='["cuda:0", "cuda:1"] if n > 4 else ["cuda:0", "cuda:0"]').replace(
        "n = torch.cuda.device_count()", "n = torch.cuda.device_count()\n        assert n >= 4"
    )
    # With 2 GPUs the code stops; 4 is the fewest it allows, and with 4 it still falls back to one GPU although
    # the split over cuda:0 and cuda:1 would run there: reported, with 4 and 8 as the counts compared.
    found = analysis.analyze("x.py", textwrap.dedent(source), frozenset({"MP032"}), "x", {}, (2, 4, 8)).findings
    assert [(x.line, "with 4 GPUs `n > 4` is false" in x.message, "with 8 it splits" in x.message) for x in found] == [
        (10, True, True)
    ]
