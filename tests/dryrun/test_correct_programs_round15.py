"""Correct programs of the fifteenth dry-run precision round (session 29's report), each cut to what stopped
it: attention with a learned mask under meta backing (the CPU flash kernel refuses a mask that needs a
gradient, a GPU's memory-efficient kernel gives it one), a custom op with a CUDA kernel only (a documented
limit, said in one sentence), and `.item()` of a tensor an autograd hook made during backward under meta
backing (the documented message, not PyTorch's raw one)."""

import pytest

LEARNED_MASK = """
import torch
import torch.nn as nn
import torch.nn.functional as F

bias = nn.Parameter(torch.zeros(4, 16, 16, device="cuda:1"))
q, k, v = torch.randn(3, 2, 4, 16, 8, device="cuda:1").unbind(0)
out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
out.sum().backward()
assert bias.grad.shape == (4, 16, 16) and out.device == torch.device("cuda:1")
"""


@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_attention_with_a_learned_mask_runs_clean(script, dryrun_cli, backing):
    status, report, err = dryrun_cli(script(LEARNED_MASK), "--gpus", "2", "--backing", backing)
    assert (status, report["findings"], report.get("stopped")) == (0, [], None), err


CUDA_ONLY_OP = """
import torch

@torch.library.custom_op("round15::scale_add", mutates_args=(), device_types="cuda")
def scale_add(x: torch.Tensor, y: torch.Tensor, a: float) -> torch.Tensor:
    return x * a + y

x = torch.randn(4, 4, device="cuda:1")
z = scale_add(x, x, 2.0)  # <- op
"""


def test_a_custom_op_with_a_cuda_kernel_only_stops_as_a_limit_in_one_sentence(script, dryrun_cli):
    s = script(CUDA_ONLY_OP)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["findings"] == []
    stopped = report["stopped"]
    assert stopped.startswith(f"{s.path}:{s.line('op')}: scale_add.default() needs a real CUDA kernel")
    assert "Could not run 'round15::scale_add' with arguments from the 'CPU' backend)" in stopped
    assert "BackendSelect" not in stopped  # not the dispatcher's list of every backend


HOOKED_NORM = """
import torch
import torch.nn as nn

lin = nn.Linear(8, 8).to("cuda:1")
norms = {}
h = lin(torch.randn(4, 8, device="cuda:1"))
h.grad_fn.register_hook(lambda gis, gos: norms.__setitem__("out", gos[0].norm()))
h.sum().backward()
print(norms["out"].item())  # <- read
"""


def test_the_value_of_a_tensor_a_backward_hook_made_stops_meta_backing_with_its_message(script, dryrun_cli):
    s = script(HOOKED_NORM)
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", "meta")
    assert report["stopped"].startswith(f"{s.path}:{s.line('read')}: `.item()` needs the tensor's value")
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", "cpu")
    assert (status, report.get("stopped")) == (0, None), err
