"""Lazy modules under virtual GPUs (runtime/virtual/patches/lazy.py, VirtualGPUs.transfer): a lazy module
built for a GPU (`device="cuda:1"`) or moved there before its first forward (`.to("cuda:1")`) makes its
parameters and buffers on that GPU at the first forward, as on a real one. Found by round 13 of the dry
run's precision programs: the running statistics of a LazyBatchNorm came out on the host (a false MP001),
and one moved by `.to()` lost its placeholder (the program crashed)."""

import pytest

PROGRAM = """
import torch
import torch.nn as nn

class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.LazyLinear(8), nn.LazyBatchNorm1d()).to("cuda:0")
        self.b = BUILT

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))

model = Split()
out = model(torch.randn(4, 3))
out.sum().backward()
for name, t in [*model.named_parameters(), *model.named_buffers()]:
    if "num_batches" not in name:
        want = "cuda:0" if name.startswith("a.") else "cuda:1"
        assert str(t.device) == want, (name, t.device)
print(out.device)
"""


@pytest.mark.parametrize(
    "built",
    [
        'nn.Sequential(nn.LazyLinear(5, device="cuda:1"), nn.LazyBatchNorm1d(device="cuda:1"))',
        'nn.Sequential(nn.LazyLinear(5), nn.LazyBatchNorm1d()).to("cuda:1")',
    ],
)
@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_a_lazy_module_is_made_on_the_gpu_it_was_built_for_or_moved_to(script, dryrun_cli, built, backing):
    s = script(PROGRAM.replace("BUILT", built))
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", backing)
    assert status == 0, err
    assert report["findings"] == []
