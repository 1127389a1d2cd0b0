"""Data on its way in and out: DataLoader's pinning thread, torch.load onto a virtual device, and torch.save,
which needs values that meta backing does not have."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from mpcheck.runtime.virtual.errors import MetaValueError, user_line
from mpcheck.runtime.virtual.patches.base import Patches

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs


def install_pinning(g: VirtualGPUs, p: Patches) -> None:
    # DataLoader(pin_memory=True) pins batches in a thread of its own (under the dry run's modes when
    # started during it: capture/threads.py), and pinning needs CUDA's host allocator: page-locked memory
    # means nothing without a GPU, so pinning returns the batch as it is.
    import torch.utils.data._utils.pin_memory as pin

    p.set(pin, "pin_memory", lambda data, device=None: data)


def install_load(g: VirtualGPUs, p: Patches) -> None:
    """torch.load(..., map_location="cuda:k"): load on the CPU, then move every tensor to the virtual device."""
    orig_load = torch.load

    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        dev = g.parse(map_location) if isinstance(map_location, (str, int, torch.device)) else None
        if dev is None:
            return orig_load(f, map_location, *args, **kwargs)
        obj = orig_load(f, "cpu", *args, **kwargs)

        def move(x: Any) -> Any:
            if isinstance(x, torch.nn.Parameter):
                return torch.nn.Parameter(g.transfer(x.detach(), dev), requires_grad=x.requires_grad)
            if isinstance(x, torch.Tensor):
                return g.transfer(x, dev)
            if isinstance(x, dict):
                return type(x)((k, move(v)) for k, v in x.items())
            if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
                return type(x)(move(v) for v in x)
            return x

        return move(obj)

    p.set(torch, "load", load)


def install_save(g: VirtualGPUs, p: Patches) -> None:
    """torch.save under --backing meta: a checkpoint holds tensor values, which meta tensors do not;
    stop with the dry run's message at the user's line rather than PyTorch's "Cannot copy out of meta
    tensor" from inside the serializer."""
    if g.backing != "meta":
        return
    orig_save = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return orig_save(obj, f, *args, **kwargs)
        except NotImplementedError as e:
            if "meta tensor" not in str(e):
                raise
            raise MetaValueError(
                f"{user_line()}: torch.save() needs tensor values (a checkpoint holds them), but with --backing "
                f"meta tensors hold shapes only. Run with --backing cpu (real values, small models) to go past "
                f"this line, or skip the save in a dry run."
            ) from e

    p.set(torch, "save", save)
