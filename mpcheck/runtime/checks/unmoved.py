"""Tensors a reported mismatch found off their device, and what is computed from them there: their
later mismatches are the same bug, reported once.

A tensor left unmoved (`eps = unet(x)` on cuda:1, used with `x` on cuda:0) is reported at its first
mismatch; a repaired call (on_mismatch="move", the dry run's) goes on with a moved copy, but the
tensor itself stays where it was. Its next use (`x0 = x - eps * s`, `x = a * x0 + b * eps`), a view
of it (`h[-1]`) and what ops make from it on its device (`counts = bincount(batch_vec)`) meet the
right device again, and each would be one more finding for the one missing move. The fix of the
first finding (move it where it is made) removes them all, so they are repaired quietly.

Records are keyed by storage (a view shares its base's), hold a weak reference and the two devices
(where the tensor is, where it was needed), and are purged with their storages. Ops derive records
only while some exist: a run without a mismatch pays nothing.
"""

from __future__ import annotations

import weakref
from typing import Any

from mpcheck.runtime.checks.purge import PURGE_AT


class Unmoved:
    def __init__(self) -> None:
        # id(storage) -> (weak ref to the storage, the device it is on, the device it was needed on, the
        # line of its finding)
        self.records: dict[int, tuple[weakref.ref[Any], str, str, Any]] = {}

    def note(self, t: Any, on: str, needed: str, site: Any) -> None:
        """`t`, on `on`, was reported at `site` where it was needed on `needed`."""
        try:
            storage = t.untyped_storage()
        except Exception:  # no storage (a sparse or nested tensor): nothing to follow
            return
        if len(self.records) >= PURGE_AT:
            self.purge()
        self.records[id(storage)] = (weakref.ref(storage), on, needed, site)

    def purge(self) -> None:
        """Drop the records of freed storages (at each step's end too: while any record is left, every op
        asks derive())."""
        records = self.records
        for k in [k for k, v in records.items() if v[0]() is None]:
            del records[k]

    def record(self, t: Any, on: str) -> tuple[Any, str, str, Any] | None:
        """The record of `t`, found on `on` (None: not a reported tensor there)."""
        try:
            storage = t.untyped_storage()
        except Exception:
            return None
        entry = self.records.get(id(storage))
        if entry is None or entry[0]() is not storage or entry[1] != on:
            return None
        return entry

    def consequence(self, expected: str, first: Any, odd: list[tuple[Any, Any, str]], site: Any) -> str | None:
        """Is this mismatch at `site` (the tensors `odd` off `expected`, the device of `first`) a later one
        of a tensor reported elsewhere? The device to repair the call to when it is: `expected` where every
        odd tensor is a reported one needed there, the odd tensors' device where the first tensor is a
        reported one needed there. At the reported line itself it is the finding seen again (counted)."""
        records = [self.record(t, d) for _, t, d in odd]
        if all(r is not None and r[2] == expected for r in records):
            return expected if any(r is not None and r[3] != site for r in records) else None
        off = {d for _, _, d in odd}
        if len(off) == 1 and first is not None:
            (d,) = off
            r = self.record(first, expected)
            if r is not None and r[2] == d and r[3] != site:
                return d
        return None

    def derive(self, args: tuple[Any, ...], out: Any, device_of: Any) -> None:
        """`out` was computed from `args`: where one of them is a reported tensor and `out` lands on its
        device, `out` is the same missing move. Asked only while records exist."""
        found = None
        for a in args:
            items = a if isinstance(a, (list, tuple)) else (a,)
            for x in items:
                if hasattr(x, "untyped_storage"):
                    found = self.record(x, device_of(x))
                    if found is not None:
                        break
            if found is not None:
                break
        if found is None:
            return
        _, on, needed, site = found
        outs = out if isinstance(out, (list, tuple)) else (out,)
        for o in outs:
            if hasattr(o, "untyped_storage") and device_of(o) == on:
                self.note(o, on, needed, site)
