"""What MP021's advice (per-item-transfer) is worth, measured on the GPUs at hand.

    python bench/per_item_transfer.py [--reps N] [--json out.json]

N tensors of one size moved one by one and then stacked on the destination
(`torch.stack([x.to(dst) for x in items])`, what a Dataset moving each sample to the GPU and the
DataLoader's collate do), against stacked on the source and moved once
(`torch.stack(items).to(dst)`). From the host (pageable memory, as a Dataset's tensors are) to
cuda:0, and with two GPUs also cuda:0 -> cuda:1. Item sizes from 4 KiB to 4 MiB, 8 and 32 items:
where the ratio nears 1 is where the rule's size limit (ITEM_MAX_BYTES) and item count (MIN_ITEMS)
come from. Each variant: the median of many repetitions after warm-up, synchronized around each,
variants interleaved. Needs 1 CUDA device.

Also the slices of one tensor moved one by one in a loop (`for t in range(T): cell(x[:, t].to(dst), h)`, a
recurrent decoder fed per time step from a stage on another device), against the tensor moved once before the
loop and sliced where it arrived: rows (`x[i]`, contiguous) and time steps (`x[:, t]`, strided); from the host
to cuda:0, between GPUs, and from cuda:0 to the host (`for i in range(len(emb)): index.add(emb[i].cpu())`).
"""

from __future__ import annotations

import sys

import torch
from transfer_costs import _time, one_gpu_main  # interleaved medians, synchronized on every device (this folder)


def per_item(src: str, dst: str, count: int, item_bytes: int, reps: int) -> dict:
    items = [torch.randn(item_bytes // 4, device=src) for _ in range(count)]

    def one_by_one():
        return torch.stack([x.to(dst) for x in items])

    def stacked_first():
        return torch.stack(items).to(dst)

    return _row(
        f"{count} x {item_bytes // 1024} KiB fp32, {src} -> {dst}", count, item_bytes, stacked_first, one_by_one, reps
    )


def per_slice(src: str, dst: str, count: int, item_bytes: int, strided: bool, reps: int) -> dict:
    batch = 8 if strided else 1
    x = (
        torch.randn(batch, count, item_bytes // 4 // batch, device=src)
        if strided
        else torch.randn(count, item_bytes // 4, device=src)
    )

    def one_by_one():
        return [(x[:, i] if strided else x[i]).to(dst) for i in range(count)]

    def moved_once():
        whole = x.to(dst)
        return [whole[:, i] if strided else whole[i] for i in range(count)]

    case = f"{count} slices {'x[:, t]' if strided else 'x[i]'} of {item_bytes // 1024} KiB fp32, {src} -> {dst}"
    return _row(case, count, item_bytes, moved_once, one_by_one, reps)


def _row(case: str, count: int, item_bytes: int, fix, as_written, reps: int) -> dict:
    """One row: both variants timed, interleaved, and the ratio of the code as written to its fix."""
    t = _time({"fix": fix, "as_written": as_written}, reps)
    return {"case": case, "count": count, "item_bytes": item_bytes, **t, "ratio": t["as_written"] / t["fix"]}


def rows(reps: int) -> list[dict]:
    ways = [("cpu", "cuda:0")]
    if torch.cuda.device_count() >= 2:
        ways.append(("cuda:0", "cuda:1"))
    return [
        per_item(src, dst, count, kib * 1024, reps)
        for src, dst in ways
        for count in (8, 32)
        for kib in (4, 64, 256, 1024, 4096)
    ] + [
        per_slice(src, dst, count, kib * 1024, strided, reps)
        for src, dst in [*ways, ("cuda:0", "cpu")]
        for strided in (False, True)
        for count in (8, 64)
        for kib in (4, 64, 256, 1024)
    ]


if __name__ == "__main__":
    sys.exit(one_gpu_main(__doc__, "bench/per_item_transfer.py", rows, 40))
