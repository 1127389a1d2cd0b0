"""The runtime checking core, shared by the debug mode (real GPUs) and the dry run (virtual GPUs).

One definition of each check: a device mismatch at a torch call or a module's
entry (MP001), a split model wrapped in DataParallel / DDP with device_ids
(MP002), a round trip (MP005), activations crossing devices at every layer
(MP006, see pingpong.py), a split model collapsed by `.cuda()`/`.to()`
(MP007), a loss fed across devices (MP008), a device that does not exist (MP009), a repeated transfer of unchanged data (MP011). The two faces differ only in the `Devices` object they pass in: where a tensor's device comes from,
how a tensor is moved, how a transfer is timed.

Do-no-harm rules for this module: it never keeps a tensor alive (only weak
references to storages, ids, versions), and every table it keeps is either
bounded by the number of distinct source lines or cleared at each step end.
"""

from __future__ import annotations

import inspect
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, Protocol

from mpcheck import codes
from mpcheck.finding import Finding
from mpcheck.runtime.checks.collapse import Collapses
from mpcheck.runtime.checks.ledger import Ledger, TransferTiming
from mpcheck.runtime.checks.pingpong import LEAF, Chain, Layers, PingPong, describe, find_shared
from mpcheck.runtime.checks.placement import (
    Cause,
    Made,
    Placements,
    contains,
    made_cause,
    module_cause,
    names_device_index,
)
from mpcheck.runtime.checks.provenance import Provenance
from mpcheck.runtime.checks.recurrence import Mark, recurs
from mpcheck.runtime.checks.sites import UNKNOWN, Site, user_frame, user_site
from mpcheck.runtime.checks.torchapi import (
    CPU_BATCH_SIZES_NAMES,
    CPU_INDEX_NAMES,
    PER_INDEX_PREFIXES,
    is_loss,
    is_loss_module,
)
from mpcheck.runtime.checks.wording import size_words, tensor_words

__all__ = [
    "Devices",
    "TransferTiming",
    "Checker",
    "DeviceMismatchError",
    "MpcheckRuntimeWarning",
    "RULE_NAMES",
    "ON_MISMATCH",
]

ON_MISMATCH = ("raise", "warn", "move")

# The codes this core reports, named and graded as mpcheck/codes.py says: a runtime finding
# prints exactly like a static one. The fatal ones mean the program is about to crash and follow
# `on_mismatch`; the others (wasted transfers, a collapsed split) are recorded and reported.
RULE_NAMES = {c.code: c.name for c in codes.on_face(codes.RUN)}
_FATAL = frozenset(c.code for c in codes.on_face(codes.RUN) if c.fatal)
# Codes reported once per line whatever the devices (emit): a mismatch there is one bug.
_ONE_PER_LINE = frozenset({"MP001", "MP004", "MP008"})
_PURGE_AT = 4096

# MP011 reports a repeated transfer of at least this many bytes. Below it a copy costs about its
# fixed launch cost whatever the link: on 2x H200 (NVLink; README "Transfer costs", measured with
# bench/transfer_costs.py) 21 us for 98 KB and 21.3 us for 524 KB, while at pageable host-to-device
# speed (7 GB/s, the slowest link measured) 64 KiB adds 9 us to a ~20 us launch. So a repeated copy
# of a small index, flag or scalar (a beam index moved to each layer's device, a fan-out of a tiny
# tensor) wastes one launch, the cost of one small kernel: not worth a warning. Above it the waste
# grows with the size. MPCHECK_REPEAT_MIN_BYTES (or Checker(repeat_min_bytes=...)) sets another
# threshold; 0 reports every repeat. See rules/MP011-repeated-transfer.md.
REPEAT_MIN_BYTES = codes.REPEAT_MIN_BYTES
REPEAT_MIN_BYTES_ENV = "MPCHECK_REPEAT_MIN_BYTES"


def repeat_min_bytes_from_env() -> int:
    """The MP011 threshold: MPCHECK_REPEAT_MIN_BYTES when set (a whole number of bytes), else REPEAT_MIN_BYTES."""
    raw = os.environ.get(REPEAT_MIN_BYTES_ENV, "").strip()
    if not raw:
        return REPEAT_MIN_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{REPEAT_MIN_BYTES_ENV} must be a whole number of bytes, not {raw!r}") from None
    if value < 0:
        raise ValueError(f"{REPEAT_MIN_BYTES_ENV} must be 0 or more, not {value}")
    return value


# The waste findings that compare two ways of moving data (a host detour, MP005; logits moved to the
# targets, MP014) stay silent below this size: both ways then cost about one copy's launch (~21 us on
# NVLink up to ~0.5 MB, notes in rules/MP005-round-trip-transfer.md), so the difference is noise.
WASTE_MIN_BYTES = codes.REPEAT_MIN_BYTES
_NOT_GPU = frozenset({"cpu", "meta"})

_MAX_MODULES = 8  # modules listed on one finding  # table size at which entries of freed storages are dropped

# A torch call's arguments, and where a tensor sits in them: (position or keyword, index in a
# list or tuple argument, or None).
Args = tuple[Any, ...]
Kwargs = dict[str, Any]
Where = tuple[int | str, int | None]


class Devices(Protocol):
    """Where devices come from. Real GPUs: real/devices.py's CudaDevices; virtual: virtual/devices.py's VirtualGPUs."""

    name: str  # "cuda" or "virtual"

    def device_of(self, t: Any) -> str:
        """ "cuda:1", "cpu", "meta" (for a real or a virtual device alike)."""

    def normalize(self, device_like: Any) -> str | None:
        """A user's device argument ('cuda', 1, torch.device('cuda', 1), 'cuda:1') as device_of
        would name it ('cuda' means the current device); None when it names no device."""

    def move(self, t: Any, device: str) -> Any:
        """Used by on_mismatch="move"."""

    def gpu_count(self) -> int:
        """How many CUDA devices exist (real: torch.cuda.device_count(); virtual: --gpus), for MP009.
        Optional: a Devices without it is never asked about device ordinals."""

    def start_transfer(self, src: str, dst: str, nbytes: int) -> TransferTiming | None:
        """Called just BEFORE the copy is enqueued; the returned timing's stop() is called
        right after. Real: CUDA events on the source device's current stream, read at step
        end. Virtual: time from the link model."""


class ModuleNames(Protocol):
    """Names modules in findings (capture's ModuleNamer): `model.blocks.7.attn`."""

    def __call__(self, module: Any) -> str:
        """The module's path from its root model, else its class name."""

    def roots(self) -> list[Any]:
        """The root models seen so far (searched for MP006's alternating layers)."""


class DeviceMismatchError(RuntimeError):
    """Raised (on_mismatch="raise") before PyTorch's own "Expected all tensors..." error."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(format_finding(finding))
        self.finding = finding


class MpcheckRuntimeWarning(RuntimeWarning):
    pass


def format_finding(f: Finding) -> str:
    where = f"{f.path}:{f.line}" if f.line else f.path
    text = f"{where}: {f.code} {f.message}"
    if f.modules:
        text += f" [module {', '.join(f.modules)}]"
    if f.suggestion:
        text += f"\n  fix: {f.suggestion}"
    return text


def _op_name(func: Any) -> str:
    try:
        from torch.overrides import resolve_name

        name = resolve_name(func)
    except Exception:  # pragma: no cover - resolve_name is best effort
        name = None
    return str(name or getattr(func, "__name__", repr(func)))


def _iter_tensors(args: Iterable[Any], kwargs: Kwargs, tensor_type: type) -> Iterator[tuple[Where, Any]]:
    """(location, tensor) for every tensor in args/kwargs, one level into lists and tuples."""
    for i, a in enumerate(args):
        if isinstance(a, tensor_type):
            yield (i, None), a
        elif isinstance(a, (list, tuple)):
            for j, b in enumerate(a):
                if isinstance(b, tensor_type):
                    yield (i, j), b
    for k, a in kwargs.items():
        if isinstance(a, tensor_type):
            yield (k, None), a
        elif isinstance(a, (list, tuple)):
            for j, b in enumerate(a):
                if isinstance(b, tensor_type):
                    yield (k, j), b


def _replace(args: Args, kwargs: Kwargs, moved: dict[Where, Any]) -> tuple[Args, Kwargs]:
    new_args = list(args)
    new_kwargs = dict(kwargs)
    for (where, inner), t in moved.items():
        if isinstance(where, str):
            new_kwargs[where] = _put(new_kwargs[where], inner, t)
        else:
            new_args[where] = _put(new_args[where], inner, t)
    return tuple(new_args), new_kwargs


def _put(old: Any, inner: int | None, t: Any) -> Any:
    """`t` in place of an argument (`inner` None), or of its item `inner` (a list or tuple argument)."""
    if inner is None:
        return t
    seq = list(old)
    seq[inner] = t
    return type(old)(seq) if isinstance(old, tuple) else seq


def _describe(where: Where) -> str:
    pos, inner = where
    name = f"argument {pos}" if isinstance(pos, int) else f"keyword argument {pos!r}"
    return name if inner is None else f"{name}[{inner}]"


def _version_of(t: Any) -> int | None:
    """`t`'s version counter, or None where it has none (inference tensors): such data is fresh each time."""
    try:
        version: int = t._version
        return version
    except RuntimeError:
        return None


