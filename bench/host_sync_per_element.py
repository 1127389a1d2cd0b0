"""What MP020's advice (host-sync-per-element) is worth, measured on the GPU at hand.

    python bench/host_sync_per_element.py [--reps N] [--json out.json]

A 1-D tensor on the GPU (sequence lengths, counts, a batch's labels) read on the host the way Python's own
builtins and loops read it, against the one-wait form MP020 suggests:
- `int(max(t))`: Python compares the elements pair by pair, one kernel and one host read per element,
  against `int(t.max())`;
- `sorted(t)`, against `sorted(t.tolist())`;
- `[v.item() for v in t]`, against `t.tolist()`;
- `torch.tensor(losses)` of a list of 0-dim tensors on the GPU (per-task losses logged each step), against
  `torch.stack(losses)`;
- `[row.tolist() for row in topk]` of an n x 5 tensor (a batch's top-5 labels read row by row), against
  `topk.tolist()`.
Three lengths (8, 64, 512). Each variant: the median of many repetitions after warm-up, synchronized around
each, variants interleaved. Needs 1 CUDA device.
"""

from __future__ import annotations

import sys

import torch
from transfer_costs import _time, one_gpu_main  # interleaved medians, synchronized on every device (this folder)

LENGTHS = (8, 64, 512)


def cases(n: int, dev: str, reps: int) -> list[dict]:
    t = torch.randint(1, 1000, (n,), device=dev)
    pairs = {
        "int(max(t)) vs int(t.max())": (lambda: int(max(t)), lambda: int(t.max())),
        "sorted(t) vs sorted(t.tolist())": (lambda: sorted(t), lambda: sorted(t.tolist())),
        "[v.item() for v in t] vs t.tolist()": (lambda: [v.item() for v in t], lambda: t.tolist()),
    }
    items = list(t.float().unbind(0))  # n 0-dim tensors on the GPU
    pairs["torch.tensor(items) vs torch.stack(items)"] = (lambda: torch.tensor(items), lambda: torch.stack(items))
    topk = torch.randint(0, 50, (n, 5), device=dev)  # n rows of 5 labels
    pairs["[row.tolist() for row in topk] vs topk.tolist()"] = (lambda: [r.tolist() for r in topk], topk.tolist)
    rows = []
    for name, (as_written, fix) in pairs.items():
        times = _time({"fix": fix, "as_written": as_written}, reps)
        rows.append({"case": f"{name}, {n} int64 elements", **times, "ratio": times["as_written"] / times["fix"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    return one_gpu_main(
        __doc__ or "",
        "host_sync_per_element.py",
        lambda reps: [r for n in LENGTHS for r in cases(n, "cuda:0", reps)],
        50,
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
