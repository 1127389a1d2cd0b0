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
  its parameter's;
- behaves like PyTorch where PyTorch refuses (two CUDA devices in one op,
  `.numpy()` of a CUDA tensor); with meta backing, stops with a clear message
  where Python needs a value;
- emulates `autocast("cuda")` (a no-op on CPU tensors otherwise): see autocast.py.
Below it, a TorchDispatchMode (allocations.py) labels each aten op's new storages as they
are made, also those autograd makes in backward, so that the registry of live storages
follows a real GPU allocator's. Around both, `torch.cuda` queries, `set_device`, `torch.cuda.device`, streams,
events, memory queries, the foreach/optimizer grouping by device, DataParallel
and DDP are patched while the virtual GPUs are active (patches/).

This module: the devices themselves (labels, device strings, moves, the
registry of live storages, at the bytes the CUDA allocator counts: cuda_allocator.py;
cuBLAS's workspaces, limits) and entering / leaving them. The memory estimate (memory.py)
is told of each storage made and freed and keeps its own counts.

The checker (checks/checker.py) sits *above* this mode on the mode stack and asks
`device_of()`; it never reads `t.device` itself.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import Any

import torch
from torch._C import _functorch
from torch.nn.parameter import UninitializedTensorMixin  # type: ignore[attr-defined]  # (not in its stubs)
from torch.optim.optimizer import register_optimizer_step_post_hook

from mpcheck.runtime.capture.hooks import in_outer_step
from mpcheck.runtime.capture.threads import retire
from mpcheck.runtime.checks.torchapi import sparse_parts
from mpcheck.runtime.virtual.active import ACTIVE
from mpcheck.runtime.virtual.allocations import AllocationMode, copy_gradient_back
from mpcheck.runtime.virtual.cuda_allocator import counted_bytes
from mpcheck.runtime.virtual.errors import DryRunLimitError, MetaValueError, VirtualDeviceError, user_line
from mpcheck.runtime.virtual.links import Link, ModelTiming, parse_link
from mpcheck.runtime.virtual.memory import MemoryEstimate
from mpcheck.runtime.virtual.mode import VirtualMode, build_tables
from mpcheck.runtime.virtual.patches import install as install_patches
from mpcheck.runtime.virtual.patches.base import Patches
from mpcheck.runtime.virtual.visible import visible_count

__all__ = ["VirtualGPUs", "DryRunLimitError", "MetaValueError", "VirtualDeviceError", "LABEL", "DEFAULT_DEVICE_MEMORY"]

LABEL = "_mpcheck_vdev"
DEFAULT_DEVICE_MEMORY = 80 * 2**30  # an 80 GiB A100/H100; --device-memory changes it
# What cuBLAS's workspaces take on a GPU from its first matrix multiply on: 32 MiB for cuBLAS and 1 MiB for
# cuBLASLt on Hopper (measured on H200, PyTorch 2.x: two blocks at the first `nn.Linear`); older GPUs take
# less (8 MiB + 1 MiB on Ampere), so this is the safe side.
BLAS_WORKSPACES = (32 * 2**20, 1 * 2**20)


def _storage_of(t: torch.Tensor) -> Any:
    """`t`'s untyped storage, the one of the tensor it wraps for torch.func's wrappers (`vmap`'s
    batched tensors, `grad`'s and `jacrev`'s grad-tracking ones have no storage of their own: read
    as unlabelled, they were on the backing device, a false MP001 on a stage under `jacrev`); None
    where there is none: nested or functionalised tensors, a LazyModule's UninitializedParameter (no
    storage until its first call). A sparse tensor has no storage of its own either: its values' stand
    for it (a sparse adjacency matrix moved to a GPU was read as still on the CPU: a false MP001)."""
    for _ in range(64):  # nested transforms (vmap(grad(f))) wrap once per level
        try:
            return t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError, ValueError):
            values = _sparse_values(t)
            if values is not None:
                t = values
                continue
            if not _functorch.is_functorch_wrapped_tensor(t):
                return None
            t = _functorch.get_unwrapped(t)
    return None


def _sparse_values(t: torch.Tensor) -> torch.Tensor | None:
    """The dense tensor of a sparse tensor's values, else None."""
    if t.layout is torch.strided:
        return None
    with torch._C.DisableTorchFunction():
        try:
            parts = sparse_parts(t)
        except (RuntimeError, NotImplementedError):
            return None
    return parts[0] if parts else None


class _StorageGone(weakref.ref):
    """A weak reference to a registered storage; when PyTorch frees the storage, the reference itself is
    appended to VirtualGPUs._gone, a C function: no Python code runs inside PyTorch's destructor. (A Python
    callback there may hand the GIL to another thread while the owner's pointer, `param.grad` being reset
    in `zero_grad`, still points at the tensor being destroyed: a thread reading `.grad` then crashed.)
    The frees are counted before the next registration and before any reading (drain)."""

    __slots__ = ("key",)
    key: int


