"""Virtual GPUs: `cuda:0..N-1` on a machine with none.

A tensor's C++ device cannot be `cuda` on a CPU build (autograd aborts the
process), so a virtual device is a Python-side label kept on the tensor's
untyped storage: PyTorch keeps that storage object for the storage's
lifetime, so views, `param.data = ...` and `Module.to()` keep the label.
The data itself lives on the *backing* device: `cpu` (real values) or
`meta` (shapes only, any size).

One TorchFunctionMode (mode.py: the handlers of torchapi.py, else ops.py) does the rest:
- rewrites `device=` arguments and `Tensor.to/.cuda/.cpu` onto the backing
  device, labelling the results (a move always copies, as a real one does);
- answers `.device`, `.is_cuda`, `.is_cpu`, `.is_meta`, `.get_device()` with
  the virtual device;
- labels every other op's outputs with its inputs' device, and `.grad` with
  its parameter's (gradients are made by autograd in C++, unseen);
- behaves like PyTorch where PyTorch refuses (two CUDA devices in one op,
  `.numpy()` of a CUDA tensor); with meta backing, stops with a clear message
  where Python needs a value;
- emulates `autocast("cuda")` (a no-op on CPU tensors otherwise): see autocast.py.
Around it, `torch.cuda` queries, `set_device`, `torch.cuda.device`, streams,
events, memory queries, the foreach/optimizer grouping by device, DataParallel
and DDP are patched while the virtual GPUs are active (patches/).

This module: the devices themselves (labels, device strings, moves, the
registry of live storages, limits) and entering / leaving them. The memory
estimate (memory.py) reads the registry and keeps its own counts.

The checker (checks/checker.py) sits *above* this mode on the mode stack and asks
`device_of()`; it never reads `t.device` itself.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from mpcheck.runtime.capture.hooks import in_outer_step
from mpcheck.runtime.virtual.active import ACTIVE
from mpcheck.runtime.virtual.errors import DryRunLimitError, MetaValueError, VirtualDeviceError, user_line
from mpcheck.runtime.virtual.links import Link, ModelTiming, parse_link
from mpcheck.runtime.virtual.memory import MemoryEstimate
from mpcheck.runtime.virtual.mode import VirtualMode, build_tables
from mpcheck.runtime.virtual.patches import install as install_patches
from mpcheck.runtime.virtual.patches.base import Patches

__all__ = ["VirtualGPUs", "DryRunLimitError", "MetaValueError", "VirtualDeviceError", "LABEL", "DEFAULT_DEVICE_MEMORY"]

LABEL = "_mpcheck_vdev"
DEFAULT_DEVICE_MEMORY = 80 * 2**30  # an 80 GiB A100/H100; --device-memory changes it


class VirtualGPUs:
    """N virtual CUDA devices backed by `cpu` or `meta` tensors; also the core's `Devices` for the dry run."""

    name = "virtual"

    def __init__(
        self,
        gpus: int,
        *,
        backing: str = "cpu",
        device_memory: int = DEFAULT_DEVICE_MEMORY,
        link: str | float | Link = "nvlink",
    ) -> None:
        if not isinstance(gpus, int) or gpus < 1:
            raise ValueError(f"gpus must be a positive integer, got {gpus!r}")
        if backing not in ("cpu", "meta"):
            raise ValueError(f"backing must be 'cpu' or 'meta', got {backing!r}")
        self.n = gpus
        self.backing = backing
        self.backing_device = torch.device(backing)
        self.device_memory = int(device_memory)
        self.link = parse_link(link)
        self.current = 0
        self.devices = [f"cuda:{i}" for i in range(gpus)]
        # Live labelled storages on the virtual GPUs: id(storage) -> (device, nbytes, weakref).
        self.live: dict[int, tuple[str, int, Any]] = {}
        self.allocated = {d: 0 for d in self.devices}
        self.peak = dict(self.allocated)
        self.memory = MemoryEstimate(
            self.devices, self.device_memory, device_of=self.device_of, live=self.live, peak=self.peak
        )
        # Limits met on the way that did not stop the run (event timing, ...): (site, text).
        self.limits: list[tuple[str, str]] = []
        self._limit_seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._parse_cache: dict[Any, str | None] = {}
        self._mode: VirtualMode | None = None
        self._patches: Patches | None = None
        self._hooks: list[Any] = []
        self.active = False
        # The function modes to restore where autograd runs Python code without them (a custom
        # Function's backward, activation checkpointing's recompute): this mode, and the checking
        # mode above it once the dry run has started its session.
        self.mode_stack: list[Any] = []

    # -- labels -----------------------------------------------------------------
    def label_of(self, t: torch.Tensor) -> str | None:
        try:
            return getattr(t.untyped_storage(), LABEL, None)
        except (RuntimeError, NotImplementedError, TypeError, ValueError):  # sparse, nested, functional
            # wrappers; a LazyModule's UninitializedParameter (ValueError: no storage until its first call)
            return None

    def device_of(self, t: torch.Tensor) -> str:
        """The virtual device of `t` ("cuda:1"), else its real one ("cpu", "meta")."""
        lab = self.label_of(t)
        if lab is not None:
            return lab
        d = t.device
        return d.type if d.index is None else f"{d.type}:{d.index}"

    def label(self, t: torch.Tensor, dev: str) -> None:
        """Put `t`'s storage on the virtual device `dev` (once: a storage keeps its first label)."""
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError, ValueError):
            return
        if getattr(st, LABEL, None) is not None:
            return
        if dev == "cpu" and self.backing == "cpu":
            return  # unlabelled CPU-backed tensors are real CPU tensors
        setattr(st, LABEL, dev)
        if dev.startswith("cuda"):
            self._register(st, dev)

    def _register(self, st: Any, dev: str) -> None:
        key = id(st)
        nbytes = st.nbytes()
        live = self.live
        memory = self.memory

        def _freed(_ref: Any, key: int = key) -> None:
            entry = live.pop(key, None)
            if entry is not None:
                self.allocated[entry[0]] -= entry[1]
                memory.storage_freed(key, entry[0], entry[1])

        with self._lock:
            old = live.pop(key, None)
            if old is not None:
                self.allocated[old[0]] -= old[1]
            live[key] = (dev, nbytes, weakref.ref(st, _freed))
            cur = self.allocated[dev] + nbytes
            self.allocated[dev] = cur
            if cur > self.peak[dev]:
                self.peak[dev] = cur

    def label_outputs(self, out: Any, dev: str, first: Any) -> None:
        """Label an op's tensor outputs with its device (an in-place op's own output keeps its label)."""
        if isinstance(out, torch.Tensor):
            if out is not first:  # an in-place op keeps its own device
                self.label(out, dev)
        elif isinstance(out, (tuple, list)):
            for o in out:
                if isinstance(o, torch.Tensor) and o is not first:
                    self.label(o, dev)

    # -- device strings -----------------------------------------------------------
    def parse(self, d: Any) -> str | None:
        """The virtual device meant by a `device=` value ("cuda:k"), or None when it is not a CUDA device."""
        if d is None:
            return None
        key = d if isinstance(d, (str, int)) else None
        if key is not None and key in self._parse_cache and not (isinstance(d, str) and d == "cuda"):
            return self._parse_cache[key]
        if isinstance(d, int) and not isinstance(d, bool):
            typ, idx = "cuda", d
        else:
            try:
                dev = d if isinstance(d, torch.device) else torch.device(d)
            except (RuntimeError, TypeError):
                return None
            typ, idx = dev.type, dev.index
        if typ != "cuda":
            out = None
        else:
            if idx is None:
                return f"cuda:{self.current}"  # depends on set_device: never cached
            if not 0 <= idx < self.n:
                raise VirtualDeviceError(
                    f"CUDA error: invalid device ordinal (cuda:{idx} does not exist: the dry run has "
                    f"{self.n} virtual GPU{'s' if self.n > 1 else ''}, cuda:0..cuda:{self.n - 1})"
                )
            out = f"cuda:{idx}"
        if key is not None:
            self._parse_cache[key] = out
        return out

    def normalize(self, device_like: Any) -> str | None:
        """The core's Devices.normalize: 'cuda' / 1 / torch.device('cuda', 1) -> 'cuda:1'; 'cpu', 'meta' as is."""
        if device_like is None:
            return None
        v = self.parse(device_like)
        if v is not None:
            return v
        try:
            d = device_like if isinstance(device_like, torch.device) else torch.device(device_like)
        except (RuntimeError, TypeError):
            return None
        return d.type if d.index is None else f"{d.type}:{d.index}"

    def gpu_count(self) -> int:
        return self.n

    def peak_allocated(self, device: str) -> int | None:
        return self.peak.get(device)

    def index(self, d: Any) -> int:
        if d is None:
            return self.current
        if isinstance(d, int):
            return d
        v = self.parse(d)
        if v is None:
            raise ValueError(f"expected a CUDA device, got {d!r}")
        return int(v.split(":")[1])

    # -- moves (also the core's Devices.move) -----------------------------------------
    def transfer(self, t: torch.Tensor, dst: str, *, dtype: Any = None, memory_format: Any = None) -> torch.Tensor:
        """A copy of `t` on `dst` ("cuda:k" or "cpu"), differentiable like `Tensor.to`."""
        kw: dict[str, Any] = {"copy": True}
        if dtype is not None:
            kw["dtype"] = dtype
        if memory_format is not None:
            kw["memory_format"] = memory_format
        with torch._C.DisableTorchFunction():
            out = torch.Tensor.to(t, self.backing_device, **kw)
        self.label(out, dst)
        return out

    def move(self, t: torch.Tensor, device: str) -> torch.Tensor:
        return self.transfer(t, device)

    def start_transfer(self, src: str, dst: str, nbytes: int) -> ModelTiming:
        return ModelTiming(self.link.time_ms(nbytes))

    # -- limits ---------------------------------------------------------------------
    def note_limit(self, text: str, *, site: str | None = None) -> None:
        """A limit met on the way, at `site` ("path:line"; by default the user's line running now)."""
        site = site or user_line()
        if (site, text) not in self._limit_seen:
            self._limit_seen.add((site, text))
            self.limits.append((site, text))

    def limit(self, what: str, why: str) -> DryRunLimitError:
        return DryRunLimitError(f"{user_line()}: {what} is beyond the dry run: {why}")

    # -- install / remove ------------------------------------------------------------
    def __enter__(self) -> VirtualGPUs:
        if self.active:
            raise RuntimeError("these virtual GPUs are already active")
        patches = Patches()
        try:
            ACTIVE.append(self)
            build_tables()
            install_patches(self, patches)
            self._hooks.append(register_optimizer_step_post_hook(self._after_step))
            self._mode = VirtualMode(self)
            self._mode.__enter__()
            self.mode_stack = [self._mode]
        except BaseException:
            for h in self._hooks:
                h.remove()
            self._hooks.clear()
            patches.restore()
            ACTIVE.remove(self)
            raise
        self._patches = patches
        self.active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.active = False
        try:
            if self._mode is not None:
                self._mode.__exit__(*exc)
        finally:
            self._mode = None
            self.mode_stack = []
            for h in self._hooks:
                h.remove()
            self._hooks.clear()
            if self._patches is not None:
                self._patches.restore()
                self._patches = None
            if self in ACTIVE:
                ACTIVE.remove(self)

    # -- memory snapshots (memory.py) -------------------------------------------------------
    def before_backward(self) -> None:
        """A backward is about to run (Tensor.backward, torch.autograd.backward)."""
        self.memory.before_backward()

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.memory.note_optimizer(optimizer)
        if not in_outer_step():  # a step inside a step (super().step()): the outer one reads memory
            self.memory.after_step()
