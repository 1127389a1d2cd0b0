"""The debug mode's fast path on the CPU: what a module call costs inside a call that runs unchecked.

    python bench/fast_path_cpu.py [--rounds N]

Two measurements, each plain against `mpcheck.debug()` from the session's later steps on:

- per module call: a module whose forward calls one child 100 times (child: a trivial user module,
  nn.Linear, nn.LayerNorm; input 16x32, grad on), timed in tight loops; microseconds per child
  call, debug minus plain (the fastest of 3 alternations);
- per forward: bench/runtime_overhead_cpu.py's launch-bound model (100 module calls), paired rounds
  (plain forwards, then a fresh session's: 2 steps, then forwards); microseconds per forward, debug
  minus plain, median and quartiles over the rounds. In a real model each call of the hook costs
  more than in a tight loop (caches): this is the figure a step pays.

Process CPU time, one torch thread. To compare two versions of mpcheck, run it alternately with
PYTHONPATH set to each checkout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from runtime_overhead_cpu import ProxyDevices, make, time_steps  # bench/ is on sys.path when this script runs
from torch import nn

import mpcheck


class Trivial(nn.Module):
    def forward(self, x):
        return x


class Loop(nn.Module):
    """Calls its child 100 times: the outer call runs unchecked, the child's calls take the fast path."""

    def __init__(self, child: nn.Module) -> None:
        super().__init__()
        self.child = child

    def forward(self, x):
        child = self.child
        for _ in range(100):
            child(x)
        return x


def _per_call(loops: dict[str, Loop], x: torch.Tensor) -> dict[str, float]:
    out = {}
    for name, loop in loops.items():
        runs = []
        for _ in range(7):
            t0 = time.process_time()
            for _ in range(30):
                loop(x)
            runs.append((time.process_time() - t0) / 30 / 100)
        out[name] = statistics.median(runs) * 1e6
    return out


def per_module_call() -> dict[str, float]:
    loops = {
        "trivial user module": Loop(Trivial()),
        "nn.Linear": Loop(nn.Linear(32, 32)),
        "nn.LayerNorm": Loop(nn.LayerNorm(32)),
    }
    x = torch.randn(16, 32, requires_grad=True)
    plain, debug = [], []
    for _ in range(3):
        plain.append(_per_call(loops, x))
        with mpcheck.debug(None, report=None, devices=ProxyDevices()):
            for _ in range(5):  # past CLEAN_AFTER: the signatures are ready
                for loop in loops.values():
                    loop(x)
            debug.append(_per_call(loops, x))
    return {k: min(r[k] for r in debug) - min(r[k] for r in plain) for k in loops}


def per_forward(rounds: int) -> list[float]:
    model, opt, x, y = make()
    time_steps(model, opt, x, y, 5)

    def forwards(n: int = 10) -> float:
        runs = []
        for _ in range(n):
            t0 = time.process_time()
            model(x)
            runs.append(time.process_time() - t0)
        return statistics.median(runs) * 1e6

    diffs = []
    for _ in range(rounds):
        plain = forwards()
        with mpcheck.debug(model, report=None, devices=ProxyDevices()):
            time_steps(model, opt, x, y, 2)
            debug = forwards()
        diffs.append(debug - plain)
    return diffs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15, help="paired rounds of the per-forward measurement")
    opts = ap.parse_args(argv)
    torch.set_num_threads(1)
    for name, us in per_module_call().items():
        print(f"per module call, {name}: +{us:.2f} us over plain")
    diffs = per_forward(opts.rounds)
    q = statistics.quantiles(diffs, n=4)
    print(
        f"per forward of the proxy model (100 module calls): +{statistics.median(diffs):.0f} us over plain "
        f"(quartiles {q[0]:.0f} to {q[2]:.0f}, {opts.rounds} rounds)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
