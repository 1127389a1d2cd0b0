"""Per-virtual-device memory estimate: parameters, gradients, optimizer states, activations at peak.

The virtual GPUs keep a registry of live labelled storages (bytes per device,
the running peak), which the estimate reads; what it learns on the way (the
parameters and optimizers seen, their bytes, the peaks) is its own state.
Two moments are sampled:
- each backward call (the end of a forward, where saved activations peak):
  live bytes that are not parameters, gradients or optimizer states count as
  activations;
- each optimizer step (after it): parameter, gradient and optimizer-state bytes.
The estimate adds the four largest values seen, a slight over-estimate
(activations and a full set of gradients rarely peak at the same instant),
which is the safe side for "will it fit". Storages are counted once however
many views share them. Gradients made by autograd are counted for every
parameter that requires grad once a backward has run.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

CATEGORIES = ("params", "grads", "optimizer_state", "activations")


class MemoryEstimate:
    """What one set of virtual GPUs holds, by category, at its peaks.

    devices: the virtual devices ("cuda:0", ...); capacity: each one's memory in bytes;
    device_of: a tensor's virtual device; live: the registry of live labelled storages
    (id(storage) -> (device, nbytes, weakref)) and peak: the running peak of allocated
    bytes per device, both kept by the virtual GPUs and only read here."""

    def __init__(
        self,
        devices: list[str],
        capacity: int,
        *,
        device_of: Callable[[Any], str],
        live: dict[int, tuple[str, int, Any]],
        peak: dict[str, int],
    ) -> None:
        self.devices = devices
        self.capacity = capacity
        self._device_of = device_of
        self._live = live
        self._peak = peak
        self._params: dict[int, weakref.ref] = {}
        # Storages known to hold parameters: their bytes per device, now and at most.
        self._param_keys: set[int] = set()
        self._param_bytes = {d: 0 for d in devices}
        self._param_peak = {d: 0 for d in devices}
        self._optimizers: dict[int, weakref.ref] = {}
        self._backward_calls = 0
        self._activation_peak = {d: 0 for d in devices}
        self._static_peak: dict[str, dict[str, int]] = {}

    # -- what the virtual GPUs tell it -------------------------------------------------
    def note_param(self, p: torch.Tensor) -> None:
        """A parameter was seen (an op's argument, a move's source)."""
        ref = self._params.get(id(p))
        if ref is None or ref() is not p:
            self._params[id(p)] = weakref.ref(p)
        self.mark_param_storage(p)

    def mark_param_storage(self, t: torch.Tensor) -> None:
        """`t`'s storage holds a parameter: count its bytes as parameter memory."""
        try:
            key = id(t.untyped_storage())
        except (RuntimeError, NotImplementedError, TypeError):
            return
        if key in self._param_keys:
            return
        entry = self._live.get(key)
        if entry is None:
            return
        dev, nbytes, _ref = entry
        self._param_keys.add(key)
        cur = self._param_bytes[dev] + nbytes
        self._param_bytes[dev] = cur
        if cur > self._param_peak[dev]:
            self._param_peak[dev] = cur

    def storage_freed(self, key: int, dev: str, nbytes: int) -> None:
        if key in self._param_keys:
            self._param_keys.discard(key)
            self._param_bytes[dev] -= nbytes

    def note_optimizer(self, optimizer: Any) -> None:
        self._optimizers[id(optimizer)] = weakref.ref(optimizer)

    def before_backward(self) -> None:
        """A backward is about to run: the end of a forward, where saved activations peak."""
        self._backward_calls += 1
        params = self._live_params()
        for p in params:
            self.mark_param_storage(p)
        # Gradients are about to be made: one per parameter that requires grad, where it lives.
        grads: dict[str, int] = {}
        for p in params:
            if p.requires_grad:
                d = self._device_of(p)
                if d.startswith("cuda"):
                    grads[d] = grads.get(d, 0) + p.numel() * p.element_size()
        for dev, n in grads.items():
            slot = self._static_peak.setdefault(dev, {})
            slot["grads"] = max(slot.get("grads", 0), n)
        exclude: set[int] = set()
        for t in (*params, *_grads(params), *self._optimizer_tensors()):
            k = _storage_key(t)
            if k is not None:
                exclude.add(k[0])
        act: dict[str, int] = {}
        for key, (dev, nbytes, _ref) in list(self._live.items()):
            if key not in exclude:
                act[dev] = act.get(dev, 0) + nbytes
        for dev, n in act.items():
            if n > self._activation_peak.get(dev, 0):
                self._activation_peak[dev] = n

    def after_step(self) -> None:
        """An optimizer step ended: parameter, gradient and optimizer-state bytes."""
        params = self._live_params()
        seen: set[int] = set()
        now = {
            "params": self._by_device(params, seen),
            "grads": self._grads_by_param_device(params, seen),
            "optimizer_state": self._by_device(self._optimizer_tensors(), seen),
        }
        for cat, per_dev in now.items():
            for dev, n in per_dev.items():
                slot = self._static_peak.setdefault(dev, {})
                slot[cat] = max(slot.get(cat, 0), n)

    # -- the estimate ---------------------------------------------------------------------
    def estimate(self) -> dict[str, dict[str, Any]]:
        """device -> {params, grads, optimizer_state, activations, total, peak_allocated, capacity, fits}.

        Parameters are counted from the storages seen holding them while the program ran (the
        program's objects may be gone by now); gradients and optimizer states from the snapshots."""
        for p in self._live_params():
            self.mark_param_storage(p)
        opt_now = self._by_device(self._optimizer_tensors(), set())
        out: dict[str, dict[str, Any]] = {}
        for dev in self.devices:
            st = self._static_peak.get(dev, {})
            p_bytes = max(st.get("params", 0), self._param_peak.get(dev, 0))
            grads = st.get("grads", 0)
            opt = max(st.get("optimizer_state", 0), opt_now.get(dev, 0))
            act = self._activation_peak.get(dev, 0)
            if not self._backward_calls:
                # No backward: the peak of everything live on the device, less what is static.
                act = max(0, self._peak[dev] - p_bytes - opt)
            total = p_bytes + grads + opt + act
            out[dev] = {
                "params": p_bytes,
                "grads": grads,
                "optimizer_state": opt,
                "activations": act,
                "total": total,
                "peak_allocated": self._peak[dev],
                "capacity": self.capacity,
                "fits": total <= self.capacity,
            }
        return out

    # -- helpers ----------------------------------------------------------------------------
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
            for state in opt.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor):
                        out.append(v)
        return out

    def _by_device(self, tensors: Any, seen: set[int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                continue
            k = _storage_key(t)
            if k is None or k[0] in seen:
                continue
            seen.add(k[0])
            d = self._device_of(t)
            if d.startswith("cuda"):
                out[d] = out.get(d, 0) + k[1]
        return out

    def _grads_by_param_device(self, params: list[torch.Tensor], seen: set[int]) -> dict[str, int]:
        out: dict[str, int] = {}
        with torch._C.DisableTorchFunction():
            pairs = [(p, p.grad) for p in params if p.grad is not None]
        for p, grad in pairs:
            k = _storage_key(grad)
            if k is None or k[0] in seen:
                continue
            seen.add(k[0])
            d = self._device_of(p)  # autograd made the gradient in C++: it lives where its parameter does
            if d.startswith("cuda"):
                out[d] = out.get(d, 0) + k[1]
        return out


def _storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        st = t.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    return id(st), st.nbytes()


def _grads(params: list[torch.Tensor]) -> list[torch.Tensor]:
    with torch._C.DisableTorchFunction():
        return [p.grad for p in params if p.grad is not None]
