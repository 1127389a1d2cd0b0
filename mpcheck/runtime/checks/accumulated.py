"""MP005 at run time for a running sum kept on the wrong GPU: the outputs of layers on one GPU each copied to another
only to be added to a sum there, which then goes back to the first GPU (WaveNet's skip connections summed on the
first stage's GPU: `skips = skips + s.to(devices[0])` in a loop over layers on both GPUs, then
`head(skips.to(devices[-1]))`). Each such addend crosses the link (and its gradient back), and so does the sum;
carrying the sum across once (`skips = skips.to(dev) + s`) copies one tensor where those copies do the same.

What counts (`on_accumulated`, called by the capture layer after an add that read an arrived tensor): an add of two
operands of the result's shape on one GPU, one of them arrived from another GPU, the other a tensor there or a
number (`0 + s`, a sum's start). The result is remembered weakly by its storage with the arrival's source and how
many arrivals from there it sums; an add of it with a tensor already there (a layer of that GPU's own) carries it
on (`carry_accumulated`). A move of the sum ends it: back to the addends' GPU after two or more of them, it is
reported, at the line that moved the addends over; anywhere else, or after one (a residual stream between blocks on
the other GPU, MP006's), it is not.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.sites import UNKNOWN, Site
from mpcheck.runtime.checks.storage_ref import version_of
from mpcheck.runtime.checks.thresholds import NOT_GPU
from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

ADDS = frozenset({"add", "add_", "__add__", "__radd__", "__iadd__"})  # the ops of a running sum, by name


class Sum:
    """A running sum's storage: the GPU its arrived addends came from, how many and their bytes, the first one's
    move, and the version counter after the add that made it (changed since by anything but an add: no sum)."""

    __slots__ = ("ref", "src", "count", "addend_bytes", "first_site", "version", "grad")

    def __init__(
        self, ref: Any, src: str, count: int, addend_bytes: int, first_site: Site, version: Any, grad: bool
    ) -> None:
        self.ref, self.src, self.count, self.addend_bytes = ref, src, count, addend_bytes
        self.first_site, self.version, self.grad = first_site, version, grad


def on_accumulated(self: Checker, args: tuple[Any, ...], out: Any, arrived: list[Any]) -> None:
    """An add gave `out` from `args`, reading the arrived tensors `arrived` (note_reads' hits)."""
    if len(arrived) != 1 or len(args) != 2 or not isinstance(out, self._tensor_type):
        return
    x, sid = arrived[0]
    entry = self._arrivals.get(sid)
    if entry is None:
        return
    src, arrival_site = entry[1], entry[2]
    here = self.devices.device_of(out)
    if src in NOT_GPU or here in NOT_GPU or src == here or x.shape != out.shape:
        return
    other = args[1] if args[0] is x else args[0]
    prev = None
    if isinstance(other, self._tensor_type):
        if other.shape != out.shape or self.devices.device_of(other) != here:
            return
        prev = _sum_of(self, other, changed_by_this_op=other is out)
        if prev is not None and prev.src != src:
            return  # a sum of another GPU's addends: a sum of two sources, judged by neither
    elif not isinstance(other, (int, float)):
        return
    _remember(
        self,
        out,
        src,
        (prev.count if prev is not None else 0) + 1,
        _bytes(x),
        prev.first_site if prev is not None else arrival_site,
        bool(x.requires_grad) or (prev is not None and prev.grad),
    )


def carry_accumulated(self: Checker, args: tuple[Any, ...], out: Any) -> None:
    """An add with no arrival in it: a running sum plus a tensor already on its GPU is the same sum, carried on."""
    if len(args) != 2 or not isinstance(out, self._tensor_type):
        return
    for a, b in ((args[0], args[1]), (args[1], args[0])):
        if isinstance(a, self._tensor_type):
            prev = _sum_of(self, a, changed_by_this_op=a is out)
            if prev is not None:
                if isinstance(b, self._tensor_type) and b.shape != out.shape:
                    return  # a broadcast bias, a mask: no addend of the sum
                _remember(self, out, prev.src, prev.count, prev.addend_bytes, prev.first_site, prev.grad)
                return


def check_accumulated_move(
    self: Checker, t: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None, nbytes: int
) -> None:
    """A transfer of `t`: a running sum moved ends it, reported when it goes back to its addends' GPU."""
    try:
        storage = t.untyped_storage()
    except Exception:
        return
    s = self._sums.pop(id(storage), None)
    if s is None or s.ref() is not storage or s.version != version_of(t):
        return
    if s.src != dst_dev or s.count < 2 or not self.wants("MP005"):
        return
    copies = f"{s.count} copies of {size_words(s.addend_bytes)}"
    grads = " (and as many of their gradients back in backward)" if s.grad else ""
    self.emit(
        "MP005",
        s.first_site,
        f"running sum kept on {src_dev}: {s.count} tensors made on {dst_dev} are moved {dst_dev} -> {src_dev} here, "
        f"one by one, only to be added to it, and the sum goes back to {dst_dev} at {site or UNKNOWN}: "
        f"{copies} and one of the sum{grads}, where carrying the sum to {dst_dev} once, before their turn, "
        "copies one tensor",
        devices=(dst_dev, src_dev),
        modules=(module,) if module else (),
        suggestion="carry the running sum to the addends' GPU and add them there (`total = total.to(x.device) + x` "
        "for `total = total + x.to(total.device)`)",
        extra={"scope": "accumulated", "addends": s.count, "addend_bytes": s.addend_bytes, "back_at": str(site)},
    )


def _sum_of(self: Checker, t: Any, changed_by_this_op: bool = False) -> Sum | None:
    """The running sum `t` holds, unchanged since its last add (`changed_by_this_op`: `t += x` just changed it)."""
    try:
        storage = t.untyped_storage()
    except Exception:
        return None
    s = self._sums.get(id(storage))
    if s is None or s.ref() is not storage:
        return None
    version = version_of(t)
    if version != s.version and not (changed_by_this_op and version is not None and version == s.version + 1):
        return None
    return s


def _remember(self: Checker, out: Any, src: str, count: int, addend_bytes: int, first_site: Site, grad: bool) -> None:
    try:
        storage = out.untyped_storage()
    except Exception:  # a tensor without storage: not followed
        return
    sums = self._sums
    sums[id(storage)] = Sum(weakref.ref(storage), src, count, addend_bytes, first_site, version_of(out), grad)
    if len(sums) > PURGE_AT:
        for k in [k for k, v in sums.items() if v.ref() is None]:
            del sums[k]


def _bytes(t: Any) -> int:
    try:
        return int(t.numel() * t.element_size())
    except Exception:  # a symbolic size
        return 0
