"""A TorchDispatchMode that puts every storage an aten op makes on its virtual GPU, as it is made.

The function mode (mode.py) sees Python-level torch calls only, and labels what they return.
A real GPU's allocator also holds what it never sees: temporaries made inside one call
(`F.cross_entropy`'s log-softmax, saved for backward), and everything autograd makes in C++
during backward (gradients of activations and parameters, the backward of the loss on the
logits). Without them the memory estimate misses the peak, which on a training step is usually
in backward (issue 12). This mode labels each aten op's new storages, so the registry of live
storages (devices.py) follows a real allocator's life times:
- inside a virtual-mode call, with the device that call's outputs get (`VirtualGPUs.tls.op_device`, per thread);
  a handler that decides its outputs' device itself leaves them to it (`UNKNOWN`);
- in autograd's backward, outside any such call, with the device of the op's labelled inputs (none
  when they are on two GPUs). Other code that runs outside the function mode (C++ that a library's
  Python calls, such as DDP's reducer) is left as it was: its outputs stay unlabelled. The backward of a move between virtual GPUs is a copy back on a GPU; on the
  backing device it is no op at all (same device), so a hook on the move's node makes that copy
  (`copy_gradient_back`), and the gradient's own ops follow it onto the device it came from.
A storage keeps its first label; what this mode cannot place stays unlabelled, as before.

A GPU's first matrix multiply also makes cuBLAS's workspaces through the same allocator, kept for the
rest of the run (`VirtualGPUs.blas_workspace`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mpcheck.runtime.capture.list_versions import call_keeping_versions

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs

UNKNOWN = "?"  # op_device: a handler labels its outputs itself

# Functions some of whose outputs PyTorch makes on the CPU whatever the device of the data: by name (the
# torch function's, the aten op's), the indices of those outputs. A packed sequence's batch sizes and a
# padded one's lengths: never labelled with the call's device.
HOST_OUTPUTS: dict[str, frozenset[int]] = {
    "_pack_padded_sequence": frozenset({1}),
    "_pad_packed_sequence": frozenset({1}),
}
_current_autograd_node = torch._C._current_autograd_node
_no_function_modes = torch._C.DisableTorchFunction
_aten = torch.ops.aten
# The aten ops that run on cuBLAS (what `linear`, `matmul`, `@` and `einsum` become).
BLAS_OPS = frozenset(
    op.default for op in (_aten.mm, _aten.addmm, _aten.bmm, _aten.baddbmm, _aten.addbmm, _aten.mv, _aten.addmv)
)


class AllocationMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # No dynamo-disable wrapper around every aten op (see strict.py): nothing compiles in a dry run.
        return False

    def __init__(self, gpus: VirtualGPUs) -> None:
        super().__init__()
        self.g = gpus
        self.tls = gpus.tls

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        g = self.g
        dev = self.tls.op_device
        if dev is None:
            # Not inside a virtual-mode call, whose modes stand aside while it runs: calling the aten op
            # from here would go through the function modes, which never saw C++'s own ops before.
            with _no_function_modes():
                out = call_keeping_versions(func, args, kwargs or {})
            if _current_autograd_node() is None:
                return out
            dev = _inputs_device(g, args)
            if dev is None:
                return out
        else:
            out = call_keeping_versions(func, args, kwargs or {})
            if dev is UNKNOWN:
                return out
        label = g.label
        if isinstance(out, torch.Tensor):
            label(out, dev)
        elif isinstance(out, (tuple, list)):
            host = HOST_OUTPUTS.get(func.__name__.partition(".")[0], ())
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor) and i not in host:
                    label(o, dev)
        if func in BLAS_OPS and dev not in g.blas_workspaces and dev != "cpu":
            g.blas_workspace(dev)
        return out


def _inputs_device(g: VirtualGPUs, args: tuple) -> str | None:
    """The virtual device of an op's labelled tensor arguments (a GPU's before the CPU's; None for two GPUs)."""
    found = None
    label_of = g.label_of
    for a in args:
        if isinstance(a, torch.Tensor):
            items: Any = (a,)
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            items = a
        else:
            continue
        for t in items:
            # A list of optional tensors (index_put's indices in `x[rows, :, cols]`'s backward) holds None.
            lab = label_of(t) if isinstance(t, torch.Tensor) else None
            if lab is None or lab == found:
                continue
            if lab == "cpu":
                found = found or lab
            elif found is None or found == "cpu":
                found = lab
            else:
                return None  # two GPUs: not this mode's to decide
    return found


def copy_gradient_back(g: VirtualGPUs, out: torch.Tensor, src: str, only: int | None = None) -> None:
    """`out` is a move's result from `src`: in backward, its gradient is copied back onto `src`, as a
    real move's backward does (on the backing device the two are one device, and autograd copies nothing).
    `only`: the one gradient input that goes to `src` (a copy into a tensor, `buf.copy_(h)`: its node's second
    input is the source's, its first the buffer's, which stays where the buffer is)."""
    node = out.grad_fn
    if node is None:
        return

    def back(grad_inputs: tuple, grad_outputs: tuple) -> tuple:
        return tuple(
            gi if gi is None or (only is not None and i != only) or g.device_of(gi) == src else g.transfer(gi, src)
            for i, gi in enumerate(grad_inputs)
        )

    node.register_hook(back)
