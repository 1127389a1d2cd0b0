"""A dry run goes on past a mismatch with the call repaired (its tensors moved where the call belongs):
one missing move is one finding. The repaired call's result lands where the rest of the work is (with its
weights, else with most of its tensors in autograd's graph, else with most of its tensors), and the tensor
left unmoved, its views and what is computed from it where it is, meet the other GPU again without a
second finding (runtime/checks/unmoved.py). A program with two missing moves still gets two."""

from dryrun_helpers import codes_at

SPLIT = """
import torch
import torch.nn as nn

class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0 = nn.Linear(16, 16).to("cuda:0")
        self.mask_emb = nn.Parameter(torch.zeros(16, device="cuda:1"))
        self.s1 = nn.Linear(16, 16).to("cuda:1")
        self.s2 = nn.Linear(16, 4).to("cuda:1")

    def forward(self, x):
        h = self.s0(x.to("cuda:0"))
        mask = h.detach().abs() > 0.5                       # made on the first GPU
        h = h.to("cuda:1")
{body}
"""


def run(script, dryrun_cli, body, name="train.py"):
    s = script(SPLIT.format(body=body) + "model = Split()\n" + MAIN, name=name)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    return s, codes_at(report)


MAIN = """
for _ in range(2):
    out = model(torch.randn(8, 16))
    out.sum().backward()
with torch.no_grad():
    model(torch.randn(8, 16))
"""


def test_a_call_repaired_onto_its_weights_device_reports_nothing_downstream(script, dryrun_cli):
    # The mask is the odd one out, not the parameter and the activation: the call goes on on cuda:1, and
    # the next module gets its input where it needs it.
    s, codes = run(
        script,
        dryrun_cli,
        """        h = torch.where(mask, self.mask_emb, h)  # <- mask
        return self.s2(self.s1(h))""",
    )
    assert codes == [("MP001", s.line("mask"))]


def test_an_unmoved_tensor_used_again_and_its_derived_values_are_one_finding(script, dryrun_cli):
    s, codes = run(
        script,
        dryrun_cli,
        """        h = h * mask  # <- first
        h = self.s1(h) + mask.float()         # the same tensor, unmoved, again (a value made from it)
        return self.s2(h * mask[:, :1])         # a view of it""",
    )
    assert codes == [("MP001", s.line("first"))]


def test_locations_meeting_a_head_output_are_repaired_onto_the_head_in_training_and_in_eval(script, dryrun_cli):
    # `xy - dist`: two tensors, one in autograd's graph (the head's output): the locations are the ones to
    # move, in training and again under no_grad (where nothing is in the graph: the line's first repair holds).
    s, codes = run(
        script,
        dryrun_cli,
        """        xy = torch.arange(16, device="cuda:0").float()
        dist = self.s1(h)
        boxes = dist - xy  # <- xy
        return self.s2(boxes)""",
    )
    assert codes == [("MP001", s.line("xy"))]


def test_two_missing_moves_are_two_findings(script, dryrun_cli):
    s, codes = run(
        script,
        dryrun_cli,
        """        h = h * mask  # <- first
        pos = torch.ones(16, device="cuda:0")
        return self.s2(self.s1(h) + pos)  # <- second""",
    )
    assert codes == [("MP001", s.line("first")), ("MP001", s.line("second"))]
