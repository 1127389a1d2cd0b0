"""An optimizer whose step the user wrote is the user's code, checked like a forward: library optimizers'
steps run outside the checking mode (their per-parameter bookkeeping is torch's and correct), but a
hand-written Lion or momentum SGD that makes its state on the CPU for want of `device=` meets each
parameter's gradient on its GPU there, which a real GPU refuses: reported where the state was made."""

from dryrun_helpers import codes_at

PROGRAM = """
import torch
import torch.nn as nn

class Momentum(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["buf"] = MAKE  # <- made
                buf = state["buf"]
                buf.mul_(0.9).add_(p.grad)  # <- add
                p.add_(buf, alpha=-group["lr"])

model = nn.Sequential(nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 2).to("cuda:1"))
opt = Momentum(model.parameters())
for _ in range(2):
    h = model[0](torch.randn(4, 8, device="cuda:0"))
    model[1](h.to("cuda:1")).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def test_state_made_on_the_cpu_in_a_users_step_is_mp001_there(script, dryrun_cli):
    s = script(PROGRAM.replace("MAKE", "torch.zeros(p.shape)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    # One finding, at the line that made the state on the host (runtime/checks/host_made.py), with device=
    # as the fix; its uses in the step are that finding's.
    assert codes_at(report) == [("MP001", s.line("made"))]
    f = report["findings"][0]
    assert f["message"].startswith("`torch.zeros()` without device= here makes a tensor on the CPU, in `Momentum.step`")
    assert f":{s.line('add')} (torch.Tensor.add_)" in f["message"], f["message"]
    assert "`device=x.device`" in f["suggestion"], f["suggestion"]


def test_state_made_beside_its_parameter_is_clean(script, dryrun_cli):
    s = script(PROGRAM.replace("MAKE", "torch.zeros_like(p)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_a_library_optimizers_step_stays_clean(script, dryrun_cli):
    s = script(PROGRAM.replace("opt = Momentum(model.parameters())", "opt = torch.optim.AdamW(model.parameters())"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