class _StorageRef:
    """Identify a tensor's data without keeping it alive: a weak reference to its
    storage (PyTorch keeps one Python storage object per storage), plus the
    view's offset/shape/stride and the version counter at the time. For an arrival: `read`, has an
    op read it (or a view of it) where it arrived since (Checker.note_reads)?"""

    __slots__ = ("ref", "offset", "shape", "stride", "version", "read")

    def __init__(self, t: Any) -> None:
        self.ref = weakref.ref(t.untyped_storage())
        self.offset = t.storage_offset()
        self.shape = tuple(t.shape)
        self.stride = t.stride()
        self.version = _version_of(t)
        self.read = False

    def alive(self) -> bool:
        """Is the storage still in use (by this tensor, a view of it or the tensor it was viewed from)?"""
        return self.ref() is not None

    def same_data(self, t: Any) -> bool:
        s = self.ref()
        return (
            s is not None
            and s is t.untyped_storage()
            and self.version is not None
            and self.version == _version_of(t)
            and self.offset == t.storage_offset()
            and self.shape == tuple(t.shape)
            and self.stride == t.stride()
        )


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
        self._grad_enabled = torch.is_grad_enabled
        self._int64 = torch.int64
        self._module_type = torch.nn.Module
        self._tf_depth = torch._C._len_torch_function_stack
        self._no_torch_function = torch._C.DisableTorchFunction
        self.devices = devices
        self.on_mismatch = on_mismatch
        self.select = frozenset(c.upper() for c in select) if select else None
        self.ledger = ledger if ledger is not None else Ledger()
        self.sites = sites
        self.namer = namer
        self.repeat_min_bytes = repeat_min_bytes_from_env() if repeat_min_bytes is None else repeat_min_bytes
        self.findings: list[Finding] = []
        # Findings emitted so far, repeats included: a module call that adds none ran clean (the
        # signature cache of capture/signatures.py skips the checks of calls like it).
        self.emitted = 0
        # Bumped whenever parameters may have moved (invalidate_placement): what was checked under
        # an older placement is checked again.
        self.placement_epoch = 0
        self._by_key: dict[tuple[str, str, int, tuple[str, ...]], int] = {}  # dedupe key -> index in findings
        self._lock = threading.RLock()
        self._tls = _ThreadState()
        # Devices whose device_of reads only the tensor's own C++ device (CudaDevices): those
        # reads may skip the function modes. Outside a mode's own __torch_function__ (module
        # hooks, the strict dispatch mode) each `t.device` would otherwise go through the
        # checking mode, ~1.6 us a read instead of ~0.2.
        self.plain_devices = bool(getattr(devices, "plain_device_of", False))
        # id(storage) of a transfer's output -> (ref to that output's data, src device, site):
        # what arrived where, to recognise it going straight back (MP005).
        self._arrivals: dict[int, tuple[_StorageRef, str, Site]] = {}
        # id(tensor) of each arrived tensor (and of its views) -> id(its storage), until an op reads it;
        # the storages read where they arrived: their move back is no round trip (MP005: work was done there).
        self.arrived_objects: dict[int, int] = {}
        self._read_arrivals: set[int] = set()
        # (id(storage), offset, shape, stride, dst) -> [ref, first site, last step, Mark]: what was
        # moved where, to recognise the same unchanged data moved again (MP011; recurrence.py).
        self._moves: dict[tuple[int, int, tuple[int, ...], tuple[int, ...], str], list[Any]] = {}
        # id(module) -> the one device of its own params/buffers, or None (none / several).
        self._placement: dict[int, tuple[weakref.ref[Any], str | None]] = {}
        # id(module) -> the devices of its params/buffers and its submodules': a container's
        # placement is its children's, each read once (not once per enclosing container).
        self._subtree_devices: dict[int, tuple[weakref.ref[Any], frozenset[str]]] = {}
        # A device argument -> the missing CUDA index it names, or False (MP009; bounded by the
        # distinct device values a program uses).
        self._missing: dict[Any, int | bool] = {}
        self._purge_at = _PURGE_AT
        # The chains of transfers of the current forward pass, for MP006.
        self._pingpong = PingPong()
        # Split models collapsed onto one device (MP007): the mismatches they cause are counted there.
        self._collapses = Collapses()
        # Tensors computed only from buffers and constants (MP011 on fresh copies of unchanging data),
        # and per (site, destination) how many such copies were made there.
        self.provenance = Provenance(torch.Tensor)
        self._provenance_forward = -1  # the forward pass (per thread count) of the last refresh
        self._const_copies: dict[tuple[Site, str], tuple[int, Mark]] = {}
        # Where modules were built and placed, tensors made on the current device (placement.py).
        self.placements = Placements()
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

    def suspend(self) -> _Suspend:
        return _Suspend(self._tls)

    def invalidate_placement(self) -> None:
        """Parameters moved (Module.to/_apply, param.data = ...): recompute module devices."""
        self._placement.clear()
        self._subtree_devices.clear()
        self.placement_epoch += 1  # signatures checked clean are stale; list the buffers again (provenance)

    # -- findings -------------------------------------------------------------------
    def emit(
        self,
        code: str,
        site: Site | None,
        message: str,
        *,
        devices: Iterable[str] = (),
        modules: Iterable[str] = (),
        suggestion: str | None = None,
        severity: str | None = None,
        extra: dict[str, Any] | None = None,
        fatal: bool | None = None,
    ) -> Finding | None:
        """Record a finding (once per code, line, devices and modules; later hits count up)
        and apply `on_mismatch` to the fatal ones."""
        if not self.wants(code):
            return None
        site = site or UNKNOWN
        devices = tuple(devices)
        modules = tuple(m for m in modules if m)
        # One finding per code, line and devices: the same line reached from several modules
        # (a loop over blocks) lists the modules instead of repeating itself.
        # A mismatch is one bug per line however many device pairs meet there (a mask on cuda:0 used by
        # layers on cuda:1..3): its devices are listed, not repeated as findings.
        key = (code, site.path, site.line, () if code in _ONE_PER_LINE else devices)
        with self._lock:
            self.emitted += 1
            idx = self._by_key.get(key)
            if idx is not None:
                f = self.findings[idx]
                new_modules = tuple(m for m in modules if m not in f.modules)
                new_devices = tuple(d for d in devices if d not in f.devices)
                if new_modules and len(f.modules) < _MAX_MODULES:
                    f = replace(f, modules=f.modules + new_modules)
                if new_devices:
                    f = replace(f, devices=f.devices + new_devices)
                self.findings[idx] = f
                f.extra["count"] = f.extra.get("count", 1) + 1
                first = False
            else:
                extra = {"count": 1, "source": "runtime", **(extra or {})}
                if site.context:  # the user's line called into a library: name the library's line too
                    message = f"{message} (in {site.context})"
                    extra["library_site"] = site.context
                f = Finding(
                    code=code,
                    name=RULE_NAMES.get(code, code.lower()),
                    path=site.path,
                    line=site.line,
                    column=1,
                    message=message,
                    severity=severity or codes.get(code).severity,
                    devices=devices,
                    modules=modules,
                    suggestion=suggestion,
                    extra=extra,
                )
                self._by_key[key] = len(self.findings)
                self.findings.append(f)
                first = True
        if fatal is None:
            fatal = code in _FATAL
        if fatal and self.on_mismatch == "raise":
            raise DeviceMismatchError(f)
        if first and self.on_mismatch == "warn":
            warnings.warn(format_finding(f), MpcheckRuntimeWarning, stacklevel=2)
        return f

    # -- MP009: a device that does not exist ------------------------------------------------
    def check_device(self, device_like: Any) -> None:
        """A device argument (`.to('cuda:2')`, `device=torch.device('cuda', 2)`, `.cuda(2)`) naming a
        CUDA index the machine does not have: MP009 at the user's line, before CUDA's "invalid device
        ordinal". Only a device something is placed on is checked; a `torch.device` made and never
        used is no bug. Cached per device value: a placement costs one dict lookup."""
        try:
            missing = self._missing.get(device_like)
        except TypeError:  # unhashable: not a device
            return
        if missing is None:
            missing = self._missing[device_like] = self._missing_index(device_like)
        if missing is not False:
            self._report_missing_device(missing)

    def _missing_index(self, device_like: Any) -> int | bool:
        """The CUDA index `device_like` names when no such device exists, else False."""
        count = self._gpu_count()
        if not count:  # no CUDA at all (or a Devices that cannot say): PyTorch's own error is clear
            return False
        import torch

        if isinstance(device_like, bool):
            return False
        if isinstance(device_like, int):
            index = device_like  # `.to(2)`, `.cuda(2)`: a CUDA index
        elif isinstance(device_like, (str, torch.device)):
            try:
                dev = torch.device(device_like)
            except (RuntimeError, TypeError, ValueError):
                return False
            if dev.type != "cuda" or dev.index is None:
                return False
            index = dev.index
        else:
            return False
        return index if index >= count else False

    def _gpu_count(self) -> int:
        count = getattr(self.devices, "gpu_count", None)
        return count() if count is not None else 0

    def _report_missing_device(self, index: int) -> None:
        if not self.wants("MP009"):
            return
        n = self._gpu_count()
        have = f"{n} GPU{'s' if n > 1 else ''} (cuda:0..cuda:{n - 1})" if n > 1 else "1 GPU (cuda:0)"
        module = self.current_module()
        self.emit(
            "MP009",
            self.sites(),
            f"cuda:{index} does not exist: this run has {have}; CUDA fails here with 'invalid device ordinal'",
            devices=(f"cuda:{index}",),
            modules=(module,) if module else (),
            suggestion="take the device from the stage that will use the tensor (`next(stage.parameters()).device`) "
            "or from a list of the devices that exist, not from arithmetic on an index "
            "(`f'cuda:{k + 1}'`); check torch.cuda.device_count()",
        )

    # -- MP001: mismatches ----------------------------------------------------------------
    def check_op(
        self,
        func: Any,
        args: Args,
        kwargs: Kwargs,
        *,
        site: Site | None = None,
        module: str | None = None,
        name: str | None = None,
        phase: str | None = None,
    ) -> tuple[Args, Kwargs]:
        """The devices of one torch call's tensors. Allowed mixes: 0-dim CPU tensors; CPU
        indices and values in indexing. Returns the (possibly moved) args and kwargs."""
        if self.plain_devices:
            if self._tf_depth():
                with self._no_torch_function():
                    mixed = self._mixed_plain(args, kwargs)
            else:
                mixed = self._mixed_plain(args, kwargs)
        else:
            mixed = self._mixed(args, kwargs)
        if not mixed:
            return args, kwargs
        return self._check_op_slow(func, args, kwargs, site=site, module=module, name=name, phase=phase)

    def _mixed_plain(self, args: Args, kwargs: Kwargs) -> bool:
        """_mixed() for devices named after `t.device` alone: tensors whose torch.device objects
        are all equal have one device name; only when they differ are the names compared.
        The three loops repeat one test by intent: every torch call pays this, and folding them into
        one loop (a tuple per tensor argument) measured +40-70% per call on 2 tensor arguments."""
        tensor = self._tensor
        seen = None
        for a in args:
            if isinstance(a, tensor):
                d = a.device
                if seen is None:
                    seen = d
                elif d != seen:
                    return self._mixed(args, kwargs)
            elif isinstance(a, (list, tuple)) and a and isinstance(a[0], tensor):
                for b in a:
                    if isinstance(b, tensor):
                        d = b.device
                        if seen is None:
                            seen = d
                        elif d != seen:
                            return self._mixed(args, kwargs)
        if kwargs:
            for a in kwargs.values():
                if isinstance(a, tensor):
                    d = a.device
                    if seen is None:
                        seen = d
                    elif d != seen:
                        return self._mixed(args, kwargs)
                elif isinstance(a, (list, tuple)) and a and isinstance(a[0], tensor):
                    return True  # rare: let the full pass decide, as _mixed() does
        return False

    def _mixed(self, args: Args, kwargs: Kwargs) -> bool:
        """The fast path every torch call pays: are all non-scalar tensors on one device?"""
        device_of = self.devices.device_of
        tensor = self._tensor
        seen = None
        for a in args:
            if isinstance(a, tensor):
                d = device_of(a)
            elif isinstance(a, (list, tuple)) and a and isinstance(a[0], tensor):
                for b in a:
                    if isinstance(b, tensor):
                        d = device_of(b)
                        if d != seen and not (d == "cpu" and b.dim() == 0):
                            if seen is not None:
                                return True
                            seen = d
                continue
            else:
                continue
            if d != seen and not (d == "cpu" and a.dim() == 0):
                if seen is not None:
                    return True
                seen = d
        if kwargs:
            for a in kwargs.values():
                if isinstance(a, tensor):
                    d = device_of(a)
                    if d != seen and not (d == "cpu" and a.dim() == 0):
                        if seen is not None:
                            return True
                        seen = d
                elif isinstance(a, (list, tuple)) and a and isinstance(a[0], tensor):
                    return True  # rare: let the full pass decide
        return False

    def _check_op_slow(
        self,
        func: Any,
        args: Args,
        kwargs: Kwargs,
        *,
        site: Site | None,
        module: str | None,
        name: str | None,
        phase: str | None,
    ) -> tuple[Args, Kwargs]:
        if getattr(func, "__name__", "").startswith(PER_INDEX_PREFIXES):
            return self._check_per_index(func, args, kwargs, site=site, module=module, name=name, phase=phase)
        device_of = self.devices.device_of
        first_dev = None
        first = None
        odd: list[tuple[Where, Any, str]] = []
        cpu_index_ok = None
        for loc, t in _iter_tensors(args, kwargs, self._tensor):
            d = device_of(t)
            if d == first_dev:
                continue
            if d == "cpu" and t.dim() == 0:
                continue  # a 0-dim CPU tensor mixes with any device
            if first_dev is None:
                first_dev = d
                first = t
                continue
            if cpu_index_ok is None:
                cpu_index_ok = getattr(func, "__name__", "") in CPU_INDEX_NAMES
            if cpu_index_ok and d == "cpu":
                continue
            if d == "cpu" and loc == (1, None) and t.dtype == self._int64:
                if getattr(func, "__name__", "") in CPU_BATCH_SIZES_NAMES:
                    continue  # a packed sequence's batch sizes: on the CPU by PyTorch's rule
            odd.append((loc, t, d))
        loss = is_loss(getattr(func, "__name__", ""))
        if not odd or not self.wants("MP008" if loss else "MP001"):
            return args, kwargs
        what = name or _op_name(func)
        if phase == "backward":
            what += " (in backward)"
        assert first_dev is not None  # the odd tensors are those off the first device
        return self._mismatch(what, first_dev, odd, args, kwargs, site=site, module=module, loss=loss, first=first)

    def _check_per_index(
        self,
        func: Any,
        args: Args,
        kwargs: Kwargs,
        *,
        site: Site | None,
        module: str | None,
        name: str | None,
        phase: str | None,
    ) -> tuple[Args, Kwargs]:
        """A call that pairs its tensor lists index by index (torchapi.PER_INDEX_PREFIXES): each index's
        tensors, with the arguments that are single tensors, on one device (a 0-dim CPU tensor mixes)."""
        device_of = self.devices.device_of
        groups: dict[int | None, list[tuple[Where, Any]]] = {}
        for loc, t in _iter_tensors(args, kwargs, self._tensor):
            groups.setdefault(loc[1], []).append((loc, t))
        singles = groups.pop(None, [])
        what = name or _op_name(func)
        if phase == "backward":
            what += " (in backward)"
        for _, members in sorted(groups.items()):
            first_dev, first = None, None
            odd: list[tuple[Where, Any, str]] = []
            for loc, t in (*members, *singles):
                d = device_of(t)
                if d == first_dev or (d == "cpu" and t.dim() == 0):
                    continue
                if first_dev is None:
                    first_dev, first = d, t
                else:
                    odd.append((loc, t, d))
            if odd and first_dev is not None and self.wants("MP001"):
                args, kwargs = self._mismatch(
                    what, first_dev, odd, args, kwargs, site=site, module=module, loss=False, first=first
                )
        return args, kwargs

    def check_module_entry(
        self, module: Any, path: str, args: Args, kwargs: Kwargs, *, site: Site | None = None
    ) -> tuple[Args, Kwargs]:
        """Inputs vs the one device the module's parameters and buffers live on (when
        they live on one; a split container checks nothing: its children do). Sound only for
        a module whose forward uses its inputs unmoved (a torch.nn leaf without pre-hooks):
        any other module goes through enter_module()."""
        dev = self.module_device(module)
        if dev is None:
            return args, kwargs
        if self.inputs_on(dev, args, kwargs):
            return args, kwargs  # the common case: every input on the module's device
        odd = self._off_device(dev, args, kwargs)
        if is_loss_module(module):
            return self._loss_weights_mismatch(module, path, dev, odd, args, kwargs, site=site)
        if not odd or not self.wants("MP001"):
            return args, kwargs
        return self._mismatch(
            f"input of {type(module).__name__} '{path}'",
            dev,
            odd,
            args,
            kwargs,
            site=site,
            module=path,
            expected_is="the module's parameters and buffers are",
            module_obj=module,
        )

    def _loss_weights_mismatch(
        self,
        module: Any,
        path: str,
        dev: str,
        odd: list[tuple[Where, Any, str]],
        args: Args,
        kwargs: Kwargs,
        *,
        site: Site | None,
    ) -> tuple[Args, Kwargs]:
        """A loss module (nn.CrossEntropyLoss(weight=w)) whose class weights sit on `dev` and whose
        inputs do not: MP008. The weights are small and the predictions large: move the criterion."""
        if not odd or not self.wants("MP008"):
            return args, kwargs
        preds = next((t for _, t in _iter_tensors(args, kwargs, self._tensor)), None)
        target = self.devices.device_of(preds) if preds is not None else odd[0][2]
        loc, t, d = odd[0]
        self.emit(
            "MP008",
            site or self.sites(),
            f"input of {type(module).__name__} '{path}': {_describe(loc)} ({tensor_words(t)}) is on {d}, "
            f"the loss's weights are on {dev}",
            devices=(dev, d),
            modules=(path,),
            suggestion=f"move the loss module (its weights) to the predictions' device with `.to('{target}')`, "
            "and the targets with it",
        )
        if self.on_mismatch == "move":
            try:
                with self.suspend():
                    moved = {loc: self.devices.move(t, dev) for loc, t, _ in odd}
                return _replace(args, kwargs, moved)
            except Exception:  # e.g. out of a meta tensor: leave it, PyTorch decides
                pass
        return args, kwargs

    def enter_module(self, module: Any, path: str, dev: str, args: Args, kwargs: Kwargs) -> bool:
        """A module that may move or ignore its inputs (a user module, a module with pre-hooks)
        is called with inputs off its device `dev`: nothing is reported yet. Its forward may move
        them (`blk(h.to(blk.weight.device))`), a pre-hook may (accelerate), or it may never use
        one (T5's mask when a position bias is given). Only when one of these very tensors
        reaches a torch call unmoved and mismatched is it reported, at this call's line (see
        _entry_of). Returns True when an entry was pushed: the caller pops it with leave_module()."""
        odd = self._off_device(dev, args, kwargs)
        if not odd:
            return False
        site = self.sites()
        self._tls.entries.append(
            _Entry(
                f"input of {type(module).__name__} '{path}'",
                path,
                dev,
                site,
                {id(t): (t, loc) for loc, t, _ in odd},
                module,
            )
        )
        return True

    def enter_root(self, module: Any, path: str, args: Args, kwargs: Kwargs) -> bool:
        """The outermost call of a model spread over several devices (or of none): no device to compare its
        inputs with yet. Its tensor inputs are noted; one that reaches a module or torch call on another
        device unmoved is reported at this call's line (the caller did not move it, as the linter says),
        naming the use. A model whose forward moves its inputs never reaches that."""
        # Only an input on none of the model's devices (CPU data for a GPU model): one already on a
        # device of the model is the forward's to carry between stages (`h.to(dev)` but not `t`), and
        # is reported inside it, where the hop is missing.
        self.module_device(module)  # one walk places the model and remembers the devices under each module
        entry = self._subtree_devices.get(id(module))
        devs = entry[1] if entry is not None and entry[0]() is module else frozenset(self.model_devices(module))
        device_of = self.devices.device_of
        tensors = {id(t): (t, loc) for loc, t in _iter_tensors(args, kwargs, self._tensor) if device_of(t) not in devs}
        if not tensors:
            return False
        self._tls.entries.append(
            _Entry(f"input of {type(module).__name__} '{path}'", path, None, self.sites(), tensors, module)
        )
        return True

    def leave_module(self) -> None:
        self._tls.entries.pop()

    def _entry_of(self, t: Any, expected: str) -> tuple[_Entry, Where] | None:
        """The outermost module call that received `t` itself, unmoved, while living on
        `expected`: the line where the transfer is missing. (entry, t's place in that call)."""
        key = id(t)
        for entry in self._tls.entries:
            hit = entry.tensors.get(key)
            if hit is not None and hit[0] is t and entry.device in (expected, None):
                return entry, hit[1]
        return None

    def _off_device(self, dev: str, args: Args, kwargs: Kwargs) -> list[tuple[Where, Any, str]]:
        device_of = self.devices.device_of
        odd = []
        for loc, t in _iter_tensors(args, kwargs, self._tensor):
            d = device_of(t)
            if d != dev and not (d == "cpu" and t.dim() == 0):
                odd.append((loc, t, d))
        return odd

    def inputs_on(self, dev: str, args: Args, kwargs: Kwargs) -> bool:
        """Are all tensor arguments on `dev`? (The fast path of the module-entry check.)"""
        if self.plain_devices and self._tf_depth():
            with self._no_torch_function():
                return self._all_on(dev, args, kwargs)
        return self._all_on(dev, args, kwargs)

    def _all_on(self, dev: str, args: Args, kwargs: Kwargs) -> bool:
        device_of = self.devices.device_of
        tensor = self._tensor
        for a in args:
            if isinstance(a, tensor) and device_of(a) != dev:
                return False
        if kwargs:
            for a in kwargs.values():
                if isinstance(a, tensor) and device_of(a) != dev:
                    return False
        return True

    def module_device(self, module: Any) -> str | None:
        entry = self._placement.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        if self.plain_devices and self._tf_depth():
            with self._no_torch_function():
                return self._module_device(module)
        return self._module_device(module)

    def _module_device(self, module: Any) -> str | None:
        self._devices_below(module)  # places `module` and every module under it
        entry = self._placement.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        self._subtree_devices.pop(id(module), None)  # remembered without its placement: walk again
        self._devices_below(module)
        return self._placement[id(module)][1]

    def _devices_below(self, module: Any) -> frozenset[str]:
        """The devices of `module`'s parameters and buffers and of all its submodules' (the devices
        of `module.parameters()` and `module.buffers()`), remembered per module until placements
        change. The walk places each module it passes too (`_placement`: the one device of its own
        weights, or a container's children's if they agree): the first step asks the placement of
        every module, root model first, and each would otherwise walk its own subtree again."""
        memo = self._subtree_devices
        key = id(module)
        entry = memo.get(key)
        if entry is not None and entry[0]() is module:
            return entry[1]
        ref = weakref.ref(module)
        memo[key] = (ref, frozenset())  # a module that holds itself: no endless walk
        device_of = self.devices.device_of
        own = {device_of(p) for p in module._parameters.values() if p is not None}
        for b in module._buffers.values():
            if b is not None:
                own.add(device_of(b))
        below = set(own)
        for child in module._modules.values():
            if child is not None:
                below |= self._devices_below(child)
        found = frozenset(below)
        memo[key] = (ref, found)
        devs = own or found
        self._placement[key] = (ref, next(iter(devs)) if len(devs) == 1 else None)
        return found

    def model_devices(self, module: Any) -> list[str]:
        devs = {self.devices.device_of(p) for p in module.parameters()}
        devs |= {self.devices.device_of(b) for b in module.buffers()}
        return sorted(devs)

    def _mismatch(
        self,
        what: str,
        expected: str,
        odd: list[tuple[Where, Any, str]],
        args: Args,
        kwargs: Kwargs,
        *,
        site: Site | None,
        module: str | None,
        expected_is: str = "the other tensors are",
        loss: bool = False,
        first: Any = None,
        module_obj: Any = None,
    ) -> tuple[Args, Kwargs]:
        """Report each tensor of `odd` off `expected` (the device of `first`, the call's first tensor);
        loss: the call is a loss (predictions and targets); module_obj: the module whose input this is
        (a module-entry check). Where the root cause lies before this call (placement.py), it is reported there."""
        site = site or self.sites()
        module = module or self.current_module()
        moved = {}
        for loc, t, d in odd:
            # A tensor that reached this call unmoved from a module's input, off that module's device:
            # blame the module call. Either the odd tensor (`self.lin(h) + mask`) or the first one
            # (`mask + self.lin(h)`: the mask is the one off the module's device).
            blamed = None
            if self._tls.entries:
                entry = self._entry_of(t, expected)
                if entry is not None:
                    blamed = (entry, t, d, expected)
                elif first is not None:
                    entry = self._entry_of(first, d)
                    if entry is not None:
                        blamed = (entry, first, expected, d)
            if blamed is not None:
                (e, e_loc), bt, bt_dev, module_dev = blamed
                msg = f"{e.what}: {_describe(e_loc)} ({tensor_words(bt)}) is on {bt_dev}, "
                modules: tuple[str, ...] = (e.path,)
                if e.device is None:  # a model over several devices: name where the input is first needed
                    msg += f"and is used unmoved at {site} ({what}), which needs {module_dev}"
                    if module and module != e.path:
                        modules += (module,)
                else:
                    msg += f"the module's parameters and buffers are on {module_dev}"
                where, target, off = e.site, module_dev, bt_dev
            else:
                msg = f"{what}: {_describe(loc)} ({tensor_words(t)}) is on {d}, {expected_is} on {expected}"
                modules = (module,) if module else ()
                where, target, off = site, expected, d
            cause = self._root_cause(t, d, expected, first, blamed, module_obj, module, site, what)
            if cause is not None:
                self.emit(
                    cause.code,
                    cause.site,
                    cause.message,
                    devices=cause.devices,
                    modules=cause.modules,
                    suggestion=cause.suggestion,
                    extra={"use_site": str(site)},
                    fatal=True,
                )
            else:
                code = "MP001"
                if loss and blamed is None:  # the targets follow the predictions; no module should move for a loss
                    code = "MP008"
                    which = "the targets" if loc[0] in (1, "target") else _describe(loc)
                    sugg = f"move {which} to the predictions' device with `.to('{target}')` before the loss"
                else:
                    sugg = (
                        f"move it with `.to('{target}')` before this call (or place the producing module on {target})"
                    )
                # A module's input off its (collapsed) device: the collapse's, counted on its MP007.
                module_input = blamed is not None or module_obj is not None
                if not (
                    code == "MP001"
                    and module_input
                    and self._collapses.explains(e.path if blamed else module, target, off, where, self.module_name)
                ):
                    self.emit(code, where, msg, devices=(target, off), modules=modules, suggestion=sugg)
            if self.on_mismatch == "move":
                try:
                    with self.suspend():
                        moved[loc] = self.devices.move(t, expected)
                except Exception:  # e.g. out of a meta tensor: leave it, PyTorch decides
                    pass
        if moved:
            return _replace(args, kwargs, moved)
        return args, kwargs

    # -- root causes before the failing call: placement.py -----------------------------------
    def _root_cause(
        self,
        t: Any,
        d: str,
        expected: str,
        first: Any,
        blamed: Any,
        module_obj: Any,
        module: str | None,
        site: Site,
        what: str,
    ) -> Cause | None:
        """The line behind a mismatch of `t` (on `d`, the call wants `expected`): a tensor made on the
        current device inside a stage on another GPU, or the module's own placement (shared, placed on the
        current device, never placed). None: the mismatch is reported where it happens."""
        placements = self.placements
        if blamed is not None:  # a module's input that reached a torch call unmoved
            (entry, _), bt, bt_dev, module_dev = blamed
            if entry.device is None:  # a spread model's input: only a tensor made on the current device says more
                made = placements.made_of(bt)
                return made_cause(made, site, what) if made is not None and made.device == bt_dev else None
            return self._cause_for_input(bt, bt_dev, entry.module, entry.path, module_dev, entry.site, what)
        if module_obj is not None:
            return self._cause_for_input(t, d, module_obj, module or "", expected, site, what)
        made = placements.made_of(t)
        if made is not None and made.device == d and made.module_device == expected:
            return made_cause(made, site, what)
        if first is not None:
            made = placements.made_of(first)
            if made is not None and made.device == expected and made.module_device == d:
                return made_cause(made, site, what)
        return None

    def _cause_for_input(
        self, t: Any, t_dev: str, module: Any, path: str, module_dev: str, use: Site, what: str
    ) -> Cause | None:
        made = self.placements.made_of(t)
        if made is not None and made.device == t_dev and made.module_device == module_dev:
            return made_cause(made, use, what)
        if not (self.wants("MP001") or self.wants("MP004") or self.wants("MP007")):
            return None
        return module_cause(
            self.placements,
            module,
            path,
            module_dev,
            t_dev,
            use,
            name=self.module_name,
            outermost_unplaced=self._outermost_unplaced,
        )

    def _outermost_unplaced(self, module: Any) -> Any:
        """The outermost module containing `module` (in a known root model) whose weights all sit on the CPU."""
        namer = self.namer
        if namer is None:
            return module
        for root in namer.roots():
            if not contains(root, module):
                continue
            chain = [root]
            for name, sub in root.named_modules():
                if sub is module:
                    parts = name.split(".") if name else []
                    chain = [root] + [root.get_submodule(".".join(parts[: i + 1])) for i in range(len(parts))]
                    break
            for m in chain:
                if set(self.model_devices(m)) <= {"cpu"}:
                    return m
        return module

    # -- MP012: PyTorch's own error, explained ---------------------------------------------------
    def on_op_error(self, func: Any, args: Args, kwargs: Kwargs, error: RuntimeError) -> Any:
        """PyTorch refused a call. `.view()` of a tensor that arrived by a transfer, refused for its strides:
        the copy kept the strides of a permuted (transposed, sliced) tensor, and the fix is `.contiguous()`
        before the copy (MP012, at the transfer). With on_mismatch="move" the view is taken of a contiguous
        copy and the program goes on; otherwise PyTorch's error follows (after mpcheck's with "raise")."""
        if (
            not self._tls.suspended
            and getattr(func, "__name__", "") == "view"
            and args
            and isinstance(args[0], self._tensor)
            and "view size is not compatible" in str(error)
            and self.wants("MP012")
        ):
            hop = self._arrival(args[0])
            if hop is not None:
                src, hop_site = hop
                t = args[0]
                dst = self.devices.device_of(t)
                module = self.current_module()
                self.emit(
                    "MP012",
                    hop_site,
                    f"this transfer {src} -> {dst} copies a non-contiguous tensor ({tensor_words(t)}, strides "
                    f"{tuple(t.stride())}) and the copy keeps its strides; `.view()` of it at {self.sites()} fails "
                    "with 'view size is not compatible with input tensor's size and stride'",
                    devices=(src, dst),
                    modules=(module,) if module else (),
                    suggestion="make it contiguous before the copy (`x.permute(...).contiguous().to(...)`): the copy "
                    "is then one dense block, and the view works; or use `.reshape()` after it",
                    extra={"view_site": str(self.sites())},
                    fatal=True,
                )
                if self.on_mismatch == "move":
                    return func(t.contiguous(), *args[1:], **kwargs)
        raise error

    def _arrival(self, t: Any) -> tuple[str, Site] | None:
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

    # -- MP004: the current device -------------------------------------------------------------
    def on_current_device_tensor(self, t: Any, how: str) -> None:
        """`t` was just made on the current device (a bare `.cuda()`, `device='cuda'`, a factory under
        set_default_device('cuda')). Made in a method of a module that lives on another GPU, it is
        remembered, and reported at this line if it meets that module's tensors unmoved."""
        if not isinstance(t, self._tensor) or not self.wants("MP004"):
            return
        frame = user_frame(2)
        owner = frame.f_locals.get("self") if frame is not None else None
        if not isinstance(owner, self._module_type):
            owner = self._running_module()  # a helper function called from a module's forward
            if owner is None:
                return
        module_dev = self.module_device(owner)
        if module_dev is None:
            # A module without weights of its own (a rotary table's holder, shared by stages): the stage
            # that runs it, the nearest module around it that has a device, is where its tensors must be.
            for path in reversed(self._tls.stack):
                around = self._running_module(path)
                module_dev = self.module_device(around) if around is not None else None
                if module_dev is not None:
                    owner = around
                    break
        dev = self.devices.device_of(t)
        if module_dev is None or module_dev == dev or not module_dev.startswith("cuda") or not dev.startswith("cuda"):
            return
        self.placements.made(t, Made(self.sites(), how, dev, self.module_name(owner), module_dev))

    def _running_module(self, path: str | None = None) -> Any:
        """The module whose forward runs now (innermost; or the one at `path` of the module stack), found
        from its path in a known root model."""
        path, namer = path or self.current_module(), self.namer
        if path is None or namer is None:
            return None
        for root in namer.roots():
            name = namer(root)
            if path == name:
                return root
            if path.startswith(name + "."):
                try:
                    module: Any = root.get_submodule(path[len(name) + 1 :])
                except AttributeError:  # a path through a module found by its parent (`net.<Linear>`)
                    return None
                return module
        return None

    def on_module_built(self, module: Any, site: Site) -> None:
        self.placements.built(module, site)

    def on_root_call(self, root: Any) -> None:
        """A root model's first call: were its stages, meant for several GPUs, all put on one by set_device?
        An index-less `.cuda()` made while set_device pointed at cuda:k (k > 0), and another stage placed on
        cuda:k by name: the split collapsed silently (MP004, a waste: it runs, on one GPU)."""
        self.roots_checked[id(root)] = weakref.ref(root)
        if len(self.roots_checked) > _PURGE_AT:
            for k in [k for k, r in self.roots_checked.items() if r() is None]:  # in place: the hooks hold it
                del self.roots_checked[k]
        if not self.wants("MP004") or self._gpu_count() < 2:
            return
        if self.plain_devices and self._tf_depth():
            with self._no_torch_function():
                below = self._devices_below(root)
        else:
            below = self._devices_below(root)
        devs = [d for d in below if d != "cpu"]
        if len(devs) != 1 or devs[0] == "cuda:0" or _distributed():
            return
        dev = devs[0]
        implicit, explicit = None, None
        for mover, mv in self.placements.moves_inside(root):
            if mv.target != dev:
                continue
            if mv.implicit and mv.current == dev:
                implicit = implicit or (mover, mv)
            elif not mv.implicit and names_device_index(mv.site):
                # The index written out (`.to("cuda:1")`): this stage was meant for that GPU, and the other
                # for the one `.cuda()` meant. A device taken from a variable (`.to(device)`, the GPU this
                # process uses) says nothing of the kind.
                explicit = explicit or (mover, mv)
        if implicit is None or explicit is None:
            return
        (i_mod, i_mv), (e_mod, e_mv) = implicit, explicit
        self.emit(
            "MP004",
            i_mv.site,
            f"this index-less placement puts '{self.module_name(i_mod)}' on the current device {dev} (set by "
            f"torch.cuda.set_device or `with torch.cuda.device`), the GPU that '{self.module_name(e_mod)}' is "
            f"placed on by name at {e_mv.site}: every stage of '{self.module_name(root)}' sits on {dev} and the "
            "other GPUs stay unused (the split collapsed)",
            devices=(dev,),
            modules=(self.module_name(root),),
            suggestion="name the GPU this stage is meant for (`.cuda(0)` / `.to('cuda:0')`) instead of the current "
            "device",
        )

    # -- transfers: ledger, MP005, MP006, MP011 ---------------------------------------------
    def on_transfer(
        self,
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
    ) -> None:
        """Record a transfer; check it for a round trip (MP005), a repeat (MP011) and follow its
        chain (MP006) unless
        `by_library`: a copy made by PyTorch's own code, which the user cannot change (it
        is neither checked nor remembered, so no later user copy is blamed on it)."""
        if nbytes is None:
            nbytes = src_tensor.numel() * src_tensor.element_size()
        if contiguous is None:
            contiguous = src_tensor.is_contiguous() if src_tensor is not None else True
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
        if phase != "forward" or src_tensor is None or by_library:
            if phase == "backward":
                self.end_top_pass()
            return
        with self._lock:
            self._check_round_trip(src_tensor, src_dev, dst_dev, site, module_path, nbytes)
            if nbytes >= self.repeat_min_bytes:  # a smaller copy costs about its launch: see REPEAT_MIN_BYTES
                if not self._check_repeat(src_tensor, dst_dev, site, module_path):
                    self._check_const_copy(src_tensor, src_dev, dst_dev, site, module_path)
            if self._tls.forwards != self._provenance_forward:  # once per forward pass at most
                self._provenance_forward = self._tls.forwards
                self._refresh_provenance()
            arrival = None
            if out_tensor is not None:
                try:
                    arrival = _StorageRef(out_tensor)
                    sid = id(out_tensor.untyped_storage())
                    self._arrivals[sid] = (arrival, src_dev, site or UNKNOWN)
                    self.arrived_objects[id(out_tensor)] = sid
                    self._read_arrivals.discard(sid)
                    # Arrived tensors never read (and their views) stay in arrived_objects: bounded here too.
                    if len(self._arrivals) > self._purge_at or len(self.arrived_objects) > self._purge_at:
                        self._purge()
                except Exception:  # a tensor without storage (a subclass): nothing to follow
                    pass
            if self.wants("MP006"):
                # A forward pass: the outermost module call running now (counted per thread by the
                # hooks), or the step for transfers made outside any module.
                tls = self._tls
                thread = threading.get_ident()
                if tls.top_pass_over and not tls.stack:
                    tls.top_pass_over = False
                    tls.top_passes += 1
                scope, key = (
                    (("module", thread), tls.forwards)
                    if tls.stack
                    else (("top", thread), (self.ledger.step_index, tls.top_passes))
                )
                try:
                    departure: _StorageRef | None = _StorageRef(src_tensor)
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
                ):
                    self._report_ping_pong(chain)

    def _holder(self, arrived: Any) -> Callable[[str], bool]:
        """held() for PingPong.on_transfer: does the user's code making the current transfer hold a tensor
        on a device in its local variables, other than the copy arriving (MP006 without a graph: the tokens
        that stayed on that device while an expert ran elsewhere)?"""
        return lambda dev: self._holds_on_device(dev, arrived)

    def _holds_on_device(self, dev: str, arrived: Any) -> bool:
        frame = user_frame(3)
        if frame is None:
            return False
        try:
            local = frame.f_locals
            values = list(local.values())
        except Exception:  # a frame whose locals cannot be read: nothing known to stay
            return False
        if isinstance(local, dict) and frame.f_code.co_flags & inspect.CO_OPTIMIZED:
            # Python < 3.13 caches this snapshot on a function's frame, holding its tensors until the
            # frame ends: drop it (locals() and tracers rebuild it first), so memory and the liveness
            # Chain.stayed asks of later transfers stay the program's. (Module and class bodies: the
            # namespace itself, left alone; 3.13's f_locals is a view, not a dict.)
            local.clear()
        for v in values:
            if isinstance(v, self._tensor) and not isinstance(v, self._parameter) and v is not arrived:
                try:
                    if self.devices.device_of(v) == dev:
                        return True
                except Exception:  # a tensor without a device the checks know
                    continue
        return False

    def end_top_pass(self) -> None:
        """A loss ran, or a backward: the forward pass of code outside any module (a training loop's
        own transfers, chained per step for MP006) is over; the next transfer starts a new chain.
        Without it, a loop with no optimizer step reads as one chain over all its passes."""
        tls = self._tls
        tls.top_pass_over = True
        tls.passes_ended += 1
        tls.top_calls.clear()

    def on_top_call(self, module: Any) -> None:
        """An outermost module call. A module the current pass already called starts the next pass
        (a generation loop with no loss or step: the new token goes back to the first stage, a way
        back that is the loop's, not a layer's ping-pong)."""
        calls = self._tls.top_calls
        if id(module) in calls:
            self.end_top_pass()
        calls.add(id(module))

    def _run_mark(self) -> Mark:
        """Where the program's run stands for MP011 (recurrence.py)."""
        tls = self._tls
        return (threading.get_ident(), tls.forwards, tls.passes_ended, self.ledger.step_index, bool(tls.stack))

    def _report_ping_pong(self, chain: Chain) -> None:
        site = chain.back_site
        devices = tuple(chain.distinct)
        if ("MP006", site.path, site.line, devices) in self._by_key:  # seen in an earlier pass: count it
            self.emit("MP006", site, "", devices=devices)
            return
        message, modules, suggestion = describe(chain, self._alternating_layers, self._grouped_layers)
        self.emit(
            "MP006",
            site,
            message,
            devices=devices,
            modules=modules,
            suggestion=suggestion,
            extra={"crossings": chain.crossings, "first_site": str(chain.first_site)},
        )

    def _alternating_layers(self, chain: Chain) -> tuple[str, list[tuple[str, str]]] | None:
        """The module whose children, in order, alternate between the chain's devices the most:
        (its path, [(child name, device)]). Searched in the known root models, preferring modules
        above or below those that made the transfers; once per new finding."""
        namer = self.namer
        if namer is None:
            return None
        wanted = set(chain.devs)
        # (related to the modules that moved the data, changes, path, children)
        found: list[tuple[bool, int, str, list[tuple[str, str]]]] = []
        for root in namer.roots():
            root_path = namer(root)
            for sub_name, sub in root.named_modules():
                placed = [(n, self.module_device(c)) for n, c in sub.named_children()]
                children = [(n, d) for n, d in placed if d is not None and d in wanted]
                changes = sum(1 for a, b in zip(children, children[1:]) if a[1] != b[1])
                if changes >= 2:
                    path = f"{root_path}.{sub_name}" if sub_name else root_path
                    related = any(
                        m == path or m.startswith(path + ".") or path.startswith(m + ".") for m in chain.modules
                    )
                    found.append((related, changes, path, children))
        if not found:
            return None
        _, _, path, children = max(found, key=lambda f: (f[0], f[1]))
        return path, children

    def _grouped_layers(self, chain: Chain) -> tuple[Layers, list[str]] | None:
        """MP006 with no alternating layers: layers grouped one block per device and a module they share
        on the chain's first device (pingpong.find_shared), searched in the known root models."""
        namer = self.namer
        if namer is None:
            return None
        return find_shared(chain, [(namer(r), r) for r in namer.roots()], self.devices.device_of)

    def _check_round_trip(
        self, t: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None, nbytes: int = 0
    ) -> None:
        try:
            storage = t.untyped_storage()
        except Exception:
            return
        entry = self._arrivals.get(id(storage))
        if entry is None:
            return
        ref, came_from, first_site = entry
        if ref.ref() is not storage:
            del self._arrivals[id(storage)]  # the id was reused by another storage
            return
        if ref.version is None or _version_of(t) != ref.version:
            return
        if id(storage) in self._read_arrivals and came_from == dst_dev:
            return  # read where it arrived (a mask the layers there used): the first move was needed
        if came_from != dst_dev:
            if src_dev == "cpu" and came_from not in _NOT_GPU and dst_dev not in _NOT_GPU:
                self._report_host_hop(t, came_from, dst_dev, site, module, first_site, nbytes)
            return
        self.emit(
            "MP005",
            site,
            f"round trip: this data was moved {dst_dev} -> {src_dev} at {first_site} and is moved back to "
            f"{dst_dev} here unchanged (no work was done on {src_dev})",
            devices=(dst_dev, src_dev),
            modules=(module,) if module else (),
            suggestion=f"keep using the tensor that is still on {dst_dev}; drop both transfers",
            extra={"first_site": str(first_site), "first_line": first_site.line, "first_path": first_site.path},
        )

    def _report_host_hop(
        self, t: Any, gpu: str, dst_dev: str, site: Site | None, module: str | None, first_site: Site, nbytes: int
    ) -> None:
        """GPU -> host -> GPU with no work on the host: one direct device-to-device copy does the same.
        Below WASTE_MIN_BYTES both copies cost about their launch: silent."""
        if nbytes < max(self.repeat_min_bytes, WASTE_MIN_BYTES):
            return
        self.emit(
            "MP005",
            site,
            f"host detour: this data ({tensor_words(t)}, {size_words(nbytes)}) was copied {gpu} -> cpu at "
            f"{first_site} and goes on to {dst_dev} here unchanged: two copies over the host link where one "
            f"{gpu} -> {dst_dev} copy would do",
            devices=(gpu, "cpu", dst_dev),
            modules=(module,) if module else (),
            suggestion=f"move the tensor that is still on {gpu} straight to {dst_dev} with `.to('{dst_dev}')`; "
            "drop the copy to the host",
            extra={"first_site": str(first_site), "first_line": first_site.line, "first_path": first_site.path},
        )

    def _check_repeat(self, t: Any, dst_dev: str, site: Site | None, module: str | None) -> bool:
        """MP011 on the same unchanged data moved again; True when reported."""
        try:
            storage = t.untyped_storage()
        except Exception:
            return False
        key = (id(storage), t.storage_offset(), tuple(t.shape), t.stride(), dst_dev)
        entry = self._moves.get(key)
        step = self.ledger.step_index
        mark = self._run_mark()
        in_library = site is not None and site.context is not None
        if (
            entry is not None
            and entry[0].ref() is storage
            and entry[0].version is not None
            and entry[0].version == _version_of(t)
            and recurs(entry[3], mark, in_library=in_library, in_graph=t.requires_grad and self._grad_enabled())
        ):
            first_site, first_step = entry[1], entry[2]
            entry[2], entry[3] = step, mark
            when = "in this step" if first_step == step else "in an earlier step, and it has not changed since"
            self.emit(
                "MP011",
                site,
                f"repeated transfer: the same unchanged data ({tensor_words(t)}) was already moved to {dst_dev} "
                f"{when} (at {first_site})",
                devices=(self.devices.device_of(t), dst_dev),
                modules=(module,) if module else (),
                suggestion=f"move it to {dst_dev} once and reuse the copy (e.g. keep it as a buffer on {dst_dev})",
                extra={"first_site": str(first_site), "scope": "step" if first_step == step else "steps"},
            )
            return True
        self._moves[key] = [_StorageRef(t), site or UNKNOWN, step, mark]
        if len(self._moves) > self._purge_at:
            self._purge()
        return False

    def _check_const_copy(self, t: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None) -> None:
        """MP011 on a fresh tensor computed only from buffers and constants (provenance.py), moved at
        the same line a second time. Its sources never change, so it can be made on the destination
        from sources kept there (or is the same bytes each time, when the Python numbers that shaped it
        are the same); the copy is the waste, whatever the bytes. Only at the user's own line
        (a library's code, which the user cannot change, is left alone)."""
        if site is None or site.context or not self.provenance.is_const(t):
            return
        key = (site, dst_dev)
        mark = self._run_mark()
        seen, last = self._const_copies.get(key, (0, mark))
        seen += 1
        if len(self._const_copies) < _PURGE_AT or key in self._const_copies:
            self._const_copies[key] = (seen, mark)
        if seen < 2 or not recurs(last, mark, in_library=False):  # setup, not the model's work (recurrence.py)
            return
        self.emit(
            "MP011",
            site,
            f"repeated transfer: on every call this line makes a fresh tensor ({tensor_words(t)}) computed only "
            f"from buffers and constants, which never change, on {src_dev} and copies it to {dst_dev}",
            devices=(src_dev, dst_dev),
            modules=(module,) if module else (),
            suggestion=f"make it on {dst_dev}: keep its buffer there (move the buffer once, or register the "
            f"result as a buffer on {dst_dev}), or create the constant there with `device='{dst_dev}'`",
            extra={"scope": "provenance"},
        )

    def _refresh_provenance(self) -> None:
        """List the root models' buffers for provenance when the roots or their placement changed."""
        namer = self.namer
        if namer is not None:
            self.provenance.refresh(namer.roots(), self.placement_epoch)

    # -- MP014 (waste): logits moved to the targets' device ---------------------------------
    def on_loss(self, args: Args, kwargs: Kwargs) -> None:
        """A torch.nn.functional loss is called: were its predictions moved here from another GPU,
        unchanged since, only to meet targets (and weights) far smaller than themselves? Moving the
        targets the other way copies fewer bytes, in forward and again in backward."""
        if not self._tls.stack:
            self.end_top_pass()
        if self._tls.suspended or not self.wants("MP014"):
            return
        tensors = [t for _, t in _iter_tensors(args, kwargs, self._tensor)]
        if len(tensors) < 2:
            return
        preds, rest = tensors[0], tensors[1:]
        nbytes = preds.numel() * preds.element_size()
        if nbytes < max(self.repeat_min_bytes, WASTE_MIN_BYTES):
            return
        small = sum(t.numel() * t.element_size() for t in rest)
        if small * 4 > nbytes:  # the targets are not much smaller: either way costs about the same
            return
        try:
            storage = preds.untyped_storage()
        except Exception:
            return
        with self._lock:
            entry = self._arrivals.get(id(storage))
        if entry is None:
            return
        ref, came_from, move_site = entry
        here = self.devices.device_of(preds)
        if ref.ref() is not storage or ref.version is None or ref.version != _version_of(preds):
            return
        if came_from in _NOT_GPU or here in _NOT_GPU or came_from == here:
            return
        if any(self.devices.device_of(t) != here for t in rest):
            return  # a mismatch: check_op reports it
        loss_site = self.sites()
        module = self.current_module()
        others = "the targets" if len(rest) == 1 else "the targets and weights"
        backward = (
            ", and as much again in backward (the predictions' gradient crosses back)" if preds.requires_grad else ""
        )
        self.emit(
            "MP014",
            move_site,
            f"the predictions ({tensor_words(preds)}, {size_words(nbytes)}) are moved {came_from} -> {here} here "
            f"only to meet {others} ({size_words(small)}) at the loss at {loss_site}: moving {others} to "
            f"{came_from} instead copies {size_words(nbytes - small)} less per forward{backward}",
            devices=(came_from, here),
            modules=(module,) if module else (),
            suggestion=f"compute the loss on {came_from}: keep the predictions there (drop this move) and move "
            f"{others} with `.to('{came_from}')`",
            fatal=False,
            extra={"loss_site": str(loss_site), "bytes_saved": nbytes - small},
        )

    def note_reads(self, args: Args, kwargs: Kwargs) -> None:
        """An op reads these arguments: an arrived tensor among them was used on the device it arrived on."""
        objects = self.arrived_objects
        for a in (*args, *kwargs.values()) if kwargs else args:
            sid = objects.pop(id(a), None)
            if sid is not None:
                self._note_read(sid)
            elif type(a) in (list, tuple):  # torch.cat([a, b])
                for b in a:
                    sid = objects.pop(id(b), None)
                    if sid is not None:
                        self._note_read(sid)

    def _note_read(self, sid: int) -> None:
        self._read_arrivals.add(sid)
        entry = self._arrivals.get(sid)
        if entry is not None:  # on the arrival's own record too, which MP006's chain keeps past the storage
            entry[0].read = True

    def note_view(self, base: Any, view: Any) -> None:
        """`view` shares an arrived tensor's storage: reading it reads the arrived data."""
        sid = self.arrived_objects.get(id(base))
        if sid is not None:
            self.arrived_objects[id(view)] = sid

    def _purge(self) -> None:
        """Drop entries whose storage is gone (a run that never ends a step must stay flat too)."""
        tables: tuple[dict[Any, Any], ...] = (self._moves, self._arrivals)
        for table in tables:
            for k in [k for k, v in table.items() if v[0].ref() is None]:
                del table[k]
        live = self._arrivals
        self.arrived_objects = {k: sid for k, sid in self.arrived_objects.items() if sid in live}
        self._read_arrivals &= live.keys()
        self._purge_at = max(_PURGE_AT, 2 * max(len(self._moves), len(live), len(self.arrived_objects)))

    # -- MP002 / MP007: wrapping and collapsing a split model ------------------------------
    def on_wrap(
        self, kind: str, module: Any, *, device_ids: Any, output_device: Any, site: Site | None
    ) -> Finding | None:
        """Before DataParallel(...) / DistributedDataParallel(...) wraps `module`. Returns the
        finding when the wrap would fail (or, with move, the caller skips the wrap)."""
        devs = [d for d in self.model_devices(module) if d != "cpu"]
        if len(devs) == 1 and kind == "DataParallel":
            return self._stage_off_first_device_id(module, devs[0], device_ids, site)
        if len(devs) < 2:
            return None
        if kind == "DataParallel":
            why = "DataParallel replicates a single-device module and refuses parameters on several devices"
            sugg = (
                "do not wrap a model split by hand in DataParallel; for data parallelism on top of it use "
                "DistributedDataParallel(model, device_ids=None, output_device=None), one process per split"
            )
        elif device_ids is not None or output_device is not None:
            why = (
                "DistributedDataParallel accepts a multi-device module only with device_ids=None and output_device=None"
            )
            sugg = "pass device_ids=None and output_device=None (or leave them out)"
        else:
            return None
        return self.emit(
            "MP002",
            site or self.sites(),
            f"{kind} wraps a model split over {', '.join(devs)}: {why}",
            devices=tuple(devs),
            modules=(self.module_name(module),),
            suggestion=sugg,
        )

    def _stage_off_first_device_id(self, module: Any, dev: str, device_ids: Any, site: Site | None) -> Finding | None:
        """DataParallel(stage on cuda:1) with device_ids whose first entry is another GPU (by default every
        GPU, so cuda:0): DataParallel keeps the module on device_ids[0] and its forward fails with
        "module must have its parameters and buffers on device cuda:0 (device_ids[0])"."""
        first: str | None
        if device_ids is None:
            count = self._gpu_count()
            if not count:
                return None
            first = "cuda:0"  # DataParallel's default: every visible GPU, from cuda:0
        else:
            try:
                ids = list(device_ids)
                first = self.devices.normalize(ids[0]) if ids else None
            except Exception:  # an id that names no device: PyTorch's own error follows
                return None
            if first is None or len(ids) == 1:
                return None  # one device id: DataParallel moves the module there itself
        if first == dev:
            return None
        given = "the default device_ids (every GPU)" if device_ids is None else f"device_ids={list(device_ids)!r}"
        return self.emit(
            "MP002",
            site or self.sites(),
            f"DataParallel wraps a module that lives on {dev} with {given}: DataParallel keeps the module "
            f"on device_ids[0] ({first}) and its forward fails with 'module must have its parameters and "
            f"buffers on device {first} (device_ids[0])'",
            devices=(dev, first),
            modules=(self.module_name(module),),
            suggestion=f"pass device_ids starting with {dev} (e.g. device_ids=[{dev.split(':')[-1]}, ...]); "
            "if this is one stage of a split model, do not wrap it in DataParallel",
        )

    def on_parallel_primitive(self, name: str, module: Any, *, inside: bool, site: Site | None) -> Finding | None:
        """Before DataParallel's internals (torch.nn.parallel.replicate / data_parallel called on `module`,
        or scatter / gather called inside the forward of `module`, inside=True) run on a model split
        over several devices: MP003. A single-device module, or a call outside any split module's
        method (a hand-written data-parallel loop), is what these functions are for: silent."""
        devs = [d for d in self.model_devices(module) if d != "cpu"]
        if len(devs) < 2 or (inside and self._holds_replicas(module)):
            return None
        split = f"a model split over {', '.join(devs)}"
        if inside:
            what = f"torch.nn.parallel.{name} inside the forward of {split}"
            why = (
                "scatter cuts one batch into pieces for replicas and gather concatenates the replicas' pieces; "
                "the stages of a split model each need the whole batch in turn"
            )
        else:
            what = f"torch.nn.parallel.{name} on {split}"
            why = "it copies a single-device module onto each GPU and requires every parameter on device_ids[0]"
        return self.emit(
            "MP003",
            site or self.sites(),
            f"{what}: {why}",
            devices=tuple(devs),
            modules=(self.module_name(module),),
            suggestion="move the activations between the stages with `.to('cuda:k')`; for data parallelism "
            "over a split model use DistributedDataParallel(model, device_ids=None), one process per replica",
            # replicate / data_parallel on a split model raise in PyTorch right after; a scatter or gather
            # inside a split forward runs (on the wrong data): recorded, the program goes on.
            fatal=not inside,
        )

    def _holds_replicas(self, module: Any) -> bool:
        """Do `module`'s weights look like one copy per device (the same shapes on each)? Then it is a
        hand-written data-parallel wrapper, and scatter / gather in its forward is what they are for."""
        shapes: dict[str, list[tuple[int, ...]]] = {}
        for t in (*module.parameters(), *module.buffers()):
            shapes.setdefault(self.devices.device_of(t), []).append(tuple(t.shape))
        per_device = [sorted(v) for v in shapes.values()]
        return all(v == per_device[0] for v in per_device[1:])

    def on_module_move(
        self, module: Any, target: str | None, *, site: Site | None, implicit: bool = False
    ) -> Finding | None:
        """Before `module.cuda()` / `module.to(dev)`: moving a split model onto one device collapses it.
        implicit: no index given (the current device). Every move is recorded (placement.py)."""
        if target is None:
            return None
        self.placements.moved(
            module,
            site or UNKNOWN,
            target,
            implicit=implicit,
            current=self.devices.normalize("cuda") if implicit else None,
        )
        devs = [d for d in self.model_devices(module) if d != "cpu"]
        if len(devs) < 2 or target == "cpu":
            return None
        finding = self.emit(
            "MP007",
            site or self.sites(),
            f"this moves a model split over {', '.join(devs)} entirely onto {target}: the split is undone "
            f"and {target} must hold every parameter",
            devices=tuple(devs),
            modules=(self.module_name(module),),
            suggestion="remove this call: a split model's stages are placed in its __init__; move only the inputs",
        )
        self._collapses.record(module, target, tuple(devs), finding)
        return finding

    def module_name(self, module: Any) -> str:
        namer = self.namer
        return namer(module) if namer else type(module).__name__

    # -- steps --------------------------------------------------------------------------
    def step_end(self) -> None:
        self.ledger.step_end()
        with self._lock:
            for chain in self._pingpong.close():
                self._report_ping_pong(chain)
            # Entries live as long as their storage: the same unchanged data moved
            # again in a later step is a repeat too (a constant moved every step).
            self._purge()
            self.provenance.purge()
            self._refresh_provenance()

    def finish(self) -> None:
        with self._lock:
            for chain in self._pingpong.close():
                self._report_ping_pong(chain)
        self.ledger.finish()


