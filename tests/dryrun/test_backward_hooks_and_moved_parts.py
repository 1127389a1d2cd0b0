"""Session 38, on virtual GPUs: gradient hooks run in backward with the dry run's modes (a mask on another GPU
fails there as on real ones), a loss module's plain tensor attribute left on the CPU is named at its use (not
the module's input), and a pre-hook that pulls a stage to its input's GPU undoes the split (MP007)."""

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
