"""MP021 at run time: many small tensors moved one by one from one device to another, at one line, then
gathered there by `torch.stack` / `torch.cat` (`[x.to(dev) for x in xs]` stacked, or a Dataset whose
`__getitem__` moves each sample to the GPU and a DataLoader's collate stacking them). Each copy pays its
own launch and wait; gathering on the source and moving the result once pays one.

The gather is seen as the first read of its items where they arrived (arrivals.py): every item must be a
transfer's output (or a view of one) from the same source device, made at the same line of the user's
code, and at most ITEM_MAX_BYTES; there must be MIN_ITEMS of them at least (both measured: below). And no
transfer of another way may have been made between the first item's and the last's: a micro-batch pipeline
sends each chunk back as the last stage finishes it, between the next chunks' hops, its copies overlapping
the work (no one place to stack them before that work is done).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

GATHERS = frozenset({"stack", "cat", "concat", "concatenate", "hstack", "vstack"})
# Measured (bench/per_item_transfer.py, one H200, host -> GPU): one by one costs x4.0 (8 x 4 KiB) to x9.9
# (32 x 4 KiB), x2.1-x2.3 at 64 KiB, x1.0-x1.1 at 256 KiB; from 1 MiB stacking pageable host memory first
# costs more than it saves (x0.4-x0.5).
MIN_ITEMS = 8
ITEM_MAX_BYTES = 128 << 10


def on_gather(self: Checker, func: Any, items: Any) -> None:
    """`func` (a gather) is about to read `items`: moved one by one from one line? (Called before the reads
    are noted, while the items are still recorded as arrivals.)"""
    if len(items) < MIN_ITEMS or not self.wants("MP021"):
        return
    objects, arrivals = self.arrived_objects, self._arrivals
    first = None
    stamps = []
    for t in items:
        hit = objects.get(id(t))
        if hit is None or type(hit[1]) is not int or hit[0]() is not t:
            return
        entry = arrivals.get(hit[1])
        if entry is None:
            return
        src, site = entry[1], entry[2]
        if site.context or (first is not None and (src, site) != first):
            return
        first = (src, site)
        stamps.append(entry[0].moved_at)
        try:
            if _bytes(t) > ITEM_MAX_BYTES:
                return
        except Exception:  # a size not known as a number
            return
    if first is None:
        return
    earliest, latest = min(stamps), max(stamps)
    if latest[0] - earliest[0] != latest[1] - earliest[1]:
        return  # other ways' transfers between them: interleaved with the work (see the module's text)
    src, site = first
    dst = self.devices.device_of(items[0])
    if dst == src:
        return
    item_bytes = _bytes(items[0])
    name = getattr(func, "__name__", "stack")
    self.emit(
        "MP021",
        site,
        f"{len(items)} tensors (about {size_words(item_bytes)} each) are moved {src} -> {dst} one by one here, "
        f"then gathered on {dst} by `torch.{name}` at {self.sites()}: {len(items)} copies where one would do",
        devices=(src, dst),
        suggestion=f"gather them on {src} first and move the result once (`torch.{name}(items).to('{dst}')`); "
        "from a Dataset, return host tensors from `__getitem__` and move the batch the DataLoader gives "
        "(`pin_memory=True` and `.to(dev, non_blocking=True)`)",
        extra={"items": len(items), "item_bytes": item_bytes},
    )


def _bytes(t: Any) -> int:
    return int(t.numel() * t.element_size())
