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


def _storage_on(g: VirtualGPUs, st: Any, dev: str) -> Any:
    """A copy of the untyped storage `st` on `dev` ("cuda:k" or "cpu"), backed as the dry run backs it."""
    with torch._C.DisableTorchFunction():
        out = torch.UntypedStorage(st.nbytes(), device=g.backing_device)
        if out.device.type != "meta" and st.device.type != "meta":
            out.copy_(st)
    g.label_storage(out, dev)
    return out


def install_load(g: VirtualGPUs, p: Patches) -> None:
    """torch.load restores each storage where its checkpoint says it was saved from ("cuda:1", install_save),
    or where map_location sends it (a device, a dict of locations, or a callable that may move the storage
    itself: `storage.cuda(k)`, `storage.to(device=...)`), as CUDA does: torch.serialization's
    default_restore_location, which every map_location but a callable's own storage ends in, puts the loaded
    storage on the virtual device; storages' own moves (torch.storage._to) copy onto it. An integer
    map_location is CUDA's device, as integer devices are elsewhere in the dry run."""
    import torch.serialization as ser
    import torch.storage as storage_mod

    orig_load, orig_restore, orig_to = torch.load, ser.default_restore_location, storage_mod._to

    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(map_location, int) and not isinstance(map_location, bool):
            map_location = g.parse(map_location)
        return orig_load(f, map_location, *args, **kwargs)

    def restore(storage: Any, location: Any) -> Any:
        dev = g.parse(location) if isinstance(location, str) else None
        if dev is None:
            return orig_restore(storage, location)
        if g.backing == "cpu" and storage.device.type == "cpu" and g.storage_label(storage) is None:
            g.label_storage(storage, dev)  # the loader's own fresh CPU storage: no copy needed
            return storage
        return _storage_on(g, storage, dev)

    def to(self: Any, device: Any, non_blocking: bool = False) -> Any:
        dev = g.parse(device)
        here = g.storage_label(self)
        if dev is None and (here is None or device.type != "cpu"):
            return orig_to(self, device, non_blocking)
        dev = dev or "cpu"
        if (here or self.device.type) == dev:
            return self  # already there: no copy, as torch._utils._to
        return _storage_on(g, self, dev)

    p.set(torch, "load", load)
    p.set(ser, "default_restore_location", restore)
    p.set(storage_mod, "_to", to)


def install_save(g: VirtualGPUs, p: Patches) -> None:
    """torch.save records each storage's virtual device ("cuda:1") as its location, as CUDA's tag does
    (torch.serialization.location_tag), so that torch.load restores it there. Under --backing meta a checkpoint
    holds tensor values, which meta tensors do not: stop with the dry run's message at the user's line rather
    than PyTorch's "Cannot copy out of meta tensor" from inside the serializer."""
    import torch.serialization as ser

    orig_tag = ser.location_tag

    def location_tag(storage: Any) -> Any:
        st = storage._untyped_storage if isinstance(storage, torch.storage.TypedStorage) else storage
        return g.storage_label(st) or orig_tag(storage)

    p.set(ser, "location_tag", location_tag)
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


class _Capsule:
    """What `to_dlpack` gives for a tensor on a virtual GPU (or a meta one): the tensor itself, which
    `from_dlpack` hands back as an alias. A real capsule would forget the virtual device."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def install_dlpack(g: VirtualGPUs, p: Patches) -> None:
    """`torch.from_dlpack(t)` of a tensor (or of what `to_dlpack(t)` gave): an alias of its memory, where it is
    (on CUDA a zero-copy view on the same GPU), without autograd's link, as `t.detach()` is. A real DLPack
    capsule carries the CPU or meta tensor under the label, which the alias would lose (a false MP001 when
    the alias meets what it aliases), and refuses meta tensors outright."""
    dlpack = torch.utils.dlpack
    real_from, real_to = dlpack.from_dlpack, dlpack.to_dlpack

    def to_dlpack(tensor: Any) -> Any:
        if (
            isinstance(tensor, torch.Tensor)
            and (g.label_of(tensor) or "cpu") != "cpu"
            or getattr(tensor, "is_meta", False)
        ):
            return _Capsule(tensor)
        return real_to(tensor)

    def from_dlpack(ext_tensor: Any) -> Any:
        if isinstance(ext_tensor, _Capsule):
            ext_tensor = ext_tensor.tensor
        if isinstance(ext_tensor, torch.Tensor):
            return ext_tensor.detach()
        return real_from(ext_tensor)

    p.set(dlpack, "to_dlpack", to_dlpack)
    p.set(dlpack, "from_dlpack", from_dlpack)
    p.set(torch, "from_dlpack", from_dlpack)
