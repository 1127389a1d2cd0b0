"""The legacy typed constructors (`torch.cuda.IntTensor([0])`, `torch.cuda.FloatTensor(2, 3)`) on virtual
GPUs: CUDA-only in PyTorch (a CPU build refuses them), they make a tensor of their dtype on the current GPU,
so old code runs, and one made on the current device inside a stage on another GPU is MP004 at its line."""

from dryrun_helpers import codes_at


def test_the_constructors_and_isinstance_behave_as_on_cuda(script, dryrun_cli):
    s = script(
        """
import torch
x = torch.cuda.FloatTensor(2, 3)
y = torch.cuda.LongTensor([1, 2, 3])
z = torch.cuda.HalfTensor(torch.Size([4]))
e = torch.cuda.BoolTensor()
assert isinstance(x, torch.cuda.FloatTensor) and not isinstance(x, torch.cuda.LongTensor)
assert not isinstance(torch.zeros(2, dtype=torch.long), torch.cuda.LongTensor)  # a CPU tensor is not one
assert x.shape == (2, 3) and y.tolist() == [1, 2, 3] and z.dtype == torch.float16 and e.numel() == 0
assert str(y.device) == "cuda:0" and y.type() == "torch.cuda.LongTensor"
assert str(torch.zeros(3).type(torch.cuda.FloatTensor).device) == "cuda:0"
torch.cuda.set_device(1)
assert str(torch.cuda.IntTensor([0]).device) == "cuda:1"
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0 and report["findings"] == [] and not report["stopped"], err


def test_one_made_on_the_current_device_inside_a_stage_on_another_gpu_is_mp004(script, dryrun_cli):
    s = script(
        """
import torch
from torch import nn

class Stage(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
    def forward(self, x):
        overflow = torch.cuda.IntTensor([0])  # <- made
        return self.lin(x) + overflow.float()

s0 = nn.Linear(8, 8).to("cuda:0")
s1 = Stage().to("cuda:1")
out = s1(s0(torch.randn(2, 8, device="cuda:0")).to("cuda:1"))
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP004", s.line("made"))], err
    assert report["findings"][0]["message"].startswith("`torch.cuda.IntTensor(...)` here puts a tensor on the current")
