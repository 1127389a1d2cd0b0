"""torch.Generator on virtual GPUs: `torch.Generator(device="cuda:k")` is made (a CPU generator labelled with
its virtual GPU, still an instance of torch.Generator); a generator draws only for tensors of its own device
type, as CUDA checks, so a CPU generator given to a factory on a virtual GPU stops the program with MP001 at
the user's line; the generator's index is not checked (CUDA does not), and the patch is gone after the run."""

import pytest
import torch
from dryrun_helpers import codes_at

SAMPLER = """
import torch

g = GENERATOR
assert isinstance(g, torch.Generator)
x = torch.randn(2, 3, generator=g, device="cuda:1")  # <- draws
p = torch.softmax(torch.randn(4, 10, device="cuda:1"), -1)
idx = torch.multinomial(p, 1, generator=g)
print(g.device, x.device, idx.device)
"""


@pytest.mark.parametrize("made", ['torch.Generator(device="cuda:1")', 'torch.Generator(device="cuda:0")'])
def test_a_cuda_generator_draws_for_tensors_on_virtual_gpus(script, dryrun_cli, made):
    s = script(SAMPLER.replace("GENERATOR", f"{made}.manual_seed(0)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["stopped"], report["findings"]) == (0, None, [])


@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_a_cpu_generator_for_a_tensor_on_a_virtual_gpu_stops_with_mp001(script, dryrun_cli, backing):
    s = script(SAMPLER.replace("GENERATOR", "torch.Generator().manual_seed(0)"))
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", backing)
    assert status == 1
    assert "Expected a 'cuda' device type for generator but found 'cpu'" in report["stopped"]
    assert codes_at(report) == [("MP001", s.line("draws"))]
    assert "torch.Generator(device=...)" in report["findings"][0]["suggestion"]


def test_the_generator_patch_is_removed_after_the_run(script, dryrun_cli):
    real = torch.Generator
    s = script(SAMPLER.replace("GENERATOR", 'torch.Generator(device="cuda:1")'))
    dryrun_cli(s, "--gpus", "2")
    assert torch.Generator is real
