"""What arrived where by a transfer, and whether an op read it there. A transfer's output is recorded
by its storage (transfer_events.py); the capture layer tells the checker which arrived tensors an op
or a module call reads (`note_reads`, `note_view`): data read where it arrived was worked on there,
so moving it back is no round trip (MP005) and continues a chain (MP006). `_arrival` answers MP012.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.arguments import Args, Kwargs
from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.storage_ref import StorageRef, version_of
from mpcheck.runtime.checks.thresholds import NOT_GPU

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def _arrival(self: Checker, t: Any) -> tuple[str, Site] | None:
    """(source device, line) of the transfer whose output `t` is, with the strides the copy gave it
    (a later permute of a dense copy is the program's own layout, not the copy's)."""
    try:
        storage = t.untyped_storage()
    except Exception:
        return None
    entry = self._arrivals.get(id(storage))
    if entry is None:
        return None
    ref = entry[0]
    if (
        ref.ref() is not storage
        or ref.stride != t.stride()
        or ref.shape != tuple(t.shape)
        or ref.offset != t.storage_offset()
    ):
        return None
    return entry[1], entry[2]


def note_reads(self: Checker, args: Args, kwargs: Kwargs) -> list[tuple[Any, Any]]:
    """An op reads these arguments: an arrived tensor among them was used on the device it arrived on.
    An entry is the arrived tensor's only if its weak reference still gives that very object: a freed
    tensor's id goes to the next object of its size, and reading that one reads nothing that arrived.
    Gives (tensor, its arrival's storage id) for each arrived tensor read (worked_detour.py)."""
    objects = self.arrived_objects
    hits: list[tuple[Any, Any]] = []
    for a in (*args, *kwargs.values()) if kwargs else args:
        hit = objects.pop(id(a), None)
        if hit is not None:
            if hit[0]() is a:
                self._note_read(hit[1])
                hits.append((a, hit[1]))
        elif type(a) in (list, tuple):  # torch.cat([a, b])
            for b in a:
                hit = objects.pop(id(b), None)
                if hit is not None and hit[0]() is b:
                    self._note_read(hit[1])
                    hits.append((b, hit[1]))
    return hits


def _note_read(self: Checker, sid: Any) -> None:
    if (
        type(sid) is not int
    ):  # a factory's output not read yet (made_on_host.py, made_on_gpu.py), a sum (accumulated.py)
        sid.read = True
        return
    self._read_arrivals.add(sid)
    if self._unless_read:
        finding = self._unless_read.pop(sid, None)
        if finding is not None:  # used where it landed after all: that copy was needed (round_trip.py)
            self.withdraw(*finding)
    entry = self._arrivals.get(sid)
    if entry is not None:  # on the arrival's own record too, which MP006's chain keeps past the storage
        entry[0].read = True


def note_arrived(self: Checker, t: Any, sid: int) -> None:
    """`t` (a transfer's output, or a view of one) holds the arrived data of storage `sid`: reading it
    reads that data. Weakly: a tensor the program frees leaves an entry that no later object matches."""
    self.arrived_objects[id(t)] = (weakref.ref(t), sid)


def note_view(self: Checker, base: Any, view: Any) -> None:
    """`view` shares an arrived tensor's storage: reading it reads the arrived data."""
    hit = self.arrived_objects.get(id(base))
    if hit is not None and hit[0]() is base:
        self.note_arrived(view, hit[1])


def selected_arrival(self: Checker, args: Args) -> int | None:
    """The arrival storage whose rows an op called with `args` picks, the op being one that picks rows into a new tensor
    (`data[idx]`, `data.index_select(0, idx)`: the capture layer asks for those only), of an arrived
    tensor no op has read where it arrived; else None. The rows go on as that data (`on_selected`), and the
    arrived tensor is not read by picking them: a dataset kept on one GPU whose batches all leave for another
    is data that went to the wrong GPU (round_trip.py's GPU detour), as a tensor moved on whole is."""
    if len(args) < 2 or not _picks_rows(self, args[-1]):
        return None
    t = args[0]
    hit = self.arrived_objects.get(id(t))
    if hit is None or hit[0]() is not t or type(hit[1]) is not int:
        return None
    sid = hit[1]
    return sid if sid in self._arrivals and sid not in self._read_arrivals else None


def _picks_rows(self: Checker, index: Any) -> bool:
    """An index that gathers rows into a new tensor (a tensor or a list of them, as `data[idx]` and
    `index_select(0, idx)` take), not a slice or `None` (a view of the same data, which is read where it is)."""
    if isinstance(index, self._tensor_type) or type(index) is list:
        return True
    return type(index) is tuple and any(isinstance(i, self._tensor_type) or type(i) is list for i in index)


def gathered_on_host(self: Checker, items: Any) -> int | None:
    """`torch.stack(items)` / `cat` of copies from GPUs to the host, each unread and unchanged there (`[h.cpu()
    for h in hidden]`): the first one's arrival (its storage id), else None. The gathered data goes on as theirs
    (on_selected): moved on to a GPU unread, it made a detour through the host (round_trip.py)."""
    if len(items) < 2:
        return None
    first = None
    for t in items:
        hit = self.arrived_objects.get(id(t))
        if hit is None or type(hit[1]) is not int or hit[0]() is not t:
            return None
        entry = self._arrivals.get(hit[1])
        if entry is None or hit[1] in self._read_arrivals or entry[1] in NOT_GPU or entry[0].version != version_of(t):
            return None
        if self.devices.device_of(t) != "cpu":
            return None
        first = hit[1] if first is None else first
    return first


def on_selected(self: Checker, out: Any, sid: int, gathered: bool = False) -> None:
    """`out` holds rows picked from the arrival `sid` (selected_arrival), or the copies gathered on the host
    with it (`gathered`, gathered_on_host): recorded as arrived with it (from where, at which line), so that
    moving it on unread is judged as moving that data on."""
    entry = self._arrivals.get(sid)
    if entry is None or not isinstance(out, self._tensor_type):
        return
    try:
        ref = StorageRef(out)
        out_sid = id(out.untyped_storage())
    except Exception:  # a tensor without storage
        return
    if out_sid == sid:
        return  # a view of the same storage (a basic slice): already the arrived data (note_view)
    ref.moved_at, ref.waited = entry[0].moved_at, entry[0].waited
    self._arrivals[out_sid] = (ref, entry[1], entry[2])
    if gathered:
        self._gathered_arrivals.add(out_sid)
    else:
        self._selected_arrivals.add(out_sid)
        if len(self._row_picked) < PURGE_AT:
            self._row_picked.add(sid)  # (MP011: a data set copied whole to index a batch from it, repeats.py)
    self.note_arrived(out, out_sid)
    self._read_arrivals.discard(out_sid)
