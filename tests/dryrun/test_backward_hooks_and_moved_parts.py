"""Session 38, on virtual GPUs: gradient hooks run in backward with the dry run's modes (a mask on another GPU
fails there as on real ones), a loss module's plain tensor attribute left on the CPU is named at its use (not
the module's input), and a pre-hook that pulls a stage to its input's GPU undoes the split (MP007)."""

import pytest
from dryrun_helpers import codes_at

HOOKED = """
import torch
import torch.nn as nn

a = nn.Linear(8, 8).to("cuda:0")
b = nn.Linear(8, 8).to("cuda:1")
keep = torch.ones(8, 1, device="cuda:0")
a.weight.register_hook(lambda g: g * keep)
b.weight.register_hook(lambda g: g * MASK)  # <- hook
for step in range(2):
    out = b(a(torch.randn(4, 8, device="cuda:0")).to("cuda:1"))
    out.sum().backward()
"""


def test_a_gradient_hook_that_meets_a_mask_on_another_gpu_is_reported_at_the_hook(script, dryrun_cli):
    s = script(HOOKED.replace("MASK", "keep"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("hook"))], err


def test_a_gradient_hook_that_moves_its_mask_is_silent(script, dryrun_cli):
    status, report, err = dryrun_cli(script(HOOKED.replace("MASK", "keep.to(g.device)")), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


WEIGHTED = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class FocalLoss(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        HOLD

    def forward(self, logits, target):
        at = self.alpha[target]  # <- use
        return (at * F.cross_entropy(logits, target, reduction="none")).mean()


head = nn.Linear(8, 4).to("cuda:1")
criterion = FocalLoss(torch.tensor([1.0, 2.0, 3.0, 4.0])).to("cuda:1")
for step in range(2):
    logits = head(torch.randn(6, 8, device="cuda:1"))
    criterion(logits, torch.randint(0, 4, (6,)).to(logits.device)).backward()
"""


def test_a_plain_tensor_attribute_left_on_the_cpu_is_named_at_its_use(script, dryrun_cli):
    s = script(WEIGHTED.replace("HOLD", "self.alpha = alpha"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("use"))], err
    message, help_ = report["findings"][0]["message"], report["findings"][0]["suggestion"]
    assert "`criterion.alpha`" in message and "plain tensor attribute" in message, message
    assert "register_buffer('alpha'" in help_


def test_the_same_weights_as_a_buffer_are_silent(script, dryrun_cli):
    status, report, err = dryrun_cli(
        script(WEIGHTED.replace("HOLD", "self.register_buffer('alpha', alpha)")), "--gpus", "2"
    )
    assert (status, report["findings"]) == (0, []), err


PULLED = """
import torch
import torch.nn as nn


def align(module, args):
    BODY


stages = nn.Sequential(nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 8).to("cuda:1"))
for stage in stages:
    stage.register_forward_pre_hook(align)
for step in range(2):
    stages(torch.randn(4, 8, device="cuda:0")).sum().backward()
"""


def test_a_pre_hook_that_pulls_a_stage_to_its_input_collapses_the_split(script, dryrun_cli):
    s = script(PULLED.replace("BODY", "module.to(args[0].device)  # <- pull"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP007", s.line("pull"))], err
    assert "`stages.1` onto cuda:0" in report["findings"][0]["message"]


def test_a_pre_hook_that_moves_the_inputs_keeps_the_split(script, dryrun_cli):
    body = "return tuple(a.to(next(module.parameters()).device) for a in args)"
    status, report, err = dryrun_cli(script(PULLED.replace("BODY", body)), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_moving_one_stage_onto_another_gpu_that_keeps_the_model_split_is_silent(script, dryrun_cli):
    body = "return tuple(a.to(next(module.parameters()).device) for a in args)"
    swap = (
        'stages[1].to("cuda:0")\nstages[0].to("cuda:1")\nstages(torch.randn(4, 8, device="cuda:1")).sum().backward()\n'
    )
    src = PULLED.replace("BODY", body) + swap
    status, report, err = dryrun_cli(script(src), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


HOSTED = """
import torch
import torch.nn as nn


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 2).to("cuda:1")

    def forward(self, x):
        x = self.a(x.to(self.a.weight.device))
        return self.b(x.to(self.b.weight.device))


model = Split()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    SAVE
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
AFTER
"""


def test_a_split_model_moved_to_the_host_and_trained_there_is_mp007(script, dryrun_cli):
    s = script(HOSTED.replace("SAVE", "state = model.cpu().state_dict()  # <- host").replace("AFTER", ""))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP007", s.line("host"))], err
    assert "trains there next" in report["findings"][0]["message"]


@pytest.mark.parametrize(
    "save, after",
    [
        ("state = {k: v.cpu() for k, v in model.state_dict().items()}", ""),  # a copy of the weights
        ("pass", "model.cpu().eval()\nwith torch.no_grad():\n    model(torch.randn(4, 8))"),  # inference on the host
        ("pass", "torch.save(model.cpu().state_dict(), __file__ + '.final.pt')"),  # freed at the end
    ],
)
def test_a_split_model_copied_or_moved_to_the_host_for_inference_or_the_end_is_silent(script, dryrun_cli, save, after):
    status, report, err = dryrun_cli(script(HOSTED.replace("SAVE", save).replace("AFTER", after)), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
