"""Per-virtual-device memory estimate: the peak of allocated memory, and what was live at that peak.

The virtual GPUs register every storage made on them as it is made (the function mode's outputs,
and through the dispatch mode of allocations.py the temporaries inside a call and everything
autograd makes in backward), at the bytes a real GPU's allocator counts for it (cuda_allocator.py),
and drop it when PyTorch frees it. The estimate is the highest sum of live bytes each device
reached: the figure `torch.cuda.max_memory_allocated` gives on real GPUs, with the same life
times (issue 12; measured against 2x H200 in tests/gpu/test_gpu_memory_estimate.py). It is not
lowered by the program's own `torch.cuda.reset_peak_memory_stats()`.

What was live at that peak is split into parameters, gradients, optimizer states and the rest
("activations": saved activations, temporaries of forward, backward and the optimizer step,
inputs, and the allocator's rounding). A storage's kind is learnt when it is seen as one (a
parameter used by an op or moved; `.grad` of a known parameter and the optimizers' state after
each step, before each backward and at the end), which may be after the peak: a storage made
before the peak and still alive when it is classified was alive at the peak too, so its bytes
move from "activations" to its kind in the peak's split. The split's kinds count the tensors'
own bytes; the total counts the allocator's.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

CATEGORIES = ("params", "grads", "optimizer_state", "activations")
_PARAMS, _GRADS, _OPT = 0, 1, 2  # indices into the per-device counts of the classified kinds


class MemoryEstimate:
    """What one set of virtual GPUs held at each one's peak, by category.

    devices: the virtual devices ("cuda:0", ...); capacity: each one's memory in bytes;
    device_of: a tensor's virtual device; live: the registry of live labelled storages
    (id(storage) -> (device, counted bytes, weakref)), kept by the virtual GPUs, which also
    report each storage made (`storage_made`) and freed (`storage_freed`)."""

    def __init__(
        self,
        devices: list[str],
        capacity: int,
        *,
        device_of: Callable[[Any], str],
        live: dict[int, tuple[str, int, Any]],
    ) -> None:
        self.devices = devices
        self.capacity = capacity
        self._device_of = device_of
        self._live = live
        self._params: dict[int, weakref.ref] = {}
        self._optimizers: dict[int, weakref.ref] = {}
        self._made = 0  # storages made so far: the order of the live ones' births
        self._born: dict[int, int] = {}  # live storage -> its number
        self._kind: dict[int, tuple[int, int]] = {}  # classified live storage -> (kind, its tensor bytes)
        self._kind_bytes = {d: [0, 0, 0] for d in devices}  # live bytes of each kind, now
        self._top = {d: 0 for d in devices}  # the highest allocated bytes reached
        # At that peak: [number of the storage that reached it, params, grads, optimizer states].
        self._at_top: dict[str, list[int]] = {d: [0, 0, 0, 0] for d in devices}
        # The session's threads (capture/threads.py), set by the dry run: gradients are read only while no
        # other thread's backward writes them.
        self.threads: Any = None
        # Counts the storages freed since the last registration (VirtualGPUs.drain): before any reading.
        self.drain: Callable[[], None] = lambda: None

    # -- what the virtual GPUs tell it -------------------------------------------------
    def storage_made(self, key: int, dev: str, nbytes: int, allocated: int) -> None:
        """A storage of `nbytes` (counted) was made on `dev`, which now holds `allocated` bytes."""
        self._made += 1
        self._born[key] = self._made
        if allocated > self._top[dev]:
            self._top[dev] = allocated
            now = self._kind_bytes[dev]
            self._at_top[dev] = [self._made, now[0], now[1], now[2]]

    def storage_freed(self, key: int, dev: str, nbytes: int) -> None:
        self._born.pop(key, None)
        kind = self._kind.pop(key, None)
        if kind is not None:
            self._kind_bytes[dev][kind[0]] -= kind[1]

    def note_param(self, p: torch.Tensor) -> None:
        """A parameter was seen (an op's argument, a move's source)."""
        ref = self._params.get(id(p))
        if ref is None or ref() is not p:
            self._params[id(p)] = weakref.ref(p)
        self._classify(p, _PARAMS)

    def mark_param_storage(self, t: torch.Tensor) -> None:
        """`t`'s storage holds a parameter (a moved parameter's copy): count it as parameter memory."""
        self._classify(t, _PARAMS)

    def note_optimizer(self, optimizer: Any) -> None:
        self._optimizers[id(optimizer)] = weakref.ref(optimizer)

    def before_backward(self) -> None:
        """A backward is about to run: what is live is known as it is (gradients kept from before)."""
        self._classify_known()

    def after_step(self, optimizer: Any = None) -> None:
        """An optimizer step ended: its gradients and states are live now."""
        self._classify_known(optimizer)

    # -- the estimate ---------------------------------------------------------------------
    def estimate(self) -> dict[str, dict[str, Any]]:
        """device -> {params, grads, optimizer_state, activations, total, peak_allocated, capacity, fits}.

        total (the figure the fit check uses) and peak_allocated are the peak; the four categories
        split what was live then, and add up to it."""
        self.drain()
        self._classify_known()
        out: dict[str, dict[str, Any]] = {}
        for dev in self.devices:
            total = self._top[dev]
            _n, params, grads, opt = self._at_top[dev]
            out[dev] = {
                "params": params,
                "grads": grads,
                "optimizer_state": opt,
                "activations": total - params - grads - opt,
                "total": total,
                "peak_allocated": total,
                "capacity": self.capacity,
                "fits": total <= self.capacity,
            }
        return out

    # -- classification -----------------------------------------------------------------
    def _classify_known(self, optimizer: Any = None) -> None:
        """Classify what is known: parameters, their gradients, the optimizers' states. While the program's
        threads run (capture/threads.py), only the thread that started the run reads every parameter's
        gradient, and only when no other thread runs; a thread's optimizer step reads its own parameters'
        (each is classified at its own step, or at the end)."""
        from mpcheck.runtime.capture.threads import grad_reads

        params = self._live_params()
        for p in params:
            self._classify(p, _PARAMS)
        with grad_reads(self.threads) as readable:
            if readable:
                grads = _grads(params)
            elif optimizer is not None:
                grads = _grads([p for group in optimizer.param_groups for p in group["params"]])
            else:
                grads = []
        for grad in grads:
            self._classify(grad, _GRADS)
        for t in self._optimizer_tensors():
            self._classify(t, _OPT)

    def _classify(self, t: torch.Tensor, kind: int) -> None:
        """`t`'s storage is of `kind`; if it was alive at its device's peak, the peak's split says so."""
        self.drain()
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return
        key = id(st)
        born = self._born.get(key)
        if born is None or key in self._kind:
            return  # not on a virtual GPU, or known already
        entry = self._live.get(key)
        if entry is None:
            return
        dev = entry[0]
        nbytes = st.nbytes()
        self._kind[key] = (kind, nbytes)
        self._kind_bytes[dev][kind] += nbytes
        at_top = self._at_top[dev]
        if born <= at_top[0]:
            at_top[kind + 1] += nbytes

    def _live_params(self) -> list[torch.Tensor]:
        out = []
        for key, ref in list(self._params.items()):
            p = ref()
            if p is None:
                del self._params[key]
            else:
                out.append(p)
        return out

    def _optimizer_tensors(self) -> list[torch.Tensor]:
        out = []
        for key, ref in list(self._optimizers.items()):
            opt = ref()
            if opt is None:
                del self._optimizers[key]
                continue
            for state in list(opt.state.values()):  # lists: another thread's step may add to them
                for v in list(state.values()):
                    if isinstance(v, torch.Tensor):
                        out.append(v)
        return out


def _grads(params: list[torch.Tensor]) -> list[torch.Tensor]:
    with torch._C.DisableTorchFunction():
        return [p.grad for p in params if p.grad is not None]
