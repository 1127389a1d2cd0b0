"""After a split model is collapsed onto one device (MP007), its forward's hops to the old stages' devices
feed modules now on the collapse's target, and torch calls inside its forward meet one operand on the target
and one on an old stage's device: those mismatches are the collapse's, counted on the MP007 finding, not
reported as MP001s of their own. Other mismatches stay reported."""

from dryrun_helpers import codes_at

PROGRAM = """
import torch
import torch.nn as nn

class TwoStages(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10).to("cuda:0")
        self.net2 = nn.Linear(10, 5).to("cuda:1")

    def forward(self, x):
        x = torch.relu(self.net1(x.to("cuda:0")))
        return self.net2(x.to("cuda:1"))  # <- hop

model = TwoStages()
head = nn.Linear(5, 2).to("cuda:1")
model.to("cuda:0")  # <- collapse
out = model(torch.randn(4, 10))
{after}
"""


def test_the_hop_into_a_collapsed_stage_is_counted_on_the_collapse(script, dryrun_cli):
    s = script(PROGRAM.format(after=""))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    assert codes_at(report) == [("MP007", s.line("collapse"))]
    assert report["findings"][0]["extra"]["mismatches_after"] == [f"{s.path}:{s.line('hop')}"]


def test_a_mismatch_outside_the_collapsed_model_is_still_reported(script, dryrun_cli):
    s = script(PROGRAM.format(after="head(out)  # <- outside"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    assert codes_at(report) == sorted([("MP007", s.line("collapse")), ("MP001", s.line("outside"))])


def test_without_mp007_selected_the_mismatch_is_reported(script, dryrun_cli):
    s = script(PROGRAM.format(after=""))
    status, report, err = dryrun_cli(s, "--gpus", "2", "--select", "MP001")
    assert report is not None, err
    assert codes_at(report) == [("MP001", s.line("hop"))]


SKIP_PROGRAM = """
import torch
import torch.nn as nn

class SkipNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 16).to("cuda:0")
        self.low = nn.Linear(16, 16).to("cuda:1")
        self.fuse = nn.Linear(32, 4).to("cuda:1")

    def forward(self, x):
        x = self.enc(x.to("cuda:0"))
        skip = self.low(x.to("cuda:1"))  # <- hop
        h = torch.cat([x.to("cuda:1"), skip], dim=1)  # <- cat
        return self.fuse(h)

model = SkipNet()
model.to("cuda:0")  # <- collapse
out = model(torch.randn(4, 16))
{after}
"""


def test_operands_of_a_torch_call_inside_a_collapsed_model_are_counted_on_the_collapse(script, dryrun_cli):
    # The repaired hop leaves `skip` on cuda:0 (the collapsed stage's device), while the forward still moves
    # `x` to cuda:1: torch.cat meets both, a consequence of the collapse, whichever operand comes first.
    s = script(SKIP_PROGRAM.format(after=""))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    assert codes_at(report) == [("MP007", s.line("collapse"))]
    after = report["findings"][0]["extra"]["mismatches_after"]
    assert f"{s.path}:{s.line('cat')}" in after


def test_operands_outside_the_collapsed_model_are_still_reported(script, dryrun_cli):
    s = script(SKIP_PROGRAM.format(after='torch.cat([out, torch.zeros(4, 4, device="cuda:1")])  # <- outside'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    assert codes_at(report) == sorted([("MP007", s.line("collapse")), ("MP001", s.line("outside"))])
