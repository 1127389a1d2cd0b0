"""MP008 at run time: a loss whose predictions and targets (or class weights) sit on different virtual
GPUs is reported as MP008 at the loss line, with the cheap fix (move the small side to the logits' GPU);
the same losses fed correctly stay silent."""

import pytest
from dryrun_helpers import codes_at

HEADER = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Split(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.s0 = nn.Linear(16, 16).to("cuda:0")
        self.s1 = nn.Linear(16, classes).to("cuda:1")
    def forward(self, x):
        return self.s1(torch.relu(self.s0(x.to("cuda:0"))).to("cuda:1"))

model = Split()
x, y = torch.randn(4, 16), torch.randint(0, 3, (4,))
"""


@pytest.mark.parametrize(
    "loss_line",
    [
        "F.cross_entropy(out, y.to('cuda:0'))",
        "F.nll_loss(F.log_softmax(out, -1), y.to('cuda:0'))",
        "F.mse_loss(out, torch.randn(4, 3).to('cuda:0'))",
        "nn.CrossEntropyLoss()(out, y.to('cuda:0'))",
        "nn.MSELoss()(out, torch.randn(4, 3).to('cuda:0'))",
    ],
)
def test_targets_on_the_first_gpu_are_mp008_at_the_loss_line(script, dryrun_cli, loss_line):
    s = script(HEADER + f"out = model(x)\nloss = {loss_line}  # <- loss\nloss.backward()\n")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP008", s.line("loss"))]
    f = report["findings"][0]
    assert f["devices"] == ["cuda:1", "cuda:0"]
    assert f["suggestion"] == "move the targets to the predictions' device with `.to('cuda:1')` before the loss"


def test_class_weights_on_another_gpu_are_mp008_at_the_loss_line(script, dryrun_cli):
    s = script(
        HEADER
        + """
criterion = nn.CrossEntropyLoss(weight=torch.ones(3).to("cuda:0"))
out = model(x)
loss = criterion(out, y.to(out.device))  # <- loss
loss.backward()
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP008", s.line("loss"))]
    f = report["findings"][0]
    assert "the loss's weights are on cuda:0" in f["message"]
    assert "`.to('cuda:1')`" in f["suggestion"]


def test_losses_fed_on_one_device_stay_silent(script, dryrun_cli):
    s = script(
        HEADER
        + """
criterion = nn.CrossEntropyLoss(weight=torch.ones(3).to("cuda:1"))
for _ in range(2):
    out = model(x)
    loss = F.cross_entropy(out, y.to(out.device)) + criterion(out, y.to("cuda:1"))
    loss = loss + F.mse_loss(out, torch.randn(4, 3, device=out.device)) + nn.NLLLoss()(out, y.to("cuda:1"))
    loss.backward()
with torch.no_grad():
    val = F.cross_entropy(model(x), y.to("cuda:1"), reduction="sum").item()
print("finished")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


METRIC_PROGRAM = """
import torch
import torch.nn as nn

body = nn.Linear(8, 8).to("cuda:0")
head = nn.Linear(8, 4).to("cuda:1")

def dice_score(probs, target):
    inter = (probs * target).sum()  # <- dice
    return 2 * inter / (probs.sum() + target.sum())

x, y = torch.randn(6, 8).to("cuda:0"), torch.randint(0, 4, (6,)).to("cuda:0")
out = head(body(x).to("cuda:1"))
{metric}
"""


def test_an_accuracy_against_labels_on_another_gpu_is_mp008(script, dryrun_cli):
    s = script(METRIC_PROGRAM.format(metric="acc = (out.argmax(dim=1) == y).float().mean()  # <- acc"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    assert codes_at(report) == [("MP008", s.line("acc"))]
    assert "predictions' device" in report["findings"][0]["suggestion"]


def test_a_metric_function_is_reported_once_at_its_first_mixed_operation(script, dryrun_cli):
    s = script(METRIC_PROGRAM.format(metric="d = dice_score(out.sigmoid(), torch.rand(6, 4, device='cuda:0'))"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    assert codes_at(report) == [("MP008", s.line("dice"))]


def test_an_op_outside_any_metric_stays_mp001(script, dryrun_cli):
    s = script(METRIC_PROGRAM.format(metric="z = out + y.float().unsqueeze(1)  # <- plain"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    assert codes_at(report) == [("MP001", s.line("plain"))]


def test_a_loss_module_of_the_program_with_weights_on_another_gpu_is_mp008_at_its_loss(script, dryrun_cli):
    # Its forward takes the logits unmoved, as a loss should: the weights are the ones to move, not the
    # module's input (MP001 at the module's call would advise moving the logits off their GPU).
    s = script(
        HEADER
        + """
class WeightedCE(nn.Module):
    def __init__(self, counts):
        super().__init__()
        self.register_buffer("weight", counts.sum() / counts)

    def forward(self, logits, labels):
        return F.cross_entropy(logits, labels, weight=self.weight)  # <- loss

criterion = WeightedCE(torch.tensor([5.0, 2.0, 1.0])).to("cuda:0")
for _ in range(2):
    out = model(x)
    criterion(out, y.to(out.device)).backward()
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP008", s.line("loss"))]
    (f,) = report["findings"]
    assert f["devices"] == ["cuda:1", "cuda:0"] and "weight" in f["suggestion"]


WEIGHTED_LOSS_PROGRAM = (
    HEADER
    + """
mask = torch.ones(4).to("cuda:0")  # beside the inputs
out = model(x)
{grad}
    per_sample = {loss}
    total = {weighted}  # <- weighted
print("finished")
"""
)


@pytest.mark.parametrize("grad", ["if True:", "with torch.no_grad():"])
@pytest.mark.parametrize(
    ("loss", "weighted"),
    [
        ("F.cross_entropy(out, y.to(out.device), reduction='none')", "(per_sample * mask).sum() / 4"),
        ("nn.CrossEntropyLoss(reduction='none')(out, y.to(out.device))", "(mask * per_sample).mean()"),
        # computed from the loss first: known through autograd's graph (only with grad)
        ("F.mse_loss(out, torch.zeros_like(out), reduction='none').mean(dim=1)", "(per_sample * mask).mean()"),
    ],
)
def test_a_loss_weighted_by_a_mask_on_another_gpu_is_mp008(script, dryrun_cli, grad, loss, weighted):
    # A per-element loss weighted by a mask or per-sample weights left beside the inputs: the weights follow
    # the loss, as its targets do.
    s = script(WEIGHTED_LOSS_PROGRAM.format(grad=grad, loss=loss, weighted=weighted))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    derived = ".mean(dim=1)" in loss and "no_grad" in grad  # no graph: only a loss's own output is known
    assert codes_at(report) == [("MP001" if derived else "MP008", s.line("weighted"))]
    if not derived:
        (f,) = report["findings"]
        assert f["devices"] == ["cuda:1", "cuda:0"]
        assert "the loss it is applied to is on cuda:1" in f["message"]
        assert f["suggestion"] == "move it to the loss's device with `.to('cuda:1')` before this line"


def test_losses_of_two_gpus_added_up_stay_mp001(script, dryrun_cli):
    # Neither is a mask or weights of the other: one loss misses its transfer, as any activation would.
    s = script(
        HEADER
        + """
out = model(x)
aux = F.mse_loss(model.s0(x.to("cuda:0")), torch.zeros(4, 16, device="cuda:0"))
loss = F.cross_entropy(out, y.to(out.device)) + aux  # <- sum
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    assert codes_at(report) == [("MP001", s.line("sum"))]


def test_a_loss_weighted_on_its_own_device_stays_silent(script, dryrun_cli):
    s = script(
        HEADER
        + """
for _ in range(2):
    out = model(x)
    mask = torch.ones(4).to("cuda:0")
    per_sample = F.cross_entropy(out, y.to(out.device), reduction="none")
    loss = (per_sample * mask.to(per_sample.device)).sum() / mask.sum().item()
    loss.backward()
print("finished")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
