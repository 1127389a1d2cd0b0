"""MP020 at run time for numbers made on a GPU only to be read on the host: a tensor a factory makes on a GPU from a
shape alone (`torch.randint(0, w, (), device=gpu)`, a SpecAugment span; `torch.randint(0, n, (B, k), device=gpu)`,
negatives filtered on the host), whose first use is its read on the host (`int()`, `.item()`, `.tolist()`) or its
copy to the host, on every step. The host waits for the GPU to make numbers it could have made itself: made on the
host (no `device=`), nothing waits. (MP019 is the other way round: made on the host only to be copied to a GPU.)

The factory's output is remembered weakly, as MP019's are (made_on_host.py: a `GpuMade` record in `arrived_objects`),
so that the ops that read it on the GPU mark it read: used there first, the GPU was the place to make it. A read on
the host of such a tensor, unread and unchanged since it was made, is reported from its line's second time (once is
set-up, every step is the cost).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.made_on_host import HostMade, remember_made
from mpcheck.runtime.checks.sites import repeated_user_read

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

_READS = {
    "item": "`.item()`",
    "tolist": "`.tolist()`",
    "__int__": "`int()`",
    "__float__": "`float()`",
    "__bool__": "`bool()`",
    "__index__": "an index",
}


class GpuMade(HostMade):
    """A factory's output on a GPU, not read there yet."""

    __slots__ = ()


def note_gpu_made(self: Checker, t: Any, factory: str, args: tuple[Any, ...]) -> None:
    """`t` was just made on a GPU by `torch.<factory>(*args, device=...)`."""
    if self.wants("MP020"):
        remember_made(self, t, factory, args, GpuMade)


def on_gpu_made_to_host(self: Checker, t: Any, how: str) -> bool:
    """`t` is read on the host (`how`: a read's name, or "cpu" for a copy there): MP020 when it is a GPU factory's
    output that nothing read on the GPU. True when it was (reported or counted): no other MP020 count for it."""
    hit = self.arrived_objects.get(id(t))
    if hit is None or type(hit[1]) is not GpuMade or hit[0]() is not t or getattr(t, "_base", None) is not None:
        return False  # (a row of it, read on its own: element_reads.py's)
    made = hit[1]
    del self.arrived_objects[id(t)]  # its first use is this read: decided here, once
    try:
        if made.read or getattr(t, "_version", None) != made.version:
            return False  # worked on where it was made (or filled in place: made from more than a shape)
    except Exception:  # an inference tensor: no version counter
        return False
    site = repeated_user_read(self, self._gpu_made_reads)
    if site is None:
        return True
    dev = self.devices.device_of(t)
    read = "its copy to the host" if how == "cpu" else f"its read on the host ({_READS.get(how, f'`{how}`')})"
    module = self.current_module()
    self.emit(
        "MP020",
        site,
        f"`torch.{made.factory}(..., device=...)` makes this tensor on {dev}, and its first use is {read}, on every "
        f"step: the host waits for the GPU to make numbers it could have made itself. Make it on the host.",
        devices=(dev, "cpu"),
        modules=(module,) if module else (),
        suggestion=f"drop `device=` from `torch.{made.factory}(...)`: made on the host, it is read there with no wait",
        extra={"scope": "gpu_made", "factory": made.factory},
    )
    return True