class OneThread:
    """What each thread has of its own on the virtual GPUs, while only one thread runs on them: a plain
    object (a threading.local's attribute costs ~75 ns a read, five of them in each of the ~1,400 torch calls of
    a pipeline's step)."""

    def __init__(self) -> None:
        self.current = 0
        self.op_device: str | None = None


class PerThread(threading.local):
    """The same, one per thread, once the program starts a thread under the dry run (VirtualGPUs.per_thread;
    __init__ runs once in each thread)."""

    def __init__(self) -> None:
        self.current = 0
        self.op_device: str | None = None


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
        self.machine_gpus = gpus  # --gpus: the machine's; `n`, the process's, may be fewer (visible.py)
        self._n: int | None = None  # read from CUDA_VISIBLE_DEVICES when first asked for (the property n)
        self.visible_note: str | None = None
        # The value mpcheck was started with describes the real machine (a shared GPU server's `0,1`), not the
        # --gpus asked for: only a value the program itself sets counts (visible.py).
        self._inherited_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.backing = backing
        self.backing_device = torch.device(backing)
        self.device_memory = int(device_memory)
        self.link = parse_link(link)
        # Per thread, as on real GPUs (a CUDA device is current per host thread; one thread's op is not
        # another's): the current device, and the device the dispatch mode gives what the running aten op
        # makes (allocations.py): None while no virtual-mode call runs (backward: its inputs' device),
        # allocations.UNKNOWN for "leave it". One plain object until the program starts a thread (per_thread).
        self.tls: OneThread | PerThread = OneThread()
        self.devices = [f"cuda:{i}" for i in range(gpus)]
        # Live labelled storages on the virtual GPUs: id(storage) -> (device, bytes, weakref), the bytes a
        # real GPU's allocator counts for them (cuda_allocator.py); what torch.cuda's memory queries answer.
        self.live: dict[int, tuple[str, int, Any]] = {}
        self._allocated = {d: 0 for d in self.devices}
        self.peak = dict(self._allocated)
        self._made = dict(self._allocated)  # storages made on each virtual GPU so far (allocations())
        # Weak references to registered storages that PyTorch has freed, not yet counted as freed (drain()).
        self._gone: collections.deque[_StorageGone] = collections.deque()
        self.memory = MemoryEstimate(self.devices, self.device_memory, device_of=self.device_of, live=self.live)
        self.memory.drain = self.drain
        self._allocation_mode: AllocationMode | None = None
        self.blas_workspaces: dict[str, list[torch.Tensor]] = {}
        # Limits met on the way that did not stop the run (event timing, ...): (site, text).
        self.limits: list[tuple[str, str]] = []
        self._limit_seen: set[tuple[str, str]] = set()
        # The registry and its counts change under it: the program's threads register storages too.
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

    @property
    def n(self) -> int:
        """How many GPUs the program has: --gpus, or fewer where the program set CUDA_VISIBLE_DEVICES to hide some,
        read when it first asks for a GPU (a device string, torch.cuda's queries), as CUDA reads it at its start."""
        if self._n is None:
            self._n = self.machine_gpus
            spec = os.environ.get("CUDA_VISIBLE_DEVICES")
            set_by_program = spec is not None and spec != self._inherited_visible
            count = visible_count(spec, self.machine_gpus) if set_by_program and spec is not None else None
            if count is not None and 1 <= count < self.machine_gpus:
                self._n = count
                del self.devices[count:]  # the memory estimate's list too: it is this one
                self.visible_note = (
                    f"CUDA_VISIBLE_DEVICES={spec!r}: the program sees {count} of the {self.machine_gpus} virtual GPUs, "
                    f"as cuda:0..cuda:{count - 1}"
                )
            elif count == 0:
                self.visible_note = (
                    f"CUDA_VISIBLE_DEVICES={spec!r} hides every GPU; the dry run does not emulate a machine without "
                    f"one and gives the program all {self.machine_gpus} virtual GPUs"
                )
        return self._n

    def per_thread(self) -> None:
        """The program is about to start a thread that runs on the virtual GPUs (capture/threads.py): from now
        on each thread has its own current device and op device; the thread starting it keeps its own."""
        if isinstance(self.tls, PerThread):
            return
        old, new = self.tls, PerThread()
        new.current, new.op_device = old.current, old.op_device
        self.tls = new
        for mode in (self._mode, self._allocation_mode):
            if mode is not None:
                mode.tls = new

    @property
    def current(self) -> int:
        """This thread's current virtual GPU (torch.cuda.set_device); a new thread starts on cuda:0, as CUDA's do."""
        return self.tls.current

    @current.setter
    def current(self, index: int) -> None:
        self.tls.current = index

    # -- labels -----------------------------------------------------------------
    def label_of(self, t: torch.Tensor) -> str | None:
        st = _storage_of(t)
        return None if st is None else getattr(st, LABEL, None)

    def device_of(self, t: torch.Tensor) -> str:
        """The virtual device of `t` ("cuda:1"), else its real one ("cpu", "meta")."""
        lab = self.label_of(t)
        if lab is not None:
            return lab
        d = t.device
        return d.type if d.index is None else f"{d.type}:{d.index}"

    def label(self, t: torch.Tensor, dev: str) -> None:
        """Put `t`'s storage on the virtual device `dev` (once: a storage keeps its first label)."""
        st = _storage_of(t)
        if st is not None:
            self.label_storage(st, dev)

    def storage_label(self, st: Any) -> str | None:
        """The virtual device of the untyped storage `st`, or None where it has none."""
        return getattr(st, LABEL, None)

    def label_storage(self, st: Any, dev: str) -> None:
        """Put the untyped storage `st` on the virtual device `dev` (label() of its tensors)."""
        if getattr(st, LABEL, None) is not None:
            return
        if dev == "cpu" and self.backing == "cpu":
            return  # unlabelled CPU-backed tensors are real CPU tensors
        setattr(st, LABEL, dev)
        if dev.startswith("cuda"):
            self._register(st, dev)

    def _register(self, st: Any, dev: str) -> None:
        key = id(st)
        nbytes = counted_bytes(st.nbytes())
        live = self.live
        with self._lock:
            self._drain_locked()  # an id freed and reused: its free first, as PyTorch's allocator saw them
            old = live.pop(key, None)
            if old is not None:
                self._allocated[old[0]] -= old[1]
                self.memory.storage_freed(key, old[0], old[1])
            ref = _StorageGone(st, self._gone.append)
            ref.key = key
            live[key] = (dev, nbytes, ref)
            self._made[dev] += 1
            cur = self._allocated[dev] + nbytes
            self._allocated[dev] = cur
            if cur > self.peak[dev]:
                self.peak[dev] = cur
            self.memory.storage_made(key, dev, nbytes, cur)

    def drain(self) -> None:
        """Count the storages freed since the last registration as freed (see _StorageGone)."""
        if self._gone:
            with self._lock:
                self._drain_locked()

    def _drain_locked(self) -> None:
        gone, live = self._gone, self.live
        while gone:
            ref = gone.popleft()
            entry = live.get(ref.key)
            if entry is not None and entry[2] is ref:  # else relabelled, or its id taken by a newer storage
                del live[ref.key]
                self._allocated[entry[0]] -= entry[1]
                self.memory.storage_freed(ref.key, entry[0], entry[1])

    @property
    def allocated(self) -> dict[str, int]:
        """Bytes held on each virtual GPU now (torch.cuda.memory_allocated)."""
        self.drain()
        return self._allocated

    def allocations(self, device: str) -> int | None:
        """How many storages were made on the virtual GPU `device` so far (None for another device): the
        round-trip check asks whether the GPU made any while data it had freed waited elsewhere."""
        return self._made.get(device)

    def blas_workspace(self, dev: str) -> None:
        """`dev`'s first matrix multiply: cuBLAS's workspaces (BLAS_WORKSPACES), held from now on."""
        with torch._C.DisableTorchFunction():
            held = [torch.empty(n, dtype=torch.uint8, device="meta") for n in BLAS_WORKSPACES]
        self.blas_workspaces[dev] = held
        for ws in held:
            self.label(ws, dev)

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
        tls = self.tls
        outer = tls.op_device
        tls.op_device = dst
        try:
            with torch._C.DisableTorchFunction():
                out = torch.Tensor.to(t, self.backing_device, **kw)
        finally:
            tls.op_device = outer
        self.label(out, dst)
        if out.requires_grad:
            copy_gradient_back(self, out, self.device_of(t))
        if isinstance(t, UninitializedTensorMixin):
            # A lazy module's buffer not made yet (`nn.LazyBatchNorm1d().to(dev)`): Tensor.to gives it back as
            # a placeholder of its class, as the class's own __torch_function__ does, to be made at the first
            # forward (on `dst`); a plain tensor has no `materialize`.
            with torch._C.DisableTorchFunction():
                out = out.as_subclass(type(t))
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
            self._allocation_mode = AllocationMode(self)
            self._allocation_mode.__enter__()
        except BaseException:
            if self._mode is not None:
                self._mode.__exit__(None, None, None)
                self._mode = None
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
            if self._allocation_mode is not None:
                self._allocation_mode.__exit__(*exc)
        finally:
            retire(self._allocation_mode)  # in the program's threads still running (capture/threads.py)
            self._allocation_mode = None
        try:
            if self._mode is not None:
                self._mode.__exit__(*exc)
        finally:
            retire(self._mode)
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
            self.memory.after_step(optimizer)
