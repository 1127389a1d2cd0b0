"""MP020 at run time for a number the host already has: a value read on the host (`int()`, `.item()`, `float()`,
`bool()`) that was computed on a GPU only from data uploaded from the host, whose host copy is still there and
unchanged (`n_valid = int((labels_dev != IGNORE).sum())` next to `labels`, a count that sizes a top-k). The read
makes the host wait for everything queued on the GPU before it, at every step; the same count from the host copy
(`int((labels != IGNORE).sum())`) costs the host a few microseconds and no wait.

What counts: a copy from the host to a GPU of at most HOST_KNOWN_MAX_BYTES, at the user's line, is marked with its
source (weakly: nothing here keeps a tensor alive); an op whose tensor arguments are all marked, and which only
compares, combines element by element, reshapes, picks or reduces (`CHEAP`), marks its output with the first
one's source. A host read of a marked value is reported from its line's second read on (once per line), when the
source is alive and unchanged since the copy (its version counter): a batch whose host copy was dropped
(`y = y.to(dev)`) leaves nothing to compute from, and is not reported.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.reduced_after_move import ELEMENTWISE, REDUCTIONS
from mpcheck.runtime.checks.sites import Site, repeated_user_read
from mpcheck.runtime.checks.storage_ref import version_of

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

HOST_KNOWN_MAX_BYTES = 16 << 20  # a batch's labels, masks, lengths: cheap to recount on the host
# Ops whose output holds no more than their inputs' values, compared, combined, reshaped, picked or reduced.
CHEAP = (ELEMENTWISE | REDUCTIONS) - {"softmax"} | {
    "__getitem__", "long", "int", "bool", "to", "__and__", "__or__", "logical_and", "logical_or", "bitwise_and",
    "bitwise_or", "masked_select", "nonzero", "unique", "numel", "max", "min", "where",
}  # fmt: skip


_READS = {"item": "`.item()`", "__int__": "`int()`", "__float__": "`float()`", "__bool__": "`bool()`"}


class Uploads:
    """id(tensor) -> (weak ref to it, its version, (weak ref to the host source, the source's version, the
    copy's line)); and the lines whose reads were counted or reported."""

    def __init__(self) -> None:
        self.marks: dict[int, tuple[Any, Any, tuple[Any, Any, Site]]] = {}
        self.reads: dict[tuple[str, int], int] = {}
        self.const_reads: dict[tuple[str, int], int] = {}  # reads of values made of constants (on_const_read)


def on_upload(self: Checker, src: Any, out: Any, site: Site | None) -> None:
    """`out` is a copy of host tensor `src` on a GPU, made at `site`."""
    if site is None or site.context or not self.wants("MP020"):
        return
    try:
        if src.numel() * src.element_size() > HOST_KNOWN_MAX_BYTES:
            return
        origin = (weakref.ref(src), version_of(src), site)
    except Exception:  # noqa: BLE001  (a tensor without weak references or sizes: not followed)
        return
    _mark(self.uploads, out, origin)


def derive_upload(self: Checker, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """A call whose first tensor argument is marked returned `out`: marked too when the call is `CHEAP` and every
    tensor it read is marked (a comparison with a number, a sum, `a & b` of two uploaded masks)."""
    if getattr(func, "__name__", "") not in CHEAP:
        return
    marks = self.uploads.marks
    origin = None
    for a in (*args, *kwargs.values()):
        for b in a if type(a) in (list, tuple) else (a,):
            if isinstance(b, self._tensor_type):
                entry = marks.get(id(b))
                if entry is None or entry[0]() is not b or entry[1] != version_of(b):
                    return
                origin = origin or entry[2]
    if origin is None:
        return
    for o in out if type(out) in (list, tuple) else (out,):
        if isinstance(o, self._tensor_type) and o is not args[0]:  # (not an in-place call's target)
            _mark(self.uploads, o, origin)


def on_known_read(self: Checker, t: Any, how: str) -> None:
    """`t`'s value is about to be read on the host: MP020 when it is a marked value whose source is still on the
    host, unchanged."""
    entry = self.uploads.marks.get(id(t))
    if entry is None or entry[0]() is not t or entry[1] != version_of(t):
        return
    ref, version, copied_at = entry[2]
    src = ref()
    if src is None or version_of(src) != version:
        return
    site = repeated_user_read(self, self.uploads.reads)
    if site is not None:
        _report_wait(
            self,
            t,
            site,
            how,
            f"a value computed there only from data copied from the host at {copied_at}, whose host copy is still "
            "there, unchanged",
            "compute it from the host copy (`int((labels != ignore).sum())` for `int((labels.to(dev) != ignore).sum())`)",
            {"scope": "host_known", "copied_at": str(copied_at)},
        )


def on_const_read(self: Checker, t: Any, how: str) -> None:
    """`t`'s value is about to be read on the host: MP020 when it lives on a GPU and was computed there only from
    constants and numbers (provenance.py: a counter made by `torch.zeros((), device=...)` and stepped with `+= 1`, a
    schedule's scale computed from it), read from one line twice: the host keeps such a number itself, with no wait."""
    if how not in _READS or t.numel() != 1 or not self.provenance.is_const(t) or not self.wants("MP020"):
        return  # (one number: a counter, a scale; the rows of a table of constants are element_reads.py's)
    if not self.devices.device_of(t).startswith("cuda"):
        return
    site = repeated_user_read(self, self.uploads.const_reads)
    if site is not None:
        _report_wait(
            self,
            t,
            site,
            how,
            "a value computed there only from constants and numbers (a counter or a schedule kept on the GPU, stepped "
            "in place)",
            "keep the value on the host: a Python number (or a CPU tensor) stepped there",
            {"scope": "const"},
        )


def _report_wait(
    self: Checker, t: Any, site: Site, how: str, value: str, suggestion: str, extra: dict[str, Any]
) -> None:
    dev = self.devices.device_of(t)
    module = self.current_module()
    self.emit(
        "MP020",
        site,
        f"{_READS.get(how, f'`{how}`')} waits for {dev} for {value}: the host stalls until the GPU has done "
        "everything queued before it, on every step, for a number it could have itself",
        devices=(dev, "cpu"),
        modules=(module,) if module else (),
        suggestion=suggestion,
        extra=extra,
    )


def _mark(uploads: Uploads, t: Any, origin: tuple[Any, Any, Site]) -> None:
    try:
        uploads.marks[id(t)] = (weakref.ref(t), version_of(t), origin)
    except TypeError:  # a tensor type without weak references
        return
    if len(uploads.marks) > PURGE_AT:
        for k, v in list(uploads.marks.items()):
            if v[0]() is None:
                del uploads.marks[k]
