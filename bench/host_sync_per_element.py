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
  `topk.tolist()`;
- `[i for i in range(n) if t[i] == 0]`: a comparison computed and read per indexed element (dead codes of a VQ
  codebook), against `(t == 0).nonzero().flatten().tolist()`.
Three lengths (8, 64, 512). And one model: a forward pass of an 8-layer ReLU MLP (width 1024, batch 256) whose
forward hook on each ReLU reads `(output == 0).float().mean().item()` (an activation monitor), against the same
hook keeping the value on the GPU (`.detach()`) and one `torch.stack(values).tolist()` after the pass. Each variant: the median of many repetitions after warm-up, synchronized around
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
    usage = torch.randint(0, 3, (n,), device=dev)
    pairs["[i for i in range(n) if t[i] == 0] vs (t == 0).nonzero().flatten().tolist()"] = (
        lambda: [i for i in range(n) if usage[i] == 0],
        lambda: (usage == 0).nonzero().flatten().tolist(),
    )
    rows = []
    for name, (as_written, fix) in pairs.items():
        times = _time({"fix": fix, "as_written": as_written}, reps)
        rows.append({"case": f"{name}, {n} int64 elements", **times, "ratio": times["as_written"] / times["fix"]})
    return rows


def hook_monitor_case(dev: str, reps: int) -> dict:
    """A forward pass with an `.item()` in a forward hook on each of 8 ReLUs, against values kept on the GPU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(8) for m in (torch.nn.Linear(1024, 1024), torch.nn.ReLU())]).to(dev)
    x = torch.randn(256, 1024, device=dev)
    values: list = []
    read_in_hook = [True]

    def monitor(module, inputs, output) -> None:
        dead = (output == 0).float().mean()
        values.append(dead.item() if read_in_hook[0] else dead.detach())

    for m in model:
        if isinstance(m, torch.nn.ReLU):
            m.register_forward_hook(monitor)

    def run(item: bool) -> None:
        values.clear()
        read_in_hook[0] = item
        with torch.no_grad():
            model(x)
        if not item:
            torch.stack(values).tolist()

    times = _time({"fix": lambda: run(False), "as_written": lambda: run(True)}, reps)
    return {
        "case": "forward of an 8-layer MLP (1024 wide, batch 256), a hook on each ReLU: .item() per call vs one "
        "read of the stacked values",
        **times,
        "ratio": times["as_written"] / times["fix"],
    }


def main(argv: list[str] | None = None) -> int:
    return one_gpu_main(
        __doc__ or "",
        "host_sync_per_element.py",
        lambda reps: [*(r for n in LENGTHS for r in cases(n, "cuda:0", reps)), hook_monitor_case("cuda:0", reps)],
        50,
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
