"""A factory without device= inside a module on a GPU makes its tensor on the CPU: when that tensor (or a
view or a result computed from it on the CPU) meets the module's tensors, the finding (MP001) is at the
factory's line, with `device=` as the fix; the same tensor made with device=, or a CPU tensor that only
indexes or is packed (as PyTorch wants), is no finding."""

from dryrun_helpers import codes_at

PROGRAM = """
import torch
import torch.nn as nn

class Stage(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        T = x.size(1)
        causal = MAKE  # <- made
        scores = self.lin(x) @ self.lin(x).transpose(1, 2)
        return scores.masked_fill(causal, float("-inf")).softmax(-1)  # <- use

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Stage().to("cuda:0")
        self.b = Stage().to("cuda:1")

    def forward(self, x):
        h = self.a(x.to("cuda:0"))[..., :8]
        return self.b(h.to("cuda:1"))

Net()(torch.randn(2, 8, 8)).sum().backward()
"""


def test_a_mask_made_on_the_cpu_in_a_gpu_stage_is_reported_at_its_factory(script, dryrun_cli):
    s = script(PROGRAM.replace("MAKE", "torch.ones(T, T, dtype=torch.bool).triu(1)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP001", s.line("made"))]
    f = report["findings"][0]
    assert f["message"].startswith("`torch.ones()` without device= here makes a tensor on the CPU, inside 'net.a'")
    assert f":{s.line('use')} (torch.Tensor.masked_fill)" in f["message"], f["message"]
    assert "`device=x.device`" in f["suggestion"] and "`device='cuda:0'`" in f["suggestion"]


def test_the_same_mask_made_on_its_device_is_clean(script, dryrun_cli):
    s = script(PROGRAM.replace("MAKE", "torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
