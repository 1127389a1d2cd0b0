"""A module's input on the wrong device whose cause is the module's own placement, reported where that went
wrong: a stage never placed (at the line that built it, not "move the input to the CPU"), and a module shared by
two stages (at the line that moved it the second time, naming the sharing). Stages placed one by one, nested
moves and a CPU stage fed from the CPU stay silent."""

import pytest
from dryrun_helpers import codes_at

STAGE = """
import torch
import torch.nn as nn

class Stage(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.lin(x))
"""


def test_a_stage_never_placed_is_reported_where_it_was_built(script, dryrun_cli):
    s = script(
        STAGE
        + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0 = Stage()  # <- built
        self.s1 = Stage().to("cuda:1")

    def forward(self, x):
        h = self.s0(x.to("cuda:0"))  # <- use
        return self.s1(h.to("cuda:1"))

net = Net()
net(torch.randn(4, 16)).sum().backward()
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("built"))]
    f = report["findings"][0]
    assert f["message"].startswith("Stage 'net.s0' was never placed on a GPU")
    assert f"train.py:{s.line('use')}" in f["message"]
    assert f["devices"] == ["cpu", "cuda:0"]
    assert f["suggestion"].startswith("place it where it is built: `.to('cuda:0')`")


def test_a_whole_model_never_placed_is_reported_at_its_construction(script, dryrun_cli):
    s = script(
        STAGE
        + """
model = Stage()  # <- built
out = model(torch.randn(4, 16).cuda())
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("built"))]
    assert "'model' was never placed" in report["findings"][0]["message"]


def test_a_default_argument_module_shared_by_two_stages(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

class Block(nn.Module):
    def __init__(self, norm=nn.LayerNorm(16)):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.norm = norm

    def forward(self, x):
        return self.norm(torch.relu(self.lin(x)))

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0 = Block().to("cuda:0")  # <- first
        self.s1 = Block().to("cuda:1")  # <- second

    def forward(self, x):
        return self.s1(self.s0(x.to("cuda:0")).to("cuda:1"))

net = Net()
net(torch.randn(4, 16)).sum().backward()
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP007", s.line("second"))]
    f = report["findings"][0]
    assert "LayerNorm 'net.s0.norm' is shared" in f["message"]
    assert "'net.s0' and 'net.s1'" in f["message"]
    assert f"train.py:{s.line('first')}" in f["message"]
    assert "default argument" in f["suggestion"]


def test_one_list_of_blocks_in_two_sequentials(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

blocks = [nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(4)]
first = nn.Sequential(*blocks[:3]).to("cuda:0")
second = nn.Sequential(*blocks[2:]).to("cuda:1")  # <- second
out = second(first(torch.randn(4, 16).to("cuda:0")).to("cuda:1"))
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP007", s.line("second"))]
    assert "'first.2' is shared" in report["findings"][0]["message"]


@pytest.mark.parametrize(
    "program",
    [
        # each stage its own norm; the whole model placed, then one stage moved on (nested moves)
        """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0, self.s1 = Stage(), Stage()

    def forward(self, x):
        return self.s1(self.s0(x.to("cuda:0")).to("cuda:1"))

net = Net().to("cuda:0")
net.s1.to("cuda:1")
net(torch.randn(4, 16)).sum().backward()
""",
        # a stage meant for the CPU, fed from the CPU
        """
cpu_stage, gpu_stage = Stage(), Stage().to("cuda:0")
h = cpu_stage(torch.randn(4, 16))
gpu_stage(h.to("cuda:0")).sum().backward()
""",
        # one activation module (no weights) shared by both stages
        """
act = nn.GELU()
s0 = nn.Sequential(nn.Linear(16, 16), act).to("cuda:0")
s1 = nn.Sequential(nn.Linear(16, 16), act).to("cuda:1")
s1(s0(torch.randn(4, 16).to("cuda:0")).to("cuda:1")).sum().backward()
""",
    ],
)
def test_placements_that_work_are_silent(script, dryrun_cli, program):
    s = script(STAGE + program)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["stopped"]) == (0, None), report["stopped"]
    assert report["findings"] == []


# Adapters wrapped around layers of blocks already placed: the wrapper's own weights stay on the CPU
# (the blocks' earlier moves did not move what was built after them). One finding, where the wrapper is
# built, however many layers it wraps and however many ops inside it meet its CPU weights.
ADAPTERS = """
import torch
import torch.nn as nn

class Adapter(nn.Module):
    def __init__(self, base, r=4):
        super().__init__()
        self.base = base
        self.A = nn.Parameter(torch.randn(r, base.in_features) * 0.01)
        self.B = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        return self.base(x) + (x @ self.A.t()) @ self.B.t()

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))

blocks = nn.ModuleList([Block() for _ in range(4)])
blocks.requires_grad_(False)                      # the base stays frozen; the adapters train
def wrap():
    for blk in blocks:
        blk.fc1 = Adapter(blk.fc1)  # <- built
{place}
{wrap_after}
for _ in range(2):
    h = torch.randn(8, 16).to("cuda:0")
    for i, blk in enumerate(blocks):
        h = blk(h.to(f"cuda:{{i // 2}}"))
    h.sum().backward()
"""
PLACE = "for i, blk in enumerate(blocks):\n    blk.to(f'cuda:{i // 2}')"


def test_adapters_built_after_their_blocks_were_placed_are_one_finding_where_they_are_built(script, dryrun_cli):
    s = script(ADAPTERS.format(place=PLACE, wrap_after="wrap()"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP001", s.line("built"))]
    (f,) = report["findings"]
    assert "was never placed on a GPU" in f["message"]
    assert f["modules"] and all(m.endswith("fc1") for m in f["modules"]), f["modules"]  # the adapters only


def test_adapters_built_before_their_blocks_are_placed_are_silent(script, dryrun_cli):
    s = script(ADAPTERS.format(place="wrap()\n" + PLACE, wrap_after=""))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
