"""A transfer, as the capture layer reports it: recorded in the ledger, then checked for a round trip
(MP005, round_trip.py), a broadcast view moved whole (MP016, expanded.py), a repeat (MP011, repeats.py), its output recorded as an arrival
(arrivals.py), and its chain followed for per-layer ping-pong (MP006, pingpong.py).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.ledger import TransferTiming
from mpcheck.runtime.checks.pingpong import LEAF
from mpcheck.runtime.checks.sites import UNKNOWN, Site
from mpcheck.runtime.checks.storage_ref import StorageRef, version_of
from mpcheck.runtime.checks.thresholds import NOT_GPU
from mpcheck.runtime.checks.torchapi import sparse_parts

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def on_transfer(
    self: Checker,
    src_tensor: Any,
    out_tensor: Any,
    src_dev: str,
    dst_dev: str,
    *,
    site: Site | None,
    module_path: str | None,
    phase: str = "forward",
    timing: TransferTiming | None = None,
    nbytes: int | None = None,
    contiguous: bool | None = None,
    by_library: bool = False,
    non_blocking: bool = False,
) -> None:
    """Record a transfer; check it for a round trip (MP005), a repeat (MP011) and follow its
    chain (MP006) unless
    `by_library`: a copy made by PyTorch's own code, which the user cannot change (it
    is neither checked nor remembered, so no later user copy is blamed on it). `non_blocking`: asked for so."""
    if nbytes is None:
        nbytes = payload_bytes(src_tensor)
    if contiguous is None:
        # A sparse tensor has no strides (is_contiguous raises): its parts are copied whole.
        contiguous = src_tensor.is_contiguous() if src_tensor is not None and sparse_parts(src_tensor) is None else True
    self.ledger.record(
        src_dev,
        dst_dev,
        nbytes,
        site=site,
        module_path=module_path,
        phase=phase,
        contiguous=contiguous,
        timing=timing,
    )
    if phase == "recompute" and src_tensor is not None and nbytes >= self.repeat_min_bytes:
        with self._lock:
            self._check_recomputed_move(src_tensor, dst_dev, site, module_path)  # MP011
    if phase != "forward" or src_tensor is None or by_library:
        if phase == "backward":
            self.end_top_pass()
        return
    with self._lock:
        if self.arrived_objects:
            self.on_host_made_move(src_tensor, src_dev, dst_dev, site)  # MP019
        self._check_round_trip(src_tensor, src_dev, dst_dev, site, module_path, nbytes)
        if self._sums:
            self.check_accumulated_move(src_tensor, src_dev, dst_dev, site, module_path, nbytes)  # MP005
        home = bool(self._worked) and self.check_worked_detour(src_tensor, src_dev, dst_dev, site, module_path, nbytes)
        if self._widened and self.wants("MP016"):
            self.check_widened_move(src_tensor, src_dev, dst_dev, site, module_path, nbytes)
        self._check_expanded(src_tensor, src_dev, dst_dev, site, module_path, nbytes)
        if self.reduce_watch.carriers:  # a watched tensor moved on: its data was needed whole (MP016)
            self.on_watched_export(src_tensor)
        self.watch_move(src_tensor, out_tensor, src_dev, dst_dev, site, module_path, nbytes)
        if self._tls.entries and src_dev not in NOT_GPU and isinstance(src_tensor, self._parameter):
            self.on_weight_move(src_tensor, src_dev, dst_dev, site, nbytes)  # MP014: weights_to_input.py
        if (
            src_dev == "cpu"
            and self._tls.stack
            and isinstance(src_tensor, self._parameter)
            and src_tensor.requires_grad
        ):
            self._check_host_parameter(src_tensor, dst_dev, site, module_path)  # MP011, any size
        if nbytes >= self.repeat_min_bytes:  # a smaller copy costs about its launch: see REPEAT_MIN_BYTES
            try:
                arrival_sid = id(out_tensor.untyped_storage()) if out_tensor is not None else None
            except Exception:  # a tensor without storage
                arrival_sid = None
            # A copy from the host asked to be non-blocking streams data staged there on purpose (a batch built and
            # pinned by the data pipeline, covariates made with it): no constant made on the wrong device.
            streamed = non_blocking and src_dev == "cpu"
            if not self._check_repeat(src_tensor, dst_dev, site, module_path, arrival_sid) and not streamed:
                self._check_const_copy(src_tensor, src_dev, dst_dev, site, module_path, nbytes)
        if self._tls.forwards != self._provenance_forward:  # once per forward pass at most
            self._provenance_forward = self._tls.forwards
            self._refresh_provenance()
        arrival = None
        # A copy made inside a call the signature cache runs unchecked: what reads it there is not seen, so where it
        # went next (MP005's detours and round trips) would be judged on reads missed. Its checked runs judged it.
        if out_tensor is not None and not self._tls.transfer_unseen:
            try:
                arrival = StorageRef(out_tensor)
                arrival.moved_at = self.count_transfer(src_dev, dst_dev)
                arrival.waited = dst_dev == "cpu" and src_dev not in NOT_GPU and not non_blocking
                # The storage it was copied from: still there when the data goes back (worked_detour.py)?
                # (None for a worked detour's way back: the data come home, no first leg of another: worked_detour.py)
                arrival.origin = None if home else weakref.ref(src_tensor.untyped_storage())
                if self._allocations is not None:  # only a face that counts allocations tells an offload
                    arrival.made = self._allocations(src_dev)
                sid = id(out_tensor.untyped_storage())
                self._arrivals[sid] = (arrival, src_dev, site or UNKNOWN)
                self.note_arrived(out_tensor, sid)
                # (before the new copy's id leaves the read ones: a freed slice's id may come back for it)
                self.on_slice_move(src_tensor, out_tensor, src_dev, dst_dev, site, nbytes)  # MP021, slice by slice
                self._read_arrivals.discard(sid)
                # Arrived tensors never read (and their views) stay in arrived_objects: bounded here too.
                if len(self._arrivals) > self._purge_at or len(self.arrived_objects) > self._purge_at:
                    self._purge()
            except Exception:  # a tensor without storage (a subclass): nothing to follow
                pass
        elif out_tensor is not None:
            # The call's checked runs saw its copies read where they arrived; one slice moved at a time is still
            # seen slice by slice (a recurrent model fed one time step per call: MP021).
            try:
                self.on_slice_move(src_tensor, out_tensor, src_dev, dst_dev, site, nbytes, read_unseen=True)
            except Exception:  # a tensor without storage (a subclass): nothing to follow
                pass
        if self.wants("MP006"):
            # A forward pass: the outermost module call running now (counted per thread by the
            # hooks), or the step for transfers made outside any module.
            tls = self._tls
            thread = tls.serial
            if tls.top_pass_over and not tls.stack:
                tls.top_pass_over = False
                tls.top_passes += 1
            scope, key = (
                (("module", thread), tls.forwards)
                if tls.stack
                else (("top", thread), (self.ledger.step_index, tls.top_passes))
            )
            try:
                departure: StorageRef | None = StorageRef(src_tensor)
            except Exception:  # a tensor without storage (a subclass): nothing to follow
                departure = None
            with self._no_torch_function():  # grad_fn as autograd made it (pingpong: data dependence)
                sent = src_tensor.grad_fn
                if sent is None and self._grad_enabled():
                    sent = LEAF
                nodes = (sent, out_tensor.grad_fn if out_tensor is not None else None)
            held = self._holder(out_tensor) if sent is None else None  # no graph: what stayed, by other means
            for chain in self._pingpong.on_transfer(
                src_tensor,
                src_dev,
                dst_dev,
                scope,
                key,
                site or UNKNOWN,
                module_path,
                arrival,
                departure,
                nodes,
                held,
                tls.module_calls,
                _arrived_unchanged_at(self, src_tensor),
            ):
                self._report_ping_pong(chain)


def _arrived_unchanged_at(self: Checker, t: Any) -> int | None:
    """The transfer count (StorageRef.moved_at) at which `t`'s data arrived where it is, when it is that copy's
    storage, unchanged since; else None. Data that was there before a chain's last arrival is not computed from
    it (pingpong.py)."""
    try:
        storage = t.untyped_storage()
    except Exception:  # a tensor without storage
        return None
    record = self._arrivals.get(id(storage))
    if record is None or record[0].ref() is not storage or record[0].version != version_of(t):
        return None
    return record[0].moved_at[0]


def count_transfer(self: Checker, src_dev: str, dst_dev: str) -> tuple[int, int, int]:
    """Count a transfer of the program's forward code: (transfers so far, those between these two devices, those
    from the host to a device)."""
    self.transfers_made += 1
    way = (src_dev, dst_dev)
    n = self._transfers_by_way.get(way, 0) + 1
    self._transfers_by_way[way] = n  # bounded by the pairs of devices
    if src_dev == "cpu" and dst_dev != "cpu":
        self.uploads_made += 1
    return self.transfers_made, n, self.uploads_made


def payload_bytes(t: Any) -> int:
    """What a copy of `t` moves: its elements, or for a sparse tensor its values and indices (a sparse
    tensor's numel counts the zeros it does not store)."""
    parts = sparse_parts(t)
    if parts is None:
        return int(t.numel() * t.element_size())
    return int(sum(p.numel() * p.element_size() for p in parts))


def known_bytes(t: Any) -> int:
    """What a copy of `t` moves (payload_bytes); 0 for a size not known as a number (a symbolic one)."""
    try:
        return payload_bytes(t)
    except Exception:  # a symbolic size
        return 0
