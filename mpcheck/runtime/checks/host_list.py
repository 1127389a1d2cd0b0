"""MP005 at run time for a round trip through a Python list: a GPU tensor read to the host whole with `.tolist()`
and made into a tensor on a GPU again from that very list (`torch.tensor(ids.tolist(), device=d)`, a sampled token
sent back to the embedding's GPU). The host waits for the GPU at the read, the values cross twice and the tensor is
rebuilt element by element, where `ids.to(d)` is one copy that does not make the host wait.

What counts: the list `torch.tensor` gets is the object a `.tolist()` of a tensor on a GPU returned (identity, so a
list sliced or built anew is not it), with the values it had then (a copy is kept to compare: a list changed in
place on the host, negatives re-drawn where they hit a known triple, is the host's data), and `device=` names a GPU.
The lists of the last few reads are kept (Python numbers, never a tensor; at most LIST_MAX_ITEMS of them each), and a
line is reported once it has done this twice: a setup step's one round trip costs one wait, a loop's one per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.sites import repeated_user_read
from mpcheck.runtime.checks.thresholds import NOT_GPU
from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

LIST_MAX_ITEMS = 1 << 12  # a token batch, a few indices: larger reads are a program's export of its results
_KEPT = 4  # the lists of the last reads kept: the one built back is made right after its read


class ListedReads:
    """The last few `.tolist()` reads of GPU tensors: (the list, a copy of its values, the device read from, its
    bytes); and per line of `torch.tensor(...)` how many round trips it made."""

    def __init__(self) -> None:
        self.recent: list[tuple[list[Any], list[Any], str, int]] = []
        self.trips: dict[Any, int] = {}


def on_listed(self: Checker, t: Any, out: Any) -> None:
    """`t.tolist()` gave `out`: keep it a while if `t` is on a GPU (a torch.tensor of it next is a round trip)."""
    if type(out) is not list or not self.wants("MP005"):
        return
    dev = self.devices.device_of(t)
    if dev in NOT_GPU or t.numel() > LIST_MAX_ITEMS:
        return
    recent = self.listed_reads.recent
    recent.append((out, _copy(out), dev, int(t.numel() * t.element_size())))
    if len(recent) > _KEPT:
        del recent[0]


def on_tensor_from_list(self: Checker, data: Any, out: Any) -> None:
    """`torch.tensor(data, ...)` (or `torch.as_tensor`) gave `out`: MP005 when `data` is a list a GPU tensor's `.tolist()` gave and `out`
    is on a GPU, seen from this line a second time."""
    listed = self.listed_reads
    hit = next((r for r in listed.recent if r[0] is data), None)
    if hit is None or not isinstance(out, self._tensor_type) or data != hit[1]:
        return  # not that list, or changed on the host since
    dst = self.devices.device_of(out)
    if dst in NOT_GPU:
        return  # `torch.tensor(t.tolist())`: a copy to the host, made one way
    site = repeated_user_read(self, listed.trips)
    if site is None:
        return
    _, _, src, nbytes = hit
    module = self.current_module()
    self.emit(
        "MP005",
        site,
        f"round trip through the host: a tensor on {src} is read whole with `.tolist()` and made again on {dst} "
        f"from that list here, on every pass: the host waits for the GPU, and the values ({size_words(nbytes)}) cross "
        f"twice, where one copy {src} -> {dst} needs no wait",
        devices=(src, "cpu", dst),
        modules=(module,) if module else (),
        suggestion=f"move the tensor itself: `t.to('{dst}')` for `torch.tensor(t.tolist(), device='{dst}')`",
        extra={"scope": "host_list"},
    )


def _copy(values: list[Any]) -> list[Any]:
    """The values of a nested list of numbers, as they are now."""
    return [_copy(v) if type(v) is list else v for v in values]