def _distributed() -> bool:
    """Is a torch.distributed process group running? (Then set_device(rank) + `.cuda()` is the DDP idiom.)"""
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


class _ThreadState(threading.local):
    """Per-thread state (autograd runs backward on its own threads). Set in __init__, which
    runs once in each thread: a missing attribute read with getattr(tls, name, default) raises
    and swallows an AttributeError, ~0.6 us on every op and module call."""

    def __init__(self) -> None:
        self.suspended = 0
        self.stack: list[str] = []
        # Module calls whose inputs were off the module's device, outermost first (enter_module).
        self.entries: list[_Entry] = []
        self.forwards = 0  # outermost module calls so far: a forward pass's number, for MP006
        # Transfers outside any module: forward passes ended by a backward (MP006 chains per pass).
        self.top_passes = 0
        self.top_pass_over = False
        self.passes_ended = 0  # losses and backward passes seen: the model ran (MP011, recurrence.py)
        self.top_calls: set[int] = set()  # id() of the modules the current pass called outermost
        # > 0 while a module call of a signature checked clean runs with the modes stepped aside
        # (capture/signatures.py): transfers are then recorded by capture/transfers.py instead.
        self.unchecked = 0


class _Entry:
    """A module call that received tensors off its device: where, and which tensors (by id;
    the call's own frame keeps them alive until leave_module() drops the entry)."""

    __slots__ = ("what", "path", "device", "site", "tensors", "module")

    def __init__(
        self, what: str, path: str, device: str | None, site: Site, tensors: dict[int, tuple[Any, Where]], module: Any
    ) -> None:
        self.module = module
        self.what = what
        self.path = path
        self.device = device
        self.site = site
        self.tensors = tensors


class _Suspend:
    __slots__ = ("tls",)

    def __init__(self, tls: _ThreadState) -> None:
        self.tls = tls

    def __enter__(self) -> None:
        self.tls.suspended += 1

    def __exit__(self, *exc: Any) -> None:
        self.tls.suspended -= 1
