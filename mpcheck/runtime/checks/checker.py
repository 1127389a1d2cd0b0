"""The runtime checking core, shared by the debug mode (real GPUs) and the dry run (virtual GPUs).

One definition of each check: a device mismatch at a torch call or a module's
entry (MP001), a split model wrapped in DataParallel / DDP with device_ids
(MP002), a round trip (MP005), activations crossing devices at every layer
(MP006, see pingpong.py), a split model collapsed by `.cuda()`/`.to()`
(MP007), a loss fed across devices (MP008), a device that does not exist (MP009), a repeated transfer of unchanged data (MP011). The two faces differ only in the `Devices` object they pass in: where a tensor's device comes from,
how a tensor is moved, how a transfer is timed.

This module holds the Checker's state (its tables, built in __init__) and the context the hooks
keep; each check lives in a module of its own, as functions whose first argument is the Checker,
bound here as its methods (a class attribute holding a function is a method like one defined in
the class body: no extra call or lookup on the hot path):

    findings.py         emit: every finding, and on_mismatch
    op_check.py         MP001/MP008 at a torch call (the per-op fast path)
    module_entry.py     MP001/MP008 at a module call's inputs
    module_devices.py   where a module's parameters and buffers live
    mismatch.py         a mismatch reported where its bug is (placement.py's root causes), or moved;
                        tied.py names a tied weight's partner placed elsewhere; unmoved.py, the
                        tensors it reported, whose later mismatches are the same bug
    missing_device.py   MP009
    current_device.py   MP004; a root model's first call, where host_layers.py notes what it left on the CPU
    host_layers.py      MP031: compute layers left on the CPU beside the model's GPU parts, as they run
    host_made.py        MP001 at a factory that made a module's tensor on the CPU (no device=)
    split_model.py      MP002, MP003, MP007
    op_error.py         MP012
    stopped.py          MP001 for a program PyTorch stopped on mixed devices where no check looked
    transfer_events.py  a transfer: the ledger, then MP005, MP011, MP006
    round_trip.py       MP005
    repeats.py          MP011
    loss_move.py        MP014
    loss_values.py      what a loss returned: a mismatch with it is the loss's (MP008)
    arrivals.py         what arrived where, and whether it was read there
    passes.py           forward passes and where the run stands
    pingpong_report.py  MP006's findings (the chains: pingpong.py)
    reduced_after_move.py  MP016: data moved whole, then only reduced where it arrived
    model_round_trip.py MP005: a model moved to the host and back to the same GPUs, unused there
    per_item_moves.py   MP021: small tensors moved one by one, then gathered where they arrived
    purge.py            tables keyed by storage id, dropped with their storage

Do-no-harm rules for these modules: they never keep a tensor alive (only weak
references to storages, ids, versions), and every table kept is either
bounded by the number of distinct source lines or cleared at each step end.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from mpcheck.finding import Finding
from mpcheck.runtime.checks import (
    accumulated,
    arrivals,
    current_device,
    element_reads,
    expanded,
    findings,
    host_known,
    host_layers,
    host_list,
    host_made,
    loss_move,
    made_on_gpu,
    made_on_host,
    mismatch,
    missing_device,
    model_round_trip,
    module_devices,
    module_entry,
    module_moves,
    op_check,
    op_error,
    passes,
    per_item_moves,
    pingpong_report,
    purge,
    reduced_after_move,
    repeats,
    round_trip,
    split_model,
    stopped,
    transfer_events,
    weights_to_input,
    widened,
    worked_detour,
)
from mpcheck.runtime.checks.collapse import Collapses
from mpcheck.runtime.checks.findings import ON_MISMATCH
from mpcheck.runtime.checks.ledger import Ledger
from mpcheck.runtime.checks.loss_values import LossValues
from mpcheck.runtime.checks.pingpong import PingPong
from mpcheck.runtime.checks.placement import Placements
from mpcheck.runtime.checks.protocols import Devices, ModuleNames
from mpcheck.runtime.checks.provenance import Provenance
from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.recurrence import Mark
from mpcheck.runtime.checks.sites import Site, transfer_site, user_site
from mpcheck.runtime.checks.storage_ref import StorageRef
from mpcheck.runtime.checks.thread_state import Suspend, ThreadState
from mpcheck.runtime.checks.thresholds import repeat_min_bytes_from_env
from mpcheck.runtime.checks.unmoved import Unmoved

__all__ = ["Checker"]


def _never_dropped() -> bool:
    return True


class Checker:
    """One definition of each check, for both faces.

    `sites` gives the user's source line when a finding or transfer needs it
    (only then: walking frames costs microseconds). The module stack (which
    module's forward is running) is pushed by the module hooks, per thread.
    """

    def __init__(
        self,
        devices: Devices,
        *,
        on_mismatch: str = "raise",
        select: Iterable[str] | None = None,
        ledger: Ledger | None = None,
        sites: Callable[[], Site] = user_site,
        namer: ModuleNames | None = None,
        repeat_min_bytes: int | None = None,
    ) -> None:
        """namer: names modules in findings; without one, a module is named by its class.
        repeat_min_bytes: the smallest repeated transfer MP011 reports (None: REPEAT_MIN_BYTES, or
        MPCHECK_REPEAT_MIN_BYTES from the environment)."""
        if on_mismatch not in ON_MISMATCH:
            raise ValueError(f"on_mismatch must be one of {', '.join(ON_MISMATCH)}, not {on_mismatch!r}")
        import torch  # the runtime faces are the only place torch is imported

        self._tensor = torch.Tensor
        self._parameter = torch.nn.Parameter
        self._tensor_type = torch.Tensor
        # Results of one op on an arrived tensor, by storage: moved straight back, a detour (MP005,
        # worked_detour.py).
        self._worked: dict[int, worked_detour.Worked] = {}
        self._sums: dict[int, accumulated.Sum] = {}  # running sums of arrived addends (accumulated.py)
        # Tensors widened where they are (`x.float()` of bf16) or one-hot encoded, at the user's line, by id: moved next, they
        # cross at the wide size (MP016, widened.py).
        self._widened: dict[int, tuple[Any, str, int, Site]] = {}
        # The ids of its upsampled and unfolded entries (widened.py): a module call whose ops run unseen forgets
        # those among its inputs, and the module hooks test this small set, not the whole table, on every call.
        self._resampled: set[int] = set()
        # The lines that moved an upsampled, unfolded or broadcast-made tensor once (widened.py): a second is reported.
        self._enlarged_moves: set[Site] = set()
        # Compute layers root models left on the CPU beside parts on GPUs (MP031, host_layers.py): empty most runs.
        self.host_layers = host_layers.HostLayers()
        self._bool_dtype = torch.bool
        self._grad_enabled = torch.is_grad_enabled
        self._int64 = torch.int64
        self._module_type = torch.nn.Module
        # The code of each optimizer step the user wrote, run so far -> "Lion.step" (host_made.py).
        self.user_steps: dict[Any, str] = {}
        self._tf_depth = torch._C._len_torch_function_stack
        self._no_torch_function = torch._C.DisableTorchFunction
        self.devices = devices
        self.on_mismatch = on_mismatch
        self.select = frozenset(c.upper() for c in select) if select else None
        self.ledger = ledger if ledger is not None else Ledger()
        self.sites = sites
        # A transfer's line: out of the user's recursive moving helper (sites.transfer_site); sites given for a test
        # stand for both.
        self.transfer_sites = transfer_site if sites is user_site else sites
        self.namer = namer
        self.repeat_min_bytes = repeat_min_bytes_from_env() if repeat_min_bytes is None else repeat_min_bytes
        self.findings: list[Finding] = []
        # Findings emitted so far, repeats included: a module call that adds none ran clean (the
        # signature cache of capture/signatures.py skips the checks of calls like it).
        self.emitted = 0
        # Bumped whenever parameters may have moved (invalidate_placement): what was checked under
        # an older placement is checked again.
        self.placement_epoch = 0
        # Called, with no argument, by each invalidate_placement() (the signature cache empties the
        # table its fast path reads at once, so that the path need not compare epochs on every call).
        self.on_invalidate: list[Callable[[], None]] = []
        self._by_key: dict[tuple[str, str, int, tuple[str, ...]], int] = {}  # dedupe key -> index in findings
        self._lock = threading.RLock()
        self._tls = ThreadState()
        # Forward passes begun and ended so far in all threads (ThreadState counts each thread's own).
        self.model_runs = 0
        # Devices whose device_of reads only the tensor's own C++ device (CudaDevices): those
        # reads may skip the function modes. Outside a mode's own __torch_function__ (module
        # hooks, the strict dispatch mode) each `t.device` would otherwise go through the
        # checking mode, ~1.6 us a read instead of ~0.2.
        self.plain_devices = bool(getattr(devices, "plain_device_of", False))
        # id(storage) of a transfer's output -> (ref to that output's data, src device, site):
        # what arrived where, to recognise it going straight back (MP005).
        self._arrivals: dict[int, tuple[StorageRef, str, Site]] = {}
        # id(tensor) of each arrived tensor (and of its views) -> (weak ref to it, id(its storage)), until
        # an op reads it (arrivals.py); the storages read where they arrived: their move back is no round
        # trip (MP005: work was done there).
        self.arrived_objects: dict[int, tuple[weakref.ref[Any], Any]] = {}  # an int, or made_on_host.HostMade
        self._read_arrivals: set[int] = set()
        # Arrivals that are rows picked from an arrival never read where it landed (arrivals.on_selected): a batch
        # gathered from a dataset kept on a GPU that only hands its rows on
        self._selected_arrivals: set[int] = set()
        # Arrivals that are copies from GPUs gathered on the host unread (arrivals.gathered_on_host): the host
        # detour they go on to another GPU by is a gather's (round_trip.py's words)
        self._gathered_arrivals: set[int] = set()
        # Findings that say a copy was not needed where it arrived (MP005's GPU detour), by the storage of
        # that arrival: a later read of it there takes the finding back (arrivals._note_read)
        self._unless_read: dict[int, tuple[str, Any, tuple[str, ...]]] = {}
        # MP005 round trips reported once, by their line and way (path, line, src, dst): the same line moving
        # data made where it comes from takes one back (round_trip._needed_here); a membership test per transfer
        self._round_trips_once: dict[tuple[str, int, str, str], Any] = {}
        # MP019: how often each line moved a tensor made there on the host, by (path, line, device) (made_on_host.py)
        self._host_made_moves: dict[tuple[str, int, str], int] = {}
        self._gpu_made_reads: dict[tuple[str, int], int] = {}  # per line, MP020's made_on_gpu.py
        # MP020: single elements of GPU tensors read on the host this pass, and `torch.tensor(items)` of GPU
        # tensors by line (element_reads.py)
        self.element_reads = element_reads.ElementReads()
        self._tensor_of_tensors: dict[tuple[str, int], int] = {}
        # How many storages a device has made so far (Devices.allocations, where the face counts them: the
        # virtual GPUs), for MP005's offloads (round_trip.py).
        self._allocations: Callable[[str], int | None] | None = getattr(devices, "allocations", None)
        # The bytes each device holds now, where the face knows them (the virtual GPUs): an offload is one only
        # when it frees a share of its GPU's memory worth the two copies (round_trip.py).
        self._held_bytes: Callable[[], dict[str, int]] | None = (
            (lambda: getattr(devices, "allocated")) if hasattr(type(devices), "allocated") else None  # noqa: B009
        )
        # (id(storage), offset, shape, stride, dst) -> [ref, first site, last step, Mark, round]: what was
        # moved where, to recognise the same unchanged data moved again (MP011; recurrence.py).
        self._moves: dict[tuple[int, int, tuple[int, ...], tuple[int, ...], str], list[Any]] = {}
        # (path, line) -> the key of the last data that line moved (MP011: a line that moved other data since is
        # walking a data set, repeats.py)
        self._last_moved_at: dict[tuple[str, int], tuple[Any, ...]] = {}
        # The training loop's iterations (MP011's "every step", recurrence.py): a round ends when the first
        # optimizer that ever stepped steps, or one that already stepped in it steps again (two optimizers
        # stepping once each per iteration, a GAN's, make one round), or at an explicit session step.
        # `_round_stepped`: id() of the optimizers that stepped in this round.
        self.rounds = 0
        # id() and a weak reference of the first optimizer that stepped and is still alive (a resumed job builds
        # another); a weak reference only, so that no optimizer, and none of its tensors, is kept alive here.
        self._lead_optimizer: tuple[int, Callable[[], Any]] | None = None
        self._round_stepped: set[int] = set()
        # id(module) -> the one device of its own params/buffers, or None (none / several).
        self._placement: dict[int, tuple[weakref.ref[Any], str | None]] = {}
        # id(module) -> the devices of its params/buffers and its submodules': a container's
        # placement is its children's, each read once (not once per enclosing container).
        self._subtree_devices: dict[int, tuple[weakref.ref[Any], frozenset[str]]] = {}
        # Each distinct set of devices found there, kept once (bounded by the device sets a model has).
        self._device_sets: dict[frozenset[str], frozenset[str]] = {}
        # A device argument -> the missing CUDA index it names, or False (MP009; bounded by the
        # distinct device values a program uses).
        self._missing: dict[Any, int | bool] = {}
        self._purge_at = PURGE_AT
        # The chains of transfers of the current forward pass, for MP006.
        self._pingpong = PingPong()
        # Split models collapsed onto one device (MP007): the mismatches they cause are counted there.
        self._collapses = Collapses()
        # (file, function) of the metrics already reported (mismatch.py): one finding per metric function
        self._metrics_reported: set[tuple[str, str] | None] = set()
        # Tensors a reported mismatch found off their device: their later mismatches are that finding's.
        self.unmoved = Unmoved()
        # What losses returned (and, through autograd, what is computed from it): a mismatch with one is MP008.
        self.loss_values = LossValues(torch.Tensor)
        # The device a mixed call at a line was found to belong on (op_check.py), bounded by the lines
        # that mix devices: the call is repaired the same way each time it runs.
        self._needed_at: dict[Site, str] = {}
        # Tensors computed only from buffers and constants (MP011 on fresh copies of unchanging data),
        # and per (site, destination) how many such copies were made there.
        self.provenance = Provenance(torch.Tensor)
        self._provenance_forward = -1  # the forward pass (per thread count) of the last refresh
        self._const_copies: dict[tuple[Site, str], tuple[int, Mark, int]] = {}  # (copies, last mark, storage id)
        # Host parameters copied to a GPU in a forward: (id, device, site) -> the first step, -1 once reported.
        self._host_params: dict[tuple[int, str, Site], int] = {}
        # (id(module), site) -> how often that line moved the module to another device in a forward pass
        # (module_moves.py, MP011); few lines move modules in forward, and the table is bounded there.
        self._forward_module_moves: dict[tuple[int, Site], int] = {}
        # Where modules were built and placed, tensors made on the current device (placement.py).
        self.placements = Placements()
        # Parameters made by copy.deepcopy (capture/copying.py), by id, held weakly: a copy of a split model
        # moved whole is no collapse (split_model.on_module_move).
        self.copied_params: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        # Transfers the program's forward code made, in all and by (source, destination): was anything else moved
        # between two copies (per_item_moves.py)?
        self.transfers_made = 0
        self.uploads_made = 0  # of them, copies from the host to a device (new data: per_item_moves.py)
        self._transfers_by_way: dict[tuple[str, str], int] = {}
        # MP021: the slices of one tensor moved one by one (per_item_moves.on_slice_move).
        self.slice_moves = per_item_moves.SliceMoves()
        # MP005: the last `.tolist()` reads of GPU tensors, for a tensor made again from one (host_list.py).
        self.listed_reads = host_list.ListedReads()
        # MP020: copies from the host, and values computed from them alone, read back on the host (host_known.py).
        self.uploads = host_known.Uploads()
        # MP005: models moved to the host, until they are back or have run (model_round_trip.py).
        self._offloads: list[model_round_trip.Offload] = []
        # MP007: moves that left a model which ran split whole on one device (a part moved onto the rest's GPU,
        # the model moved to the host), until the model runs again (split_model.judge_pending_collapses).
        self._pending_collapses: list[split_model.PendingCollapse] = []
        # MP011's repeats made since the last optimizer step of a program that has trained, held until the next
        # step or the end of the run tells per-step waste from a copy made once after training
        # (repeats.judge_repeats_after_training).
        self._repeats_since_step: list[
            tuple[Site, dict[str, Any], bool, tuple[Any, ...], str, int | None, tuple[int, int] | None]
        ] = []
        # MP011 in a training loop (repeats.py): the last iteration that copied data from the host it had not
        # copied before (a loader's new batch), and the arrivals whose rows were picked by an index (a whole
        # data set copied to index a batch from it), cleared at each step's judgement.
        self._fresh_host_round = -1
        # (round, origins) of the drawn data first copied from the host in that round (repeats.py)
        self._fresh_drawn: tuple[int, set[int]] = (-1, set())
        self._row_picked: set[int] = set()
        self._repeated_lines: set[tuple[str, int]] = set()  # lines whose repeat was held at an earlier step
        # MP016: transfers whose output is watched until it is freed, to tell data only reduced where it arrived.
        self.reduce_watch = reduced_after_move.ReduceWatch()
        # id(root module) -> ref: roots whose first call has been checked for a collapsed split (MP004).
        self.roots_checked: dict[int, weakref.ref[Any]] = {}

    # -- context kept by the hooks --------------------------------------------------
    def wants(self, code: str) -> bool:
        return self.select is None or code in self.select

    @property
    def module_stack(self) -> list[str]:
        return self._tls.stack

    def current_module(self) -> str | None:
        stack = self._tls.stack
        return stack[-1] if stack else None

    @property
    def suspended(self) -> bool:
        """True while mpcheck itself (or Module.to) moves tensors: nothing is checked or recorded."""
        return self._tls.suspended > 0

    def suspend(self) -> Suspend:
        return Suspend(self._tls)

    def invalidate_placement(self) -> None:
        """Parameters moved (Module.to/_apply, param.data = ...): recompute module devices."""
        self._placement.clear()
        self._subtree_devices.clear()
        self.placement_epoch += 1  # signatures checked clean are stale; list the buffers again (provenance)
        for listener in self.on_invalidate:
            listener()

    def module_name(self, module: Any) -> str:
        namer = self.namer
        return namer(module) if namer else type(module).__name__

    # -- the checks, each in its module (see the module docstring) --------------------------
    emit = findings.emit
    withdraw = findings.withdraw

    check_device = missing_device.check_device
    _missing_index = missing_device._missing_index
    _gpu_count = missing_device._gpu_count
    _report_missing_device = missing_device._report_missing_device

    check_op = op_check.check_op
    _mixed_plain = op_check._mixed_plain
    _mixed = op_check._mixed
    _check_op_slow = op_check._check_op_slow
    _check_per_index = op_check._check_per_index

    check_module_entry = module_entry.check_module_entry
    _loss_weights_mismatch = module_entry._loss_weights_mismatch
    enter_module = module_entry.enter_module
    enter_root = module_entry.enter_root
    leave_module = module_entry.leave_module
    on_weight_move = weights_to_input.on_weight_move
    judge_weight_moves = weights_to_input.judge_weight_moves
    _entry_of = module_entry._entry_of
    _off_device = module_entry._off_device
    inputs_on = module_entry.inputs_on
    _all_on = module_entry._all_on

    module_device = module_devices.module_device
    _module_device = module_devices._module_device
    _devices_below = module_devices._devices_below
    gpus_below = module_devices.gpus_below
    model_devices = module_devices.model_devices

    _mismatch = mismatch._mismatch
    _root_cause = mismatch._root_cause
    _cause_for_input = mismatch._cause_for_input
    _outermost_unplaced = mismatch._outermost_unplaced

    on_op_error = op_error.on_op_error
    on_program_stopped = stopped.on_program_stopped
    _report_gradient_device = op_error._report_gradient_device
    _report_gpu_lengths = op_error._report_gpu_lengths

    on_current_device_tensor = current_device.on_current_device_tensor
    on_host_made_tensor = host_made.on_host_made_tensor
    note_host_made = made_on_host.note_host_made
    on_host_made_move = made_on_host.on_host_made_move
    note_gpu_made = made_on_gpu.note_gpu_made
    on_gpu_made_to_host = made_on_gpu.on_gpu_made_to_host
    on_host_read = element_reads.on_host_read
    on_scalar_read = element_reads.on_scalar_read
    on_scalar_fed = element_reads.on_scalar_fed
    on_tensor_of_tensors = element_reads.on_tensor_of_tensors
    _running_module = current_device._running_module
    on_module_built = current_device.on_module_built
    on_root_call = current_device.on_root_call
    note_host_layers = host_layers.note_root
    on_host_layer = host_layers.on_host_layer

    on_transfer = transfer_events.on_transfer
    count_transfer = transfer_events.count_transfer

    _check_round_trip = round_trip._check_round_trip
    _check_expanded = expanded._check_expanded
    watch_move = reduced_after_move.watch_move
    on_watched_read = reduced_after_move.on_watched_read
    on_watched_view = reduced_after_move.on_watched_view
    on_watched_export = reduced_after_move.on_watched_export
    on_unseen_reads = reduced_after_move.on_unseen_reads
    on_arrival_worked = worked_detour.on_arrival_worked
    carry_worked = worked_detour.carry_worked
    on_accumulated = accumulated.on_accumulated
    check_accumulated_move = accumulated.check_accumulated_move
    check_worked_detour = worked_detour.check_worked_detour
    on_widened = widened.on_widened
    on_encoded = widened.on_encoded
    on_upsampled = widened.on_upsampled
    on_broadcast = widened.on_broadcast
    forget_upsampled = widened.forget_upsampled
    check_widened_move = widened.check_widened_move
    carry_widened = widened.carry_widened
    judge_reduced_moves = reduced_after_move.judge_reduced_moves
    _report_host_hop = round_trip._report_host_hop

    _check_repeat = repeats._check_repeat
    _check_recomputed_move = repeats._check_recomputed_move
    _check_host_parameter = repeats._check_host_parameter
    _check_const_copy = repeats._check_const_copy
    judge_repeats_after_training = repeats.judge_repeats_after_training
    _refresh_provenance = repeats._refresh_provenance

    on_loss = loss_move.on_loss

    _arrival = arrivals._arrival
    note_reads = arrivals.note_reads

    def note_unseen_reads(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A call whose ops the function mode does not see took these arguments: what arrived (MP005) and what is
        watched (MP016) among them counts as used, and an upsampled tensor among them was read where it is."""
        if self.arrived_objects:
            self.note_reads(args, kwargs)
        if self.reduce_watch.carriers:
            self.on_unseen_reads(args, kwargs)
        if self._resampled:
            self.forget_upsampled(args, kwargs)

    _note_read = arrivals._note_read
    note_arrived = arrivals.note_arrived
    note_view = arrivals.note_view
    selected_arrival = arrivals.selected_arrival
    on_selected = arrivals.on_selected
    gathered_on_host = arrivals.gathered_on_host
    on_gather = per_item_moves.on_gather
    on_slice_move = per_item_moves.on_slice_move
    on_listed = host_list.on_listed
    on_upload = host_known.on_upload
    derive_upload = host_known.derive_upload
    on_known_read = host_known.on_known_read
    on_const_read = host_known.on_const_read
    on_tensor_from_list = host_list.on_tensor_from_list
    _purge = purge._purge

    end_top_pass = passes.end_top_pass
    on_top_call = passes.on_top_call
    _run_mark = passes._run_mark

    _holder = pingpong_report._holder
    _holds_on_device = pingpong_report._holds_on_device
    _report_ping_pong = pingpong_report._report_ping_pong
    _alternating_layers = pingpong_report._alternating_layers
    _grouped_layers = pingpong_report._grouped_layers

    on_wrap = split_model.on_wrap
    _stage_off_first_device_id = split_model._stage_off_first_device_id
    on_parallel_primitive = split_model.on_parallel_primitive
    _holds_replicas = split_model._holds_replicas
    on_module_move = split_model.on_module_move
    judge_pending_collapses = split_model.judge_pending_collapses
    _check_moved_in_forward = module_moves._check_moved_in_forward
    on_model_loaded = split_model.on_model_loaded
    on_state_assigned = split_model.on_state_assigned
    on_model_to_host = model_round_trip.on_model_to_host
    on_model_placed = model_round_trip.on_model_placed
    judge_model_round_trips = model_round_trip.judge_model_round_trips
    storages_made = model_round_trip.storages_made
    after_module_move = model_round_trip.after_module_move

    # -- steps --------------------------------------------------------------------------
    def _forget_moves_of(self, optimizer: Any) -> None:
        """An optimizer's step changes its parameters in place, which their version counters do not always
        show: a fused optimizer (`fused=True`) does not bump them (PyTorch's fused kernels on CUDA), and a
        copy made through `p.data` (an EMA teacher's `po.data.to(pt.device)`) reads an alias with a counter
        of its own. MP011 would take a parameter's next copy for the same unchanged data: its parameters'
        moves are forgotten at each step instead."""
        stepped = set()
        for group in optimizer.param_groups:
            for p in group["params"]:
                try:
                    stepped.add(id(p.untyped_storage()))
                except Exception:  # a parameter without storage: nothing was recorded of it
                    pass
        with self._lock:
            for key in [k for k in self._moves if k[0] in stepped]:
                del self._moves[key]

    def step_end(self, optimizer: Any = None) -> None:
        """A step ended: at `optimizer`'s step, or an explicit one (None)."""
        lead = self._lead_optimizer
        if optimizer is not None and (lead is None or lead[1]() is None):
            # The first optimizer to step leads; when it was dropped (the model and its optimizer built again for a
            # resumed run), the next one to step leads: else rounds would lag a step behind the new one's steps.
            try:
                alive: Callable[[], Any] = weakref.ref(optimizer)
            except TypeError:  # an optimizer-like object without weak references: taken as never dropped
                alive = _never_dropped
            self._lead_optimizer = lead = (id(optimizer), alive)
        if optimizer is None or (lead is not None and id(optimizer) == lead[0]) or id(optimizer) in self._round_stepped:
            # The first optimizer that ever stepped ends each iteration it steps in (where a round was ended only
            # when an optimizer stepped again, the first two iterations counted as one, and a data set of two
            # batches walked epoch after epoch looked moved at every step).
            self.rounds += 1
            self._round_stepped.clear()
        if optimizer is not None:
            self._round_stepped.add(id(optimizer))
            if self._moves:
                self._forget_moves_of(optimizer)
        self.ledger.step_end()
        with self._lock:
            for chain in self._pingpong.close():
                self._report_ping_pong(chain)
            # Entries live as long as their storage: the same unchanged data moved
            # again in a later step is a repeat too (a constant moved every step).
            self._purge()
            self.provenance.purge()
            self.unmoved.purge()
            self._refresh_provenance()
            self.judge_reduced_moves()
            self.judge_model_round_trips()
            self.judge_repeats_after_training(step_ended=True)

    def finish(self) -> None:
        with self._lock:
            for chain in self._pingpong.close():
                self._report_ping_pong(chain)
            if self.reduce_watch.carriers:
                # What the program still held is freed now, some of it only by the cycle collector (a script's
                # globals and the functions that point back at them): collected here, so that MP016's judgement
                # does not depend on when the collector last ran.
                gc.collect()
            self.judge_reduced_moves(at_end=True)
            self.judge_model_round_trips()
            self.judge_repeats_after_training(step_ended=False)
        self.ledger.finish()
