"""Lazy modules (nn.LazyLinear, nn.LazyBatchNorm2d, ...) under virtual GPUs: a parameter or buffer not made
yet is materialised at the first forward on the device it was created for (`nn.LazyBatchNorm1d(device=
"cuda:0")`), as on a real GPU. PyTorch reads that device off the placeholder, which the dry run backs on the
CPU or on meta, and an UninitializedBuffer refuses the questions that find its virtual device: without this,
the running statistics came out on the host and the first batch norm was a false MP001 (round 13 of the dry
run's precision programs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs
    from mpcheck.runtime.virtual.patches.base import Patches


def install(g: VirtualGPUs, p: Patches) -> None:
    import torch
    from torch.nn.parameter import UninitializedTensorMixin  # type: ignore[attr-defined]  # (not in torch.nn.parameter.__all__)

    original = UninitializedTensorMixin.materialize

    def materialize(self: Any, shape: Any, device: Any = None, dtype: Any = None) -> None:
        if device is None:
            # The placeholder's own __torch_function__ refuses `untyped_storage()`: ask past it.
            with torch._C.DisableTorchFunctionSubclass():
                device = g.device_of(self)  # the virtual device ("cuda:0"), not the backing one
        original(self, shape, device=device, dtype=dtype)

    p.set(UninitializedTensorMixin, "materialize", materialize)
