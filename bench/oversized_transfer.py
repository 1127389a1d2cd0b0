"""What MP016's advice (oversized-transfer) is worth, measured on the GPUs at hand.

    python bench/oversized_transfer.py [--reps N] [--json out.json]

Two claims, each timed against its fix:

  - enlarged before the move: a relative-position bias of shape (1, H, T, T) expanded to
    (B, H, T, T) and then moved, against moved first and expanded on the destination (both then
    added to attention scores there, so the destination's work is in both);
  - reduced after the move: 16 gradients of 4096x4096 fp32 moved whole and then checked with
    `.isfinite().all()`, against checked where they are and the one-element results moved; 64
    gradients of 512x512 concatenated on the destination for one global norm (a hand-written
    clip), against one norm per gradient where it is, stacked, and one value moved; a score matrix
    of 64x20000 copied to the host for a `topk(10)`, against the top-k taken on the GPU and its
    64x10 indices copied (run-time MP016, runtime/checks/reduced_after_move.py);
  - encoded before the move: int64 ids one-hot encoded over C classes and cast to float32, then
    moved (a protein or DNA batch encoded on the host), against the ids moved and encoded on the
    destination; and a small encoding (per-sample labels) the same way, where both cost one launch.

With two GPUs the moves go cuda:0 -> cuda:1 (peer to peer); with one, the expand case moves from
the host to cuda:0 (pageable memory, as a CPU tensor of a training script is) and the reduction
case from cuda:0 to the host. Each variant: the median of many repetitions after warm-up,
synchronized around each, variants interleaved. Needs 1 CUDA device.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys

import torch
from transfer_costs import _time  # interleaved medians, synchronized on every device (this folder)


def expanded(src: str, dst: str, batch: int, heads: int, seq: int, reps: int) -> dict:
    bias = torch.randn(1, heads, seq, seq, device=src)
    scores = torch.randn(batch, heads, seq, seq, device=dst)

    def moved_expanded():
        return scores + bias.expand(batch, -1, -1, -1).to(dst)

    def expanded_there():
        return scores + bias.to(dst).expand(batch, -1, -1, -1)

    t = _time({"fix": expanded_there, "as_written": moved_expanded}, reps)
    mib = bias.numel() * 4 / 2**20
    return {
        "case": f"bias (1,{heads},{seq},{seq}) fp32 ({mib:.0f} MiB) expanded to batch {batch}, {src} -> {dst}",
        **t,
        "ratio": t["as_written"] / t["fix"],
    }


def reduced(src: str, dst: str, tensors: int, side: int, reps: int) -> dict:
    grads = [torch.randn(side, side, device=src) for _ in range(tensors)]

    def moved_then_reduced():
        return bool(torch.stack([g.to(dst).isfinite().all() for g in grads]).all())

    def reduced_then_moved():
        return bool(torch.stack([g.isfinite().all().to(dst) for g in grads]).all())

    t = _time({"fix": reduced_then_moved, "as_written": moved_then_reduced}, reps)
    return {
        "case": f"{tensors} gradients {side}x{side} fp32, `.isfinite().all()` after vs before the move, {src} -> {dst}",
        **t,
        "ratio": t["as_written"] / t["fix"],
    }


def concat_norm(src: str, dst: str, tensors: int, side: int, reps: int) -> dict:
    grads = [torch.randn(side, side, device=src) for _ in range(tensors)]

    def concatenated_there():
        return torch.cat([g.flatten().to(dst) for g in grads]).norm()

    def norms_moved():
        return torch.stack([g.norm() for g in grads]).norm().to(dst)

    t = _time({"fix": norms_moved, "as_written": concatenated_there}, reps)
    return {
        "case": f"{tensors} gradients {side}x{side} fp32 concatenated for one norm, {src} -> {dst}",
        **t,
        "ratio": t["as_written"] / t["fix"],
    }


def topk_on_host(src: str, rows: int, cols: int, k: int, reps: int) -> dict:
    scores = torch.randn(rows, cols, device=src)

    def copied_whole():
        return scores.cpu().topk(k, dim=1).indices

    def topk_there():
        return scores.topk(k, dim=1).indices.cpu()

    t = _time({"fix": topk_there, "as_written": copied_whole}, reps)
    return {
        "case": f"scores {rows}x{cols} fp32, `topk({k})` after vs before the copy, {src} -> cpu",
        **t,
        "ratio": t["as_written"] / t["fix"],
    }


def mean_after_move(src: str, dst: str, nbytes: int, reps: int) -> dict:
    t_in = torch.randn(nbytes // 4, device=src)

    def moved_then_mean():
        return t_in.to(dst).mean()

    def mean_then_moved():
        return t_in.mean().to(dst)

    t = _time({"fix": mean_then_moved, "as_written": moved_then_mean}, reps)
    return {
        "case": f"{nbytes // 1024} KiB fp32, `.mean()` after vs before the move, {src} -> {dst}",
        **t,
        "ratio": t["as_written"] / t["fix"],
    }


def one_hot_moved(src: str, dst: str, shape: tuple[int, ...], classes: int, reps: int) -> dict:
    ids = torch.randint(0, classes, shape, device=src)

    def encoded_then_moved():
        return torch.nn.functional.one_hot(ids, classes).float().to(dst)

    def moved_then_encoded():
        return torch.nn.functional.one_hot(ids.to(dst), classes).float()

    t = _time({"fix": moved_then_encoded, "as_written": encoded_then_moved}, reps)
    kib = ids.numel() * classes * 4 / 1024
    return {
        "case": f"ids {tuple(shape)} one-hot over {classes} classes as fp32 ({kib:.0f} KiB), {src} -> {dst}",
        **t,
        "ratio": t["as_written"] / t["fix"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/oversized_transfer.py needs a CUDA device", file=sys.stderr)
        return 2
    two = torch.cuda.device_count() >= 2
    reps = args.reps
    rows = [
        expanded("cuda:0" if two else "cpu", "cuda:1" if two else "cuda:0", 32, 16, 512, reps),
        expanded("cuda:0" if two else "cpu", "cuda:1" if two else "cuda:0", 8, 16, 256, reps * 4),
        reduced("cuda:0", "cuda:1" if two else "cpu", 16, 4096, reps),
        concat_norm("cuda:0", "cuda:1" if two else "cpu", 64, 512, reps),
        topk_on_host("cuda:0", 64, 20000, 10, reps),
        # a batch of encoded sequences, and per-sample labels (a few KiB: one launch either way)
        one_hot_moved("cuda:0" if two else "cpu", "cuda:1" if two else "cuda:0", (32, 256), 21, reps),
        one_hot_moved("cuda:0" if two else "cpu", "cuda:1" if two else "cuda:0", (16,), 50, reps),
        # the run-time check's size limit (64 KiB, REPEAT_MIN_BYTES) and above, both ways over the host link
        *(
            mean_after_move(a, b, kib * 1024, reps)
            for kib in (16, 64, 1024)
            for a, b in (("cpu", "cuda:0"), ("cuda:0", "cpu"))
        ),
    ]
    gpus = f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    print(f"# oversized transfers (MP016), {datetime.date.today()}, {gpus}, torch {torch.__version__}")
    print("| case | fix (us) | as written (us) | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['fix']:.1f} | {r['as_written']:.1f} | {r['ratio']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": str(datetime.date.today()), "gpus": gpus, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
