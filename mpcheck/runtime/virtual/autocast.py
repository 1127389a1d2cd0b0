"""autocast("cuda") emulation.

On a CPU build autocast("cuda") sets its flag, but CPU and meta tensors never
reach the CUDA autocast kernels, so nothing would be cast. The mode casts the
inputs of CUDA autocast's main lists itself, at the Python call: ops that run
in the lower precision, and ops that run in float32. (Ops autocast promotes,
such as cat, are left alone: they see the dtypes they are given.)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

LOWER: set = set()  # run in the autocast dtype
FP32: set = set()  # run in float32
ANY: set = set()  # either


def _autocast_lists() -> tuple[set, set]:
    T = torch.Tensor
    lower = {
        F.linear,
        F.bilinear,
        F.conv1d,
        F.conv2d,
        F.conv3d,
        F.conv_transpose1d,
        F.conv_transpose2d,
        F.conv_transpose3d,
        F.scaled_dot_product_attention,
        F.prelu,
        torch.matmul,
        torch.mm,
        torch.bmm,
        torch.addmm,
        torch.addbmm,
        torch.baddbmm,
        torch.addmv,
        torch.mv,
        torch.einsum,
        torch.chain_matmul,
        T.matmul,
        T.__matmul__,
        T.__rmatmul__,
        T.mm,
        T.bmm,
        T.addmm,
        T.baddbmm,
        T.mv,
    }
    fp32 = {
        F.softmax,
        F.log_softmax,
        F.softmin,
        F.layer_norm,
        F.group_norm,
        F.cross_entropy,
        F.nll_loss,
        F.mse_loss,
        F.l1_loss,
        F.smooth_l1_loss,
        F.kl_div,
        F.binary_cross_entropy_with_logits,
        F.softplus,
        F.normalize,
        F.cosine_similarity,
        torch.softmax,
        torch.log_softmax,
        torch.layer_norm,
        torch.group_norm,
        torch.norm,
        torch.exp,
        torch.log,
        torch.log1p,
        torch.expm1,
        torch.pow,
        torch.rsqrt,
        torch.reciprocal,
        torch.cumsum,
        torch.cumprod,
        torch.prod,
        torch.sum,
        T.softmax,
        T.log_softmax,
        T.norm,
        T.exp,
        T.log,
        T.log1p,
        T.pow,
        T.__pow__,
        T.rsqrt,
        T.reciprocal,
        T.cumsum,
        T.sum,
        T.prod,
    }
    return lower, fp32


def build(extra_lower: Any) -> None:
    """Fill the lists once (torch's functions exist only once torch is imported); `extra_lower`:
    mpcheck's own stand-in for a function of the lower list (the flash SDPA, see handlers.py)."""
    if ANY:
        return
    lower, fp32 = _autocast_lists()
    lower.add(extra_lower)
    LOWER.update(lower)
    FP32.update(fp32)
    ANY.update(lower | fp32)


def cast_inputs(func: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The op's floating inputs cast as CUDA autocast would cast them."""
    target = torch.get_autocast_dtype("cuda") if func in LOWER else torch.float32

    def cast(a):
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype not in (torch.float64, target):
            return torch.Tensor.to(a, target)
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            return type(a)(cast(x) for x in a)
        return a

    with torch._C.DisableTorchFunction():
        return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}
