"""MP019 at run time (runtime/checks/made_on_host.py): a tensor made on the host from a shape alone, sized
after a tensor, and copied to a GPU on the line that made it, on every step, is reported at that line; made
on the GPU, read or changed before its move, sized by numbers (stand-in data), or moved once, it is not."""

from dryrun_helpers import codes_at

PROGRAM = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 32).to("cuda:0")
        self.b = nn.Linear(32, 32).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x).to("cuda:1"))

def loss_of(model, x0):
    x0 = x0.to("cuda:0")
    NOISE
    return F.mse_loss(model(x0 + noise), noise.to("cuda:1"))

model = Denoiser()
for step in range(STEPS):
    loss_of(model, torch.randn(64, 32)).backward()
"""


def _run(script, dryrun_cli, noise, steps=3):
    s = script(PROGRAM.replace("NOISE", noise).replace("STEPS", str(steps)))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err  # a performance finding: the step runs
    return s, report


def test_noise_made_on_the_host_and_moved_every_step_is_reported(script, dryrun_cli):
    s, report = _run(script, dryrun_cli, "noise = torch.randn(x0.shape).to(x0.device)  # <- here")
    assert codes_at(report) == [("MP019", s.line("here"))]
    f = report["findings"][0]
    assert f["message"].startswith("`torch.randn(...)` makes this tensor on the host and the line copies it to cuda:0")
    assert "`torch.randn_like(x)`" in f["message"]
    assert f["devices"] == ["cpu", "cuda:0"]


def test_made_there_read_first_sized_by_numbers_or_once_is_silent(script, dryrun_cli):
    for noise, steps in (
        ("noise = torch.randn_like(x0)", 3),  # made on the GPU
        ("noise = torch.randn(x0.shape, device=x0.device)", 3),
        ("noise = torch.randn(x0.shape)\n    noise = (noise * 0.5).to(x0.device)", 3),  # worked on the host
        ("noise = torch.empty(x0.shape).uniform_().to(x0.device)", 3),  # filled in place first
        ("noise = torch.randn(64, 32).to(x0.device)", 3),  # sized by numbers: stand-in data
        ("noise = torch.randn(x0.shape).to(x0.device)", 1),  # once: set-up
        # a seeded host generator (diffusers' randn_tensor): `device=` would refuse it
        ("noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(0)).to(x0.device)", 3),
    ):
        _, report = _run(script, dryrun_cli, noise, steps)
        assert [f for f in report["findings"] if f["code"] == "MP019"] == [], noise
