"""What MP019's advice (made-on-host) is worth, measured on the GPU at hand.

    python bench/made_on_host.py [--reps N] [--json out.json]

A tensor made from a shape alone on the host and moved to the GPU at once, as a training step writes it
(`torch.randn(x.shape).to(x.device)`: diffusion noise, a dropout mask, a zero state), against the same
factory given `device=`. Three sizes, two factories (randn: the host's random generator; zeros: a fill),
each followed by one use on the GPU (`x + t`), so the GPU's own work is in both. Each variant: the
median of many repetitions after warm-up, synchronized around each, variants interleaved. Needs 1 CUDA
device.
"""

from __future__ import annotations

import sys

import torch
from transfer_costs import _time, one_gpu_main  # interleaved medians, synchronized on every device (this folder)

SHAPES = ((8, 64), (8, 3, 64, 64), (8, 4, 128, 128))


def case(factory: str, shape: tuple[int, ...], dev: str, reps: int) -> dict:
    make = getattr(torch, factory)
    x = torch.randn(shape, device=dev)

    def on_host_then_moved():
        return x + make(x.shape).to(x.device)

    def made_there():
        return x + make(x.shape, device=x.device)

    t = _time({"fix": made_there, "as_written": on_host_then_moved}, reps)
    kib = x.numel() * 4 / 2**10
    return {
        "case": f"torch.{factory}{tuple(shape)} fp32 ({kib:.0f} KiB) on the host then moved, against device=",
        **t,
        "ratio": t["as_written"] / t["fix"],
    }


def main(argv: list[str] | None = None) -> int:
    return one_gpu_main(
        __doc__ or "",
        "made_on_host.py",
        lambda reps: [case(f, s, "cuda:0", reps) for f in ("randn", "zeros") for s in SHAPES],
        200,
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
