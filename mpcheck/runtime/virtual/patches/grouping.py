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
        key = (torch.device(g.device_of(t)), t.dtype)
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
