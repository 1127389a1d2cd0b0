"""Identify a tensor's data without keeping it alive (the transfer checks' records: MP005, MP006,
MP011, MP012, MP014): a weak reference to its storage, the view's place in it and the version
counter, so that "the same unchanged data" is asked without holding a tensor.
"""

from __future__ import annotations

import weakref
from typing import Any


def version_of(t: Any) -> int | None:
    """`t`'s version counter, or None where it has none (inference tensors): such data is fresh each time."""
    try:
        version: int = t._version
        return version
    except RuntimeError:
        return None


class StorageRef:
    """Identify a tensor's data without keeping it alive: a weak reference to its
    storage (PyTorch keeps one Python storage object per storage), plus the
    view's offset/shape/stride and the version counter at the time. For an arrival: `read`, has an
    op read it (or a view of it) where it arrived since (Checker.note_reads)? `origin`, a weak reference
    to the storage it was copied from, and `made`, how many storages its source device had made by then
    (Devices.allocations; None where the face does not count them): was the original freed, and its
    memory used, before the data went back (round_trip.py)? `moved_at`, (how many transfers the run had made,
    how many of them between the same two devices, how many uploads from the host) with this one: were transfers
    of other ways, or new data from the host, made between two arrivals (per_item_moves.py)? `waited`, was it a
    blocking copy from a GPU to the host (the host waited for the GPU to reach it)?"""

    __slots__ = ("ref", "offset", "shape", "stride", "version", "read", "origin", "made", "moved_at", "waited")

    def __init__(self, t: Any) -> None:
        self.ref = weakref.ref(t.untyped_storage())
        self.offset = t.storage_offset()
        self.shape = tuple(t.shape)
        self.stride = t.stride()
        self.version = version_of(t)
        self.read = False
        self.origin: weakref.ref[Any] | None = None
        self.made: int | None = None
        self.moved_at: tuple[int, int, int] = (0, 0, 0)
        self.waited = False

    def alive(self) -> bool:
        """Is the storage still in use (by this tensor, a view of it or the tensor it was viewed from)?"""
        return self.ref() is not None

    def same_data(self, t: Any) -> bool:
        s = self.ref()
        return (
            s is not None
            and s is t.untyped_storage()
            and self.version is not None
            and self.version == version_of(t)
            and self.offset == t.storage_offset()
            and self.shape == tuple(t.shape)
            and self.stride == t.stride()
        )
