"""MP011 on a move that activation checkpointing's recomputation makes again in backward
(runtime/checks/repeats.py, `_check_recomputed_move`): a checkpointed stage that moves its own input
pays the copy twice a step. A move before `checkpoint(...)`, and a hop inside a checkpointed function
that spans two GPUs (it moves recomputed data, new each time), are not reported. Found by held-out
round 13 (t17)."""

import pytest

PROGRAM = """
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Stage(nn.Module):
    def __init__(self, device):
        super().__init__()
        self.device = torch.device(device)
        self.net = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 128)).to(self.device)

    def forward(self, x):
        return self.net(x.to(self.device))


stages = nn.ModuleList([Stage("cuda:0"), Stage("cuda:1")])
opt = torch.optim.SGD(stages.parameters(), lr=0.1)
for step in range(3):
    h = torch.randn(256, 128, device="cuda:0", requires_grad=True)
    for stage in stages:
        h = CALL
    loss = h.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

SPANNING = """
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

a = nn.Linear(128, 128).to("cuda:0")
b = nn.Linear(128, 128).to("cuda:1")


def both(x):
    return b(torch.relu(a(x)).to("cuda:1"))


for step in range(3):
    x = torch.randn(256, 128, device="cuda:0", requires_grad=True)
    y = checkpoint(both, x, use_reentrant=REENTRANT)
    y.sum().backward()
"""


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpointed_stage_that_moves_its_own_input_is_reported(script, dryrun_cli, reentrant):
    call = f"checkpoint(stage, h, use_reentrant={reentrant})"
    status, report, err = dryrun_cli(script(PROGRAM.replace("CALL", call)), "--gpus", "2")
    assert status == 0, err
    found = [(f["code"], f["line"]) for f in report["findings"]]
    assert found == [("MP011", 13)], report["findings"]
    assert "recomputes this line in backward" in report["findings"][0]["message"]


def test_a_stage_input_moved_before_checkpoint_is_clean(script, dryrun_cli):
    call = "checkpoint(stage, h.to(stage.device), use_reentrant=False)"
    status, report, err = dryrun_cli(script(PROGRAM.replace("CALL", call)), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


@pytest.mark.parametrize("reentrant", ["False", "True"])
def test_a_hop_inside_a_checkpointed_function_moves_new_data_and_is_clean(script, dryrun_cli, reentrant):
    status, report, err = dryrun_cli(script(SPANNING.replace("REENTRANT", reentrant)), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
