"""Per-virtual-device memory estimate: parameters, gradients, optimizer states, activations at peak.

The virtual GPUs keep a registry of live labelled storages (bytes per device,
the running peak). Two moments are sampled:
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

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs

CATEGORIES = ("params", "grads", "optimizer_state", "activations")


def _params(g: "VirtualGPUs") -> list[torch.Tensor]:
    out = []
    for key, ref in list(g.params.items()):
        p = ref()
        if p is None:
            del g.params[key]
        else:
            out.append(p)
    return out


def _storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        st = t.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    return id(st), st.nbytes()


def _by_device(g: "VirtualGPUs", tensors: Any, seen: set[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        k = _storage_key(t)
        if k is None or k[0] in seen:
            continue
        seen.add(k[0])
        d = g.device_of(t)
        if d.startswith("cuda"):
            out[d] = out.get(d, 0) + k[1]
    return out


def _optimizer_tensors(g: "VirtualGPUs") -> list[torch.Tensor]:
    out = []
    for key, ref in list(g.optimizers.items()):
        opt = ref()
        if opt is None:
            del g.optimizers[key]
            continue
        for state in opt.state.values():
            for v in state.values():
                if isinstance(v, torch.Tensor):
                    out.append(v)
    return out


def _grads(params: list[torch.Tensor]) -> list[torch.Tensor]:
    with torch._C.DisableTorchFunction():
        return [p.grad for p in params if p.grad is not None]


def snapshot_activations(g: "VirtualGPUs") -> None:
    params = _params(g)
    for p in params:
        g._mark_param_storage(p)
    # Gradients are about to be made: one per parameter that requires grad, where it lives.
    grads: dict[str, int] = {}
    for p in params:
        if p.requires_grad:
            d = g.device_of(p)
            if d.startswith("cuda"):
                grads[d] = grads.get(d, 0) + p.numel() * p.element_size()
    for dev, n in grads.items():
        slot = g.static_peak.setdefault(dev, {})
        slot["grads"] = max(slot.get("grads", 0), n)
    exclude: set[int] = set()
    for t in (*params, *_grads(params), *_optimizer_tensors(g)):
        k = _storage_key(t)
        if k is not None:
            exclude.add(k[0])
    act: dict[str, int] = {}
    for key, (dev, nbytes, _ref) in list(g.live.items()):
        if key not in exclude:
            act[dev] = act.get(dev, 0) + nbytes
    for dev, n in act.items():
        if n > g.activation_peak.get(dev, 0):
            g.activation_peak[dev] = n


def snapshot_step(g: "VirtualGPUs") -> None:
    params = _params(g)
    seen: set[int] = set()
    now = {
        "params": _by_device(g, params, seen),
        "grads": _grads_by_param_device(g, params, seen),
        "optimizer_state": _by_device(g, _optimizer_tensors(g), seen),
    }
    for cat, per_dev in now.items():
        for dev, n in per_dev.items():
            slot = g.static_peak.setdefault(dev, {})
            slot[cat] = max(slot.get(cat, 0), n)


def _grads_by_param_device(g: "VirtualGPUs", params: list[torch.Tensor], seen: set[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    with torch._C.DisableTorchFunction():
        pairs = [(p, p.grad) for p in params if p.grad is not None]
    for p, grad in pairs:
        k = _storage_key(grad)
        if k is None or k[0] in seen:
            continue
        seen.add(k[0])
        d = g.device_of(p)  # autograd made the gradient in C++: it lives where its parameter does
        if d.startswith("cuda"):
            out[d] = out.get(d, 0) + k[1]
    return out


def estimate(g: "VirtualGPUs") -> dict[str, dict[str, Any]]:
    """device -> {params, grads, optimizer_state, activations, total, peak_allocated, capacity, fits}.

    Parameters are counted from the storages seen holding them while the program ran (the
    program's objects may be gone by now); gradients and optimizer states from the snapshots."""
    for p in _params(g):
        g._mark_param_storage(p)
    opt_now = _by_device(g, _optimizer_tensors(g), set())
    out: dict[str, dict[str, Any]] = {}
    for dev in g.devices:
        st = g.static_peak.get(dev, {})
        p_bytes = max(st.get("params", 0), g.param_peak.get(dev, 0))
        grads = st.get("grads", 0)
        opt = max(st.get("optimizer_state", 0), opt_now.get(dev, 0))
        act = g.activation_peak.get(dev, 0)
        if not g.backward_calls:
            # No backward: the peak of everything live on the device, less what is static.
            act = max(0, g.peak[dev] - p_bytes - opt)
        total = p_bytes + grads + opt + act
        out[dev] = {
            "params": p_bytes,
            "grads": grads,
            "optimizer_state": opt,
            "activations": act,
            "total": total,
            "peak_allocated": g.peak[dev],
            "capacity": g.device_memory,
            "fits": total <= g.device_memory,
        }
    return out
