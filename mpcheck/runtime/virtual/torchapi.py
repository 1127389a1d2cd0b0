"""What the virtual GPUs know about torch's API: one table, torch function -> handler.

A function in the table is handed to its handler (handlers.py) instead of the generic
path (ops.py: device= rewritten, outputs labelled). Teaching the virtual GPUs a torch
function is one entry here (plus its test); it is a dict, so order does not matter.
Built once, when the virtual GPUs are first entered (torch's functions must exist).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from mpcheck.runtime.virtual import handlers
from mpcheck.runtime.virtual.handlers import Handler, needs_value

HANDLERS: dict[Any, Handler] = {}


def _getter(name: str) -> Any:
    """The function a read of the Tensor property `name` calls (`torch.Tensor.device.__get__`);
    torch's stubs type these properties as plain values, which have no `__get__`."""
    return getattr(torch.Tensor, name).__get__


def _table() -> dict[Any, Handler]:
    T = torch.Tensor
    return {
        # moves: a copy onto the backing device, labelled with the virtual device
        T.to: handlers.to,
        T.cuda: handlers.cuda,
        T.cpu: handlers.cpu,
        T.type: handlers.tensor_type,
        T.type_as: handlers.type_as,
        # integer devices are CUDA's indices, as on real GPUs
        torch.device: handlers.device_new,
        torch._C._nn._parse_to: handlers.parse_to,
        # where a tensor is, answered with its virtual device
        _getter("device"): handlers.device_get,
        _getter("is_cuda"): handlers.is_cuda_get,
        _getter("is_cpu"): handlers.is_cpu_get,
        _getter("is_meta"): handlers.is_meta_get,
        T.get_device: handlers.get_device,
        _getter("grad"): handlers.grad_get,
        T.__repr__: handlers.tensor_repr,
        # pinned memory and streams mean nothing without a GPU
        T.pin_memory: handlers.noop_self,
        T.record_stream: handlers.noop_self,
        T.is_pinned: handlers.is_pinned,
        # the memory estimate learns which storages are parameters and gradients before each backward
        T.backward: handlers.backward,
        T.untyped_storage: handlers.storage,
        # packed sequences: the lengths must be on the host, as PyTorch's kernel says
        torch._C._VariableFunctions._pack_padded_sequence: handlers.pack_padded,
        # a GPU's attention kernel, for a GPU's activation estimate on meta
        F.scaled_dot_product_attention: handlers.sdpa,
        # Python needs the value: refused on meta, numpy refused on CUDA as PyTorch does
        T.item: needs_value("`.item()`"),
        T.tolist: needs_value("`.tolist()`"),
        T.__bool__: needs_value("`bool(tensor)` (an `if` or `while` on a tensor)"),
        T.__int__: needs_value("`int(tensor)`"),
        T.__float__: needs_value("`float(tensor)`"),
        T.__index__: needs_value("using a tensor as an index"),
        T.__complex__: needs_value("`complex(tensor)`"),
        T.numpy: needs_value("`.numpy()`"),
        T.__array__: needs_value("converting to a NumPy array"),
        T.__format__: needs_value("formatting a tensor's value (f-string)"),
        T.is_nonzero: needs_value("`.is_nonzero()`"),
        T.equal: needs_value("`.equal()`"),
        T.allclose: needs_value("`.allclose()`"),
        torch.equal: needs_value("`torch.equal()`"),
        torch.allclose: needs_value("`torch.allclose()`"),
        torch.is_nonzero: needs_value("`torch.is_nonzero()`"),
    }


def build() -> None:
    if not HANDLERS:
        HANDLERS.update(_table())
