"""Integer devices on virtual GPUs: `torch.device(0)`, `.to(0)`, `.cuda(0)`, `device=1`, `map_location=0`,
`Module.to(1)` mean CUDA's device, as on real GPUs (a CPU build alone refuses them with "Cannot access
accelerator device when none is available"); an integer past the last GPU is MP009."""

from dryrun_helpers import codes_at


def test_integer_devices_are_cuda_devices(script, dryrun_cli):
    s = script(
        """
import io
import torch
import torch.nn as nn

x = torch.randn(4)
assert torch.device(0) == torch.device("cuda", 0)
assert x.to(0).device == torch.device("cuda:0")
assert x.to(device=1).device == torch.device("cuda:1")
assert x.cuda(1).device == torch.device("cuda:1")
assert torch.zeros(2, device=1).device == torch.device("cuda:1")
assert torch.zeros(2, device=torch.device(1)).device == torch.device("cuda:1")
assert nn.Linear(2, 2).to(1).weight.device == torch.device("cuda:1")
assert nn.Linear(2, 2).to(torch.device(0)).weight.device == torch.device("cuda:0")
buf = io.BytesIO()
torch.save({"w": torch.randn(3)}, buf)
buf.seek(0)
assert torch.load(buf, map_location=0)["w"].device == torch.device("cuda:0")
print("finished")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_an_integer_past_the_last_gpu_is_mp009(script, dryrun_cli):
    s = script(
        """
import torch
stage = 1
x = torch.randn(4).to(stage + 1)  # <- place
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP009", s.line("place"))], err
