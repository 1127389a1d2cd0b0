"""MP009: a device argument that names a CUDA index the machine does not have, reported at the
user's line before CUDA's "invalid device ordinal". Checked per placement, cached per device value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def check_device(self: Checker, device_like: Any) -> None:
    """A device argument (`.to('cuda:2')`, `device=torch.device('cuda', 2)`, `.cuda(2)`) naming a
    CUDA index the machine does not have: MP009 at the user's line, before CUDA's "invalid device
    ordinal". Only a device something is placed on is checked; a `torch.device` made and never
    used is no bug. Cached per device value: a placement costs one dict lookup."""
    try:
        missing = self._missing.get(device_like)
    except TypeError:  # unhashable: not a device
        return
    if missing is None:
        missing = self._missing[device_like] = self._missing_index(device_like)
    if missing is not False:
        self._report_missing_device(missing)


def _missing_index(self: Checker, device_like: Any) -> int | bool:
    """The CUDA index `device_like` names when no such device exists, else False."""
    count = self._gpu_count()
    if not count:  # no CUDA at all (or a Devices that cannot say): PyTorch's own error is clear
        return False
    import torch

    if isinstance(device_like, bool):
        return False
    if isinstance(device_like, int):
        index = device_like  # `.to(2)`, `.cuda(2)`: a CUDA index
    elif isinstance(device_like, (str, torch.device)):
        try:
            dev = torch.device(device_like)
        except (RuntimeError, TypeError, ValueError):
            return False
        if dev.type != "cuda" or dev.index is None:
            return False
        index = dev.index
    else:
        return False
    return index if index >= count else False


def _gpu_count(self: Checker) -> int:
    count = getattr(self.devices, "gpu_count", None)
    return count() if count is not None else 0


def _report_missing_device(self: Checker, index: int) -> None:
    if not self.wants("MP009"):
        return
    n = self._gpu_count()
    have = f"{n} GPU{'s' if n > 1 else ''} (cuda:0..cuda:{n - 1})" if n > 1 else "1 GPU (cuda:0)"
    module = self.current_module()
    self.emit(
        "MP009",
        self.sites(),
        f"cuda:{index} does not exist: this run has {have}; CUDA fails here with 'invalid device ordinal'",
        devices=(f"cuda:{index}",),
        modules=(module,) if module else (),
        suggestion="take the device from the stage that will use the tensor (`next(stage.parameters()).device`) "
        "or from a list of the devices that exist, not from arithmetic on an index "
        "(`f'cuda:{k + 1}'`); check torch.cuda.device_count()",
    )
