"""The transfer ledger: every cross-device copy, folded into per-step and total aggregates.

Nothing here holds a tensor. A record keeps the devices, the byte count, the
call site, the module boundary, the phase and a timing handle; timings are
read lazily (a CUDA event pair is read only once the GPU has passed it), so
recording a transfer never synchronizes. Per-transfer records are folded into
aggregates at each step end, so memory stays flat however long the run is;
individual events are kept only for the Chrome trace, and then capped.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from mpcheck.runtime.checks.sites import Site

# Transfers below this size are latency-bound (about 21 us each on NVLink
# whatever the size up to ~0.5 MB, see notes/h200-transfers.md): the report
# groups them by call site rather than listing them per module boundary.
TINY_BYTES = 64 * 1024
MAX_TRACE_EVENTS = 200_000


class TransferTiming(Protocol):
    def stop(self) -> None: ...  # called right after the copy was enqueued
    def ready(self) -> bool: ...  # may elapsed_ms() be read without waiting?
    def elapsed_ms(self) -> float | None: ...  # None: not measurable


@dataclass
class Agg:
    count: int = 0
    bytes: int = 0
    time_ms: float = 0.0
    timed: int = 0  # how many of `count` had a measured time
    noncontiguous: int = 0
    noncontiguous_time_ms: float = 0.0

    def add(self, nbytes: int, ms: float | None, contiguous: bool) -> None:
        self.count += 1
        self.bytes += nbytes
        if ms is not None:
            self.time_ms += ms
            self.timed += 1
        if not contiguous:
            self.noncontiguous += 1
            if ms is not None:
                self.noncontiguous_time_ms += ms

    def as_dict(self) -> dict[str, Any]:
        gbps = (self.bytes / (self.time_ms * 1e6)) if self.time_ms > 0 and self.timed == self.count else None
        return {
            "count": self.count,
            "bytes": self.bytes,
            "time_ms": round(self.time_ms, 6) if self.timed else None,
            "gb_per_s": round(gbps, 6) if gbps is not None else None,
            "noncontiguous": self.noncontiguous,
            "noncontiguous_time_ms": round(self.noncontiguous_time_ms, 6) if self.noncontiguous else 0.0,
        }


# A record's aggregation key: (src, dst, site, module_path, phase).
Key = tuple[str, str, Site | None, str | None, str]


@dataclass
class _Pending:
    key: Key
    nbytes: int
    contiguous: bool
    timing: TransferTiming | None
    step: int
    host_ts: float


@dataclass
class StepSummary:
    index: int
    wall_ms: float
    by_pair: dict[tuple[str, str, str], Agg] = field(default_factory=dict)  # (src, dst, phase)

    def transfer_ms(self) -> float:
        return sum(a.time_ms for a in self.by_pair.values())

    def as_dict(self) -> dict[str, Any]:
        t = self.transfer_ms()
        return {
            "step": self.index,
            "wall_ms": round(self.wall_ms, 3),
            "transfer_ms": round(t, 6),
            "share": round(t / self.wall_ms, 6) if self.wall_ms > 0 else None,
            "pairs": [
                {"src": s, "dst": d, "phase": ph, **a.as_dict()} for (s, d, ph), a in sorted(self.by_pair.items())
            ],
        }


class Ledger:
    def __init__(self, *, keep_events: bool = False, max_steps_kept: int = 10_000) -> None:
        self._lock = threading.Lock()
        self.keep_events = keep_events
        self.max_steps_kept = max_steps_kept
        self.step_index = 0
        self._step_start = time.perf_counter()
        self.t0 = self._step_start
        self._current: list[_Pending] = []
        self._unresolved: list[_Pending] = []
        self.totals: dict[Key, Agg] = {}
        self.steps: list[StepSummary] = []
        self._open_steps: dict[int, StepSummary] = {}
        self.events: list[dict[str, Any]] = []  # Chrome-trace events (only with keep_events)
        self.step_marks: list[tuple[float, float, int]] = []  # (start_s, end_s, index) relative to t0
        self.memory: dict[
            str, dict[str, int]
        ] = {}  # device -> {"params", "grads", "optimizer_state", "peak_allocated"}

    # -- recording ----------------------------------------------------------
    def record(
        self,
        src: str,
        dst: str,
        nbytes: int,
        *,
        site: Site | None,
        module_path: str | None,
        phase: str,
        contiguous: bool,
        timing: TransferTiming | None,
    ) -> None:
        p = _Pending(
            (src, dst, site, module_path, phase), nbytes, contiguous, timing, self.step_index, time.perf_counter()
        )
        with self._lock:
            self._current.append(p)

    def step_end(self) -> StepSummary:
        """Close the current step: fold what is measurable now, keep the rest for later."""
        now = time.perf_counter()
        with self._lock:
            summary = StepSummary(self.step_index, (now - self._step_start) * 1e3)
            self._open_steps[self.step_index] = summary
            self.step_marks.append((self._step_start - self.t0, now - self.t0, self.step_index))
            if len(self.step_marks) > MAX_TRACE_EVENTS:
                del self.step_marks[: len(self.step_marks) - MAX_TRACE_EVENTS]
            self._unresolved.extend(self._current)
            self._current = []
            self.step_index += 1
            self._step_start = now
            self._fold(wait=False)
        return summary

    def finish(self) -> None:
        """At the end of the run: wait for every timing and fold the last partial step."""
        with self._lock:
            has_partial = bool(self._current)
        if has_partial:
            self.step_end()
        with self._lock:
            self._fold(wait=True)

    def _fold(self, *, wait: bool) -> None:
        keep: list[_Pending] = []
        for p in self._unresolved:
            t = p.timing
            if t is not None and not wait and not t.ready():
                keep.append(p)
                continue
            ms = t.elapsed_ms() if t is not None else None
            src, dst, site, module, phase = p.key
            self.totals.setdefault(p.key, Agg()).add(p.nbytes, ms, p.contiguous)
            step = self._open_steps.get(p.step)
            if step is not None:
                step.by_pair.setdefault((src, dst, phase), Agg()).add(p.nbytes, ms, p.contiguous)
            if self.keep_events and len(self.events) < MAX_TRACE_EVENTS:
                self.events.append(
                    {
                        "src": src,
                        "dst": dst,
                        "bytes": p.nbytes,
                        "ts_s": p.host_ts - self.t0,
                        "dur_ms": ms,
                        "site": str(site) if site else None,
                        "module": module,
                        "phase": phase,
                        "step": p.step,
                    }
                )
        self._unresolved = keep
        # A step is complete once none of its transfers awaits a timing.
        waiting = {p.step for p in keep}
        for idx in sorted(self._open_steps):
            if idx not in waiting:
                self.steps.append(self._open_steps.pop(idx))
        if len(self.steps) > self.max_steps_kept:
            del self.steps[: len(self.steps) - self.max_steps_kept]

    # -- views ----------------------------------------------------------------
    def by_pair(self) -> dict[tuple[str, str, str], Agg]:
        out: dict[tuple[str, str, str], Agg] = {}
        for (src, dst, _site, _mod, phase), a in self.totals.items():
            _merge(out.setdefault((src, dst, phase), Agg()), a)
        return out

    def by_site(self) -> dict[tuple[Site | None, str, str, str], Agg]:
        out: dict[tuple[Site | None, str, str, str], Agg] = {}
        for (src, dst, site, _mod, phase), a in self.totals.items():
            _merge(out.setdefault((site, src, dst, phase), Agg()), a)
        return out

    def by_module(self) -> dict[tuple[str | None, str, str, str], Agg]:
        out: dict[tuple[str | None, str, str, str], Agg] = {}
        for (src, dst, _site, mod, phase), a in self.totals.items():
            _merge(out.setdefault((mod, src, dst, phase), Agg()), a)
        return out

    def total(self) -> Agg:
        out = Agg()
        for a in self.totals.values():
            _merge(out, a)
        return out


def _merge(into: Agg, a: Agg) -> None:
    into.count += a.count
    into.bytes += a.bytes
    into.time_ms += a.time_ms
    into.timed += a.timed
    into.noncontiguous += a.noncontiguous
    into.noncontiguous_time_ms += a.noncontiguous_time_ms
