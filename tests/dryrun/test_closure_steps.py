"""An optimizer step given a closure (`LBFGS.step(closure)`) runs the user's forward and loss inside the step: the
debug mode and the dry run check it as the user's code, although a library step otherwise runs outside the
checking mode (capture/session.py, `_step_outside_mode`)."""

CALIBRATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class TemperatureScaler(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_t = nn.Parameter(torch.zeros(1))

    def forward(self, logits):
        return logits / self.log_t.exp()


logits = torch.randn(64, 5, device="cuda:1")
targets = torch.randint(0, 5, (64,), device="cuda:1")
scaler = TemperatureScalerPLACE  # <- built
opt = torch.optim.LBFGS(scaler.parameters(), lr=0.05, max_iter=5)


def closure():
    opt.zero_grad()
    loss = F.cross_entropy(scaler(logits), targets)
    loss.backward()
    return loss


opt.step(closure)
print(float(closure()))
"""


def test_a_module_never_placed_called_in_an_lbfgs_closure_is_mp001(script, dryrun_cli):
    # (probe38 t10) post-hoc calibration: the scaler is built after the model was placed and stays on the CPU;
    # on real GPUs the first call in the closure raises (its log-temperature has one dimension: no CPU scalar)
    s = script(CALIBRATE.replace("PLACE", "()"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    first = report["findings"][0]
    assert (first["code"], first["line"]) == ("MP001", s.line("built")), err
    assert "never placed on a GPU" in first["message"]


def test_the_scaler_placed_where_the_logits_are_is_clean(script, dryrun_cli):
    s = script(CALIBRATE.replace("PLACE", "().to('cuda:1')"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
