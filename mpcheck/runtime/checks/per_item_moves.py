"""MP021 at run time: many small tensors moved one by one from one device to another, at one line, then
gathered there by `torch.stack` / `torch.cat` (`[x.to(dev) for x in xs]` stacked, or a Dataset whose
`__getitem__` moves each sample to the GPU and a DataLoader's collate stacking them). Each copy pays its
own launch and wait; gathering on the source and moving the result once pays one.

The gather is seen as the first read of its items where they arrived (arrivals.py): every item must be a
transfer's output (or a view of one) from the same source device, made at the same line of the user's
code, and at most ITEM_MAX_BYTES; there must be MIN_ITEMS of them at least (both measured: below). And no
transfer of another way may have been made between the first item's and the last's: a micro-batch pipeline
sends each chunk back as the last stage finishes it, between the next chunks' hops, its copies overlapping
the work (no one place to stack them before that work is done). Blocking copies to the host overlap nothing: those
are judged the same with other ways' transfers between them, as long as no upload from the host came between (a
sampling loop's per-step `paths.append(y.cpu())`, against an evaluation loop's `preds.append(p.cpu())` between
new batches, whose per-batch copy is the common way to bound GPU memory).

The same cost is paid by a loop that moves the slices of one tensor one by one (`on_slice_move`): a recurrent
decoder fed per time step from a stage on another device (`for t in range(T): h = cell(x[:, t].to(dev), h)`),
token ids sent one column at a time. MIN_ITEMS distinct slices of one unchanged storage, at most SLICE_MAX_BYTES
each, each used where it arrived before the next is moved, moved at one line to one device within one step, with no transfer of another way between them: the
tensor could have been moved once, before the loop, and sliced where it arrived (bench/per_item_transfer.py,
its slice rows).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.codes import PER_ITEM_MIN_ITEMS
from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.storage_ref import version_of
from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

GATHERS = frozenset({"stack", "cat", "concat", "concatenate", "hstack", "vstack", "pad_sequence"})
# How a gather is spelt in advice (the others are `torch.<name>`).
_SPELT = {"pad_sequence": "nn.utils.rnn.pad_sequence"}
# Measured (bench/per_item_transfer.py, one H200, host -> GPU): one by one costs x4.0 (8 x 4 KiB) to x9.9
# (32 x 4 KiB), x2.1-x2.3 at 64 KiB, x1.0-x1.1 at 256 KiB; from 1 MiB stacking pageable host memory first
# costs more than it saves (x0.4-x0.5).
MIN_ITEMS = PER_ITEM_MIN_ITEMS
ITEM_MAX_BYTES = 128 << 10
# Slices of one tensor moved one by one against the tensor moved once and sliced where it arrived (same bench,
# its slice rows, host -> cuda:0): x3.7-x7.4 at 4 KiB, x2.7-x4.2 at 64 KiB, x1.4-x1.9 at 1 MiB (no stacking to pay
# for: the one copy is of memory that is already together).
SLICE_MAX_BYTES = 1 << 20


def on_gather(self: Checker, func: Any, items: Any) -> None:
    """`func` (a gather) is about to read `items`: moved one by one from one line? (Called before the reads
    are noted, while the items are still recorded as arrivals.)"""
    if len(items) < MIN_ITEMS or not self.wants("MP021"):
        return
    objects, arrivals = self.arrived_objects, self._arrivals
    first = None
    stamps = []
    waited = True  # every copy a blocking one from a GPU to the host?
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
        waited = waited and entry[0].waited
        try:
            if _bytes(t) > ITEM_MAX_BYTES:
                return
        except Exception:  # a size not known as a number
            return
    if first is None:
        return
    earliest, latest = min(stamps), max(stamps)
    if latest[0] - earliest[0] != latest[1] - earliest[1] and not (waited and latest[2] == earliest[2]):
        # Other ways' transfers between them: interleaved with the work (see the module's text). Not so for copies
        # to the host that each made it wait for the GPU, in a loop that brought no new data from the host (a
        # sampler's per-step `.cpu()`): no work overlaps a blocking copy, and all of it ran on what was there.
        return
    src, site = first
    dst = self.devices.device_of(items[0])
    if dst == src:
        return
    item_bytes = _bytes(items[0])
    name = getattr(func, "__name__", "stack")
    name = _SPELT.get(name, f"torch.{name}")
    if waited:
        each = ", each a wait of the host for the GPU,"
        how = f"keep them on {src} and move the gathered result once (`{name}(items).cpu()`)"
    else:
        each = ","
        how = (
            f"gather them on {src} first and move the result once (`{name}(items).to('{dst}')`); "
            "from a Dataset, return host tensors from `__getitem__` and move the batch the DataLoader gives "
            "(`pin_memory=True` and `.to(dev, non_blocking=True)`)"
        )
    self.emit(
        "MP021",
        site,
        f"{len(items)} tensors (about {size_words(item_bytes)} each) are moved {src} -> {dst} one by one here{each} "
        f"then gathered on {dst} by `{name}` at {self.sites()}: {len(items)} copies where one would do",
        devices=(src, dst),
        suggestion=how,
        extra={"items": len(items), "item_bytes": item_bytes},
    )


class SliceMoves:
    """Per (storage, line, destination): the slices of that storage moved there one by one in this step."""

    def __init__(self) -> None:
        # key -> [weak ref to the storage, its version, the slices' offsets, the first move's stamp, step, the last
        # copy's storage id]
        self.open: dict[tuple[int, Any, str], list[Any]] = {}
        self.reported: set[Any] = set()  # lines already reported: once each


_UNSEEN = -1  # the copy a module call made while the signature cache ran it unchecked: read there, as when checked


def on_slice_move(
    self: Checker, t: Any, out: Any, src_dev: str, dst_dev: str, site: Any, nbytes: int, read_unseen: bool = False
) -> None:
    """A user's copy of `t` to `out` (forward code, under the lock): one more slice of a tensor moved one by one,
    each used where it arrived before the next is moved? (Copies kept unread and gathered later are `on_gather`'s.)
    `read_unseen`: made in a module call run unchecked (capture/signatures.py), whose checked runs read it."""
    moves = self.slice_moves
    # A time step of a tensor on the host (`prompt[:, t]`, strided): the whole could have been uploaded once, before
    # the loop, whatever copies of other ways come between (a recurrent prefill whose every step crosses the stages).
    # Rows (`x[i]`, in one piece) may be a pre-batched data set's batches, uploaded one by one to bound GPU memory
    # alongside the other work: judged as before.
    time_step = src_dev == "cpu" and _strided(t)
    if read_unseen and not time_step:
        return  # other ways' copies made unchecked are not counted: a pipeline's interleaving could not be told
    if nbytes > SLICE_MAX_BYTES or site is None or site.context or site in moves.reported or not self.wants("MP021"):
        return
    try:
        storage = t.untyped_storage()
        offset, whole = t.storage_offset(), storage.nbytes()
        arrived = _UNSEEN if read_unseen else id(out.untyped_storage())
    except Exception:  # no storage (a subclass, a sparse tensor)
        return
    if whole < 2 * nbytes:
        return  # the whole of its storage: no slice
    base = getattr(t, "_base", None)
    if t.is_contiguous() and base is not None and t.dim() == base.dim():
        # Rows in one piece, as many dimensions as the tensor they are cut from (`x[i : i + batch]`, `x.split(b)`):
        # a batch of a corpus encoded chunk by chunk, on purpose (what bounds its memory is the work on each
        # chunk). A time step or a column is strided (`x[:, t]`), a row has a dimension less (`x[i]`).
        return
    key = (id(storage), site, dst_dev)
    version, step = version_of(t), self.ledger.step_index
    stamp = (self.transfers_made, self._transfers_by_way.get((src_dev, dst_dev), 0))
    entry = moves.open.get(key)
    if entry is None or entry[0]() is not storage or entry[1] != version or entry[4] != step or version is None:
        if len(moves.open) >= PURGE_AT:
            moves.open.clear()
        moves.open[key] = [weakref.ref(storage), version, {offset}, stamp, step, arrived]
        return
    first = entry[3]
    # Copies of other ways between them are a pipeline's, interleaved with the work; not so for a host time step.
    interleaved = stamp[0] - first[0] != stamp[1] - first[1] and not time_step
    if interleaved or (entry[5] != _UNSEEN and entry[5] not in self._read_arrivals):
        # Copies of another way between them: interleaved with the work (a pipeline). Or the last copy is not
        # used yet: the copies are being collected, for a gather (`on_gather`) or to be used together.
        del moves.open[key]
        return
    entry[2].add(offset)
    entry[5] = arrived
    if len(entry[2]) < MIN_ITEMS:
        return
    moves.reported.add(site)
    del moves.open[key]
    count = len(entry[2])
    self.emit(
        "MP021",
        site,
        f"the slices of one tensor (about {size_words(nbytes)} each, {size_words(whole)} in all) are moved "
        f"{src_dev} -> {dst_dev} one by one here: {count} copies in this step already, of data that did not change "
        f"between them, where one copy of the whole would do",
        devices=(src_dev, dst_dev),
        suggestion=f"move the whole tensor to {dst_dev} once, before the loop, and slice the copy there "
        f"(`x_dst = x.to('{dst_dev}')`, then `x_dst[:, t]`)",
        extra={"items": count, "item_bytes": nbytes, "slices": True},
    )


def _bytes(t: Any) -> int:
    return int(t.numel() * t.element_size())


def _strided(t: Any) -> bool:
    try:
        return not t.is_contiguous()
    except Exception:  # a sparse tensor has no strides
        return False
