"""An optimizer's state on the CPU beside parameters on a GPU (the optimizer loaded before the model was
placed): torch's own optimizers step outside the checking mode, so the virtual devices refuse the mix there
as CUDA would, and the stop is MP001 at the user's `opt.step()`, with the fix. A step count on the host
(0-dim, as Adam keeps it) and a model placed before the load are clean."""

from dryrun_helpers import codes_at

PROGRAM = """
import os
import tempfile

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 4)

    def place(self):
        self.a.to("cuda:0")
        self.b.to("cuda:1")
        return self

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


def train(model, opt):
    for _ in range(2):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()  # <- step


path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
model = Net().place()
opt = torch.optim.OPT(model.parameters(), lr=1e-3)
train(model, opt)
torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)

model = Net()
opt = torch.optim.OPT(model.parameters(), lr=1e-3)
ckpt = torch.load(path, map_location="cpu")
model.load_state_dict(ckpt["model"])
LOAD
train(model, opt)
print("done")
"""

LATE = 'opt.load_state_dict(ckpt["opt"])\nmodel.place()'
EARLY = 'model.place()\nopt.load_state_dict(ckpt["opt"])'


def test_a_state_loaded_before_the_model_was_placed_stops_at_the_step(script, dryrun_cli):
    for made in ("Adam(model.parameters(), lr=1e-3)", "AdamW(model.parameters())", "SGD(model.parameters(), 0.1, 0.9)"):
        s = script(PROGRAM.replace("OPT(model.parameters(), lr=1e-3)", made).replace("LOAD", LATE))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert status == 1, err
        assert codes_at(report) == [("MP001", s.line("step"))], made
        (f,) = report["findings"]
        assert "the optimizer's state is on the CPU while its parameters are on cuda:0" in f["message"]
        assert "before `optimizer.load_state_dict(...)`" in f["suggestion"]


def test_a_model_placed_before_the_load_is_clean(script, dryrun_cli):
    for name in ("Adam", "SGD"):
        src = PROGRAM.replace("OPT(model.parameters(), lr=1e-3)", f"{name}(model.parameters(), lr=1e-3)")
        s = script(src.replace("LOAD", EARLY))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert status == 0, err
        assert report["findings"] == [], name
