"""The dry run's memory estimate follows a real GPU allocator's life times (issue 12), pinned by arithmetic.

Each case is small enough to count by hand: what is live at each device's peak, at the bytes the CUDA
caching allocator counts (512-byte blocks; cuda_allocator.py). The real-GPU comparison of a 1.3B decoder
is tests/gpu/test_gpu_memory_estimate.py.
"""

import pytest
import torch
import torch.nn.functional as F

import mpcheck
from mpcheck.runtime.virtual.cuda_allocator import counted_bytes
from mpcheck.runtime.virtual.devices import BLAS_WORKSPACES

MIB = 2**20
BLOCK = 512  # the smallest block the allocator hands out: a 0-dim loss takes one


@pytest.mark.parametrize(
    ("nbytes", "counted"),
    [
        (0, 0),
        (4, 512),  # a scalar: one 512-byte block
        (513, 1024),
        (8 * MIB, 8 * MIB),
        (411_705_344, 411_705_344),  # 1.43 MiB left in its 2 MiB-rounded segment: split off, not counted
        (823_410_688, 823_410_688 + 770_048),  # 0.73 MiB left: not split, the whole segment counts (H200)
        (33 * MIB, 34 * MIB),  # 1 MiB left: not split (the allocator splits only more than 1 MiB)
    ],
)
def test_counted_bytes_follow_the_cuda_caching_allocator(nbytes, counted):
    assert counted_bytes(nbytes) == counted


def test_cross_entropy_backward_temporaries_make_the_peak():
    """F.cross_entropy's log-softmax is made inside one torch call and saved for backward; backward then makes
    the gradient of the log-probabilities and of the logits: four logit-sized tensors at once on a real GPU."""
    with mpcheck.dryrun(gpus=1, backing="meta", report=None) as dr:
        logits = torch.randn(256, 8192, device="cuda:0", requires_grad=True)  # 8 MiB
        target = torch.zeros(256, dtype=torch.long, device="cuda:0")  # 2 KiB
        before = torch.cuda.memory_allocated(0)
        loss = F.cross_entropy(logits, target)
        # the log-softmax, the loss and nll_loss's total weight, both saved for backward
        assert torch.cuda.memory_allocated(0) == before + 8 * MIB + 2 * BLOCK
        loss.backward()
        assert logits.grad.device == torch.device("cuda:0")
    m = dr.memory["cuda:0"]
    # At LogSoftmaxBackward: logits, target, the log-probabilities, the loss, the gradient of the
    # log-probabilities (NllLossBackward's) and the one of the logits being made. The function mode alone
    # saw 8 MiB + 2 KiB + 512 B of these.
    assert m["total"] == 4 * 8 * MIB + 2048 + BLOCK
    assert m["grads"] == 0 and m["params"] == 0 and m["activations"] == m["total"]


def test_a_moves_gradient_is_made_on_the_device_it_came_from():
    """The backward of `.to("cuda:1")` copies the gradient back onto cuda:0, where the rest of backward runs."""
    with mpcheck.dryrun(gpus=2, backing="meta", report=None) as dr:
        a = torch.zeros(MIB, device="cuda:0", requires_grad=True)  # 4 MiB
        loss = (a * 2).to("cuda:1").sum()
        loss.backward()
        assert a.grad.device == torch.device("cuda:0")
        assert torch.cuda.memory_allocated(1) == BLOCK  # the loss; its copy of `a * 2` is gone with the graph
    m0, m1 = dr.memory["cuda:0"], dr.memory["cuda:1"]
    # cuda:0 in backward: `a`, the gradient copied back and MulBackward's `grad * 2` (a's gradient).
    assert m0["total"] == 12 * MIB
    # cuda:1: the moved copy and the loss, at the end of forward (sum's backward saves no input: the copy is
    # freed before backward makes its seed, ones_like(loss)).
    assert m1["total"] == 4 * MIB + BLOCK


def test_the_peak_is_one_instant_not_a_sum_of_separate_peaks():
    """Activations of forward and AdamW's step temporaries never coexist: the estimate is the larger instant."""
    with mpcheck.dryrun(gpus=1, backing="meta", report=None) as dr:
        lin = torch.nn.Linear(1024, 1024, bias=False, device="cuda:0")  # 4 MiB
        opt = torch.optim.AdamW(lin.parameters())
        x = torch.randn(4096, 1024, device="cuda:0")  # 16 MiB, saved by the matmul for the weight's gradient
        lin(x).sum().backward()  # forward: x, the weight and the 16 MiB output at once
        del x
        opt.step()  # weight, gradient, two states and foreach sqrt(exp_avg_sq): 5 x 4 MiB
    m = dr.memory["cuda:0"]
    workspaces = sum(BLAS_WORKSPACES)
    # Forward's end: weight 4, x 16, the output 16 MiB and the loss (one block), with cuBLAS's workspaces.
    # Backward holds less (weight, x, the loss, its seed and the weight's 4 MiB gradient: sum's backward
    # expands the seed, and the output was freed with nothing saving it), the step less again (20 MiB);
    # adding each kind's own largest value, as the estimate once did, would say 4 + 4 + 8 + 36 MiB.
    assert m["total"] == 4 * MIB + 16 * MIB + 16 * MIB + BLOCK + workspaces
    assert (m["params"], m["grads"], m["optimizer_state"]) == (4 * MIB, 0, 0)


def test_the_programs_own_peak_reset_does_not_lower_the_estimate():
    with mpcheck.dryrun(gpus=1, backing="meta", report=None) as dr:
        big = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda:0")
        del big
        torch.cuda.reset_peak_memory_stats(0)
        small = torch.empty(MIB, dtype=torch.uint8, device="cuda:0")
        assert torch.cuda.max_memory_allocated(0) == MIB
        del small
    assert dr.memory["cuda:0"]["total"] == 64 * MIB


def test_cpu_backing_counts_the_same_as_meta():
    def run(backing):
        with mpcheck.dryrun(gpus=2, backing=backing, report=None) as dr:
            w0 = torch.randn(64, 64, device="cuda:0", requires_grad=True)
            w1 = torch.randn(64, 64, device="cuda:1", requires_grad=True)
            x = torch.randn(32, 64).to("cuda:0")
            F.cross_entropy((x @ w0).to("cuda:1") @ w1, torch.zeros(32, dtype=torch.long).to("cuda:1")).backward()
        return {d: m["total"] for d, m in dr.memory.items()}

    assert run("cpu") == run("meta")
