"""Do no harm to memory: the checks' tables keyed by a storage's id (what arrived where, MP005/MP006/
MP012/MP014; what was moved where, MP011) keep an entry only while its storage lives. Dropped at each
step end and, for a run that never ends a step, whenever a table grows past PURGE_AT entries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.made_on_host import HostMade

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


# Table size at which entries of freed storages are dropped (then twice the live entries).
PURGE_AT = 4096


def _purge(self: Checker) -> None:
    """Drop entries whose storage is gone (a run that never ends a step must stay flat too)."""
    tables: tuple[dict[Any, Any], ...] = (self._moves, self._arrivals)
    for table in tables:
        for k in [k for k, v in table.items() if v[0].ref() is None]:
            del table[k]
    live = self._arrivals
    self.arrived_objects = {
        k: e
        for k, e in self.arrived_objects.items()
        if e[0]() is not None and (e[1] in live or isinstance(e[1], HostMade))  # (made_on_host.py, made_on_gpu.py)
    }
    self._read_arrivals &= live.keys()
    self._selected_arrivals &= live.keys()
    self._gathered_arrivals &= live.keys()
    self._purge_at = max(PURGE_AT, 2 * max(len(self._moves), len(live), len(self.arrived_objects)))
