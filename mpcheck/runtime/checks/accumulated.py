"""MP005 at run time for a running sum kept on the wrong GPU: the outputs of layers on one GPU each copied to another
only to be added to a sum there, which then goes back to the first GPU (WaveNet's skip connections summed on the
first stage's GPU: `skips = skips + s.to(devices[0])` in a loop over layers on both GPUs, then
`head(skips.to(devices[-1]))`). Each such addend crosses the link (and its gradient back), and so does the sum;
carrying the sum across once (`skips = skips.to(dev) + s`) copies one tensor where those copies do the same.

What counts (`on_accumulated`, called by the capture layer after an add that read an arrived tensor or a sum): an
add of two operands of the result's shape on one GPU, one of them arrived from another GPU, the other a tensor there
or a number (`0 + s`, a sum's start). The result is remembered weakly, by its storage and as an arrived object
(arrivals.py: so that the ops that read it mark it read), with the arrival's source and how many arrivals from there
it sums; an add of it with a tensor already there (a layer of that GPU's own) carries it on. A sum some other op read
(a residual stream that the next block takes as its input: HRNet's branch, `x + body(x)`) is an activation, no
accumulator: it starts no count and carries none. A move of the sum ends it: back to the addends' GPU after two or more
of them, unread, it is reported, at the line that moved the addends over; anywhere else, or after one (a residual
stream between blocks on the other GPU, MP006's), it is not.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.sites import UNKNOWN, Site
from mpcheck.runtime.checks.storage_ref import version_of
from mpcheck.runtime.checks.thresholds import NOT_GPU
from mpcheck.runtime.checks.transfer_events import known_bytes
from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

ADDS = frozenset({"add", "add_", "__add__", "__radd__", "__iadd__"})  # the ops of a running sum, by name


class Sum:
    """A running sum's storage: the GPU its arrived addends came from, how many and their bytes, the first one's
    move, the version counter after the add that made it (changed since by anything but an add: no sum), and whether
    an op read it since (arrivals.note_reads)."""

    __slots__ = ("ref", "src", "count", "addend_bytes", "first_site", "version", "grad", "read", "moved")

    def __init__(
        self, ref: Any, src: str, count: int, addend_bytes: int, first_site: Site, version: Any, grad: bool
    ) -> None:
        self.ref, self.src, self.count, self.addend_bytes = ref, src, count, addend_bytes
        self.first_site, self.version, self.grad = first_site, version, grad
        self.read = False
        self.moved = False  # moved to another device since: the sum ended there (check_accumulated_move)


def on_accumulated(self: Checker, args: tuple[Any, ...], out: Any, hits: list[Any]) -> None:
    """An add gave `out` from `args`, reading the arrived tensors and sums `hits` (note_reads' hits)."""
    if len(args) != 2 or not isinstance(out, self._tensor_type):
        return
    arrivals = [(t, sid) for t, sid in hits if type(sid) is int]
    sums = {id(t): s for t, s in hits if type(s) is Sum}  # sums no other op read since their add
    here = self.devices.device_of(out)
    if here in NOT_GPU or len(arrivals) > 1:
        return
    if not arrivals:  # a sum plus a tensor of its own GPU: the same sum, carried on
        for a, b in ((args[0], args[1]), (args[1], args[0])):
            prev = sums.get(id(a))
            if prev is not None and _unchanged(prev, a, a is out):
                if isinstance(b, self._tensor_type) and (b.shape != out.shape or id(b) in sums):
                    return  # a broadcast bias, a mask, another sum: no addend of this one
                _remember(self, out, prev.src, prev.count, prev.addend_bytes, prev.first_site, prev.grad)
                return
        return
    x, sid = arrivals[0]
    entry = self._arrivals.get(sid)
    if entry is None:
        return
    src, arrival_site = entry[1], entry[2]
    if src in NOT_GPU or src == here or x.shape != out.shape:
        return
    other = args[1] if args[0] is x else args[0]
    prev = None
    if isinstance(other, self._tensor_type):
        if other.shape != out.shape or self.devices.device_of(other) != here:
            return
        prev = sums.get(id(other))
        if prev is not None and not _unchanged(prev, other, other is out):
            prev = None
        if prev is not None and prev.src != src:
            return  # a sum of another GPU's addends: a sum of two sources, judged by neither
    elif not isinstance(other, (int, float)):
        return
    _remember(
        self,
        out,
        src,
        (prev.count if prev is not None else 0) + 1,
        known_bytes(x),
        prev.first_site if prev is not None else arrival_site,
        bool(x.requires_grad) or (prev is not None and prev.grad),
    )


def check_accumulated_move(
    self: Checker, t: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None, nbytes: int
) -> None:
    """A transfer of `t`: a running sum moved ends it, reported when it goes back to its addends' GPU."""
    try:
        storage = t.untyped_storage()
    except Exception:
        return
    s = self._sums.pop(id(storage), None)
    if s is not None:
        s.moved = True
    if s is None or s.ref() is not storage or s.version != version_of(t) or s.read:
        return  # (read since its last add: the sum was needed where it is)
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


def _unchanged(s: Sum, t: Any, changed_by_this_op: bool) -> bool:
    """Is `t` the sum `s` records, unchanged since its last add (`changed_by_this_op`: `t += x` just changed it), and
    not moved since (a residual stream sent to a block on the other GPU: its count starts again)?"""
    if s.moved:
        return False
    try:
        if s.ref() is not t.untyped_storage():
            return False
    except Exception:
        return False
    version = version_of(t)
    return version == s.version or (changed_by_this_op and version is not None and version == s.version + 1)


def _remember(self: Checker, out: Any, src: str, count: int, addend_bytes: int, first_site: Site, grad: bool) -> None:
    try:
        storage = out.untyped_storage()
    except Exception:  # a tensor without storage: not followed
        return
    sums = self._sums
    record = Sum(weakref.ref(storage), src, count, addend_bytes, first_site, version_of(out), grad)
    sums[id(storage)] = record
    self.arrived_objects[id(out)] = (weakref.ref(out), record)  # so that an op reading it marks it read
    if len(sums) > PURGE_AT:
        for k in [k for k, v in sums.items() if v.ref() is None]:
            del sums[k]
