"""MP011 on a parameter kept on the host and copied to a GPU inside a forward pass on every step
(runtime/checks/repeats.py, `_check_host_parameter`): an nn.ParameterDict left out of a model's placement,
moved by a defensive `.to(x.device)` in forward. Any size (the placement is the mistake). A parameter placed
with its module, a frozen host parameter (no gradient, no host optimizer step; MP011's same-data check covers
its copies from 64 KiB), and a copy made once are not reported. Found by held-out round 13 (t20)."""

import pytest

PROGRAM = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.tokens = nn.ParameterDict({"cls": nn.Parameter(torch.zeros(1, 32))})
        self.head = nn.Linear(32, 4)

    def place(self):
        for m in PLACED:
            m.to("cuda:0")
        self.head.to("cuda:1")
        return self

    def forward(self, x):
        h = self.embed(x.to("cuda:0")) + self.tokens["cls"].to("cuda:0")
        return self.head(h.to("cuda:1"))


model = Net().place()
FREEZE
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
for step in range(STEPS):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def run(script, dryrun_cli, placed: str, freeze: str = "", steps: int = 3):
    src = PROGRAM.replace("PLACED", placed).replace("FREEZE", freeze).replace("STEPS", str(steps))
    status, report, err = dryrun_cli(script(src), "--gpus", "2")
    assert status == 0, err
    return report["findings"]


def test_a_parameter_dict_left_on_the_host_and_moved_in_forward_is_reported(script, dryrun_cli):
    (f,) = run(script, dryrun_cli, "(self.embed,)")
    assert (f["code"], f["line"]) == ("MP011", 19)
    assert "`model.tokens.cls`" in f["message"] and "lives on the host" in f["message"]


@pytest.mark.parametrize(
    "placed, freeze, steps",
    [
        ("(self.embed, self.tokens)", "", 3),  # placed with its module: the move is a no-op
        ("(self.embed,)", "model.tokens.requires_grad_(False)", 3),  # frozen: a constant, 128 bytes
        ("(self.embed,)", "", 1),  # one step: no repeat yet
    ],
)
def test_placed_frozen_or_once_is_clean(script, dryrun_cli, placed, freeze, steps):
    assert run(script, dryrun_cli, placed, freeze, steps) == []
