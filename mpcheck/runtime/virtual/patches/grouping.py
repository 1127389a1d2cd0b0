"""The foreach kernels, the optimizers and clip_grad_norm_ group tensors by (device, dtype) in C++,
which sees only the backing device: group by the virtual device instead, as real GPUs would."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from mpcheck.runtime.virtual.patches.base import Patches

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs


def install(g: VirtualGPUs, p: Patches) -> None:
    p.set(torch._C, "_group_tensors_by_device_and_dtype", lambda tll, with_indices=False: _group(g, tll, with_indices))


def _group(g: VirtualGPUs, tensorlistlist: list, with_indices: bool) -> dict:
    out: dict = {}
    first = tensorlistlist[0]
    n_lists = len(tensorlistlist)
    for i, t in enumerate(first):
        dev = g.device_of(t)
        for j in range(1, n_lists):
            other = tensorlistlist[j][i] if tensorlistlist[j] else None
            if other is not None and g.device_of(other) != dev and not _a_host_step(g, other):
                # C++'s own check (ForeachUtils.h, _group_tensors_by_first_tensors_device_and_dtype): an
                # optimizer's state on another device than its parameter, as a `step` loaded onto one GPU
                # (Optimizer.load_state_dict moves every state tensor but `step`) for a parameter on another.
                error = RuntimeError(
                    "Tensors of the same index must be on the same device and the same dtype except `step` "
                    f"tensors that can be CPU and float32/64 notwithstanding (found {dev} and {g.device_of(other)})"
                )
                error.mpcheck_unchecked = True  # type: ignore[attr-defined]  # PyTorch's refusal (stopped.py)
                raise error
        key = (torch.device(dev), t.dtype)
        entry: tuple[list[list[Any]], list[int] | None] | None = out.get(key)
        if entry is None:
            entry = out[key] = ([[] for _ in range(n_lists)], [] if with_indices else None)
        lists, indices = entry
        for j in range(n_lists):
            if tensorlistlist[j]:  # an empty list (Adam's max_exp_avg_sqs without amsgrad) stays empty, as in C++
                lists[j].append(tensorlistlist[j][i])
        if indices is not None:  # with_indices
            indices.append(i)
    return out


def _a_host_step(g: VirtualGPUs, t: Any) -> bool:
    """A 0-dim tensor on the host: a `step` count, which may stay there beside a parameter on a GPU."""
    return isinstance(t, torch.Tensor) and t.dim() == 0 and g.device_of(t) == "cpu"
