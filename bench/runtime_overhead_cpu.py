"""CPU proxy for bench/runtime_overhead.py: mpcheck's own Python cost per torch call, without a GPU.

    python bench/runtime_overhead_cpu.py [--quick] [--profile debug|strict|first]

The launch-bound model of bench/runtime_overhead.py (24 blocks, MLP 4x,
AdamW foreach, as on CUDA) made tiny (width 32, batch 2x8) so that each op
costs a few microseconds and mpcheck's Python dominates the difference. The
checks see the CPU as "cuda:0" (device names as CudaDevices gives them on a
GPU), so every op takes the same path it takes on one stage of the GPU split.

Prints, for plain / debug / strict / every-call / strict-every-call (`recheck_every=0`: every call
of every step checked): the median time of later steps (from a session's second step on, where
signatures checked clean run unchecked), the overhead per intercepted call in microseconds:
  - debug, every-call: (step - plain) / (torch-function calls + module calls) per step,
  - strict: (step - plain) / (torch-function calls + module calls + aten ops),
and the first step of a session (every call checked) against a plain step.
Variants alternate in rounds so that load on a shared machine hits them alike;
each variant's step time is its fastest round's median. Single-threaded torch, timed
in process CPU time (time.process_time), which other processes on a shared
machine disturb less than wall-clock time.

    python bench/runtime_overhead_cpu.py --first N [--steps S]

The first step of N fresh debug sessions (every call checked, every one-time cost paid), each
against the median of S plain steps timed just before it (3 unless given): the median ratio,
and the second and later steps' alike. Steadier than the table's first-step column (one first
step per round) for comparing two versions of mpcheck: alternate them, several runs each.

    python bench/runtime_overhead_cpu.py --opcodes

Python bytecodes executed in one step (plain; a fresh debug session's first, second and a later
step), mpcheck's own and the rest, and Python function calls: counted with sys.settrace, so
the same on a loaded machine as on an idle one. A count, not a time: C work (torch, dict and
set operations) weighs in only through the bytecodes that call it.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time

import torch
from runtime_overhead import Block, step  # bench/ is on sys.path when this script runs
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import mpcheck
from mpcheck.runtime.real.devices import CudaDevices


class TwoStage(nn.Module):
    """bench/runtime_overhead.py's model, both stages on the CPU (the hop between them is a
    GPU-only transfer: one per step, negligible next to the per-op cost measured here)."""

    def __init__(self, d: int, blocks: int) -> None:
        super().__init__()
        half = blocks // 2
        self.stage0 = nn.Sequential(*[Block(d) for _ in range(half)])
        self.stage1 = nn.Sequential(*[Block(d) for _ in range(blocks - half)])
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        return self.head(self.stage1(self.stage0(x)))


class ProxyDevices(CudaDevices):
    """CudaDevices, with the CPU named "cuda:0": the checks take their GPU paths."""

    def __init__(self) -> None:
        super().__init__(time_transfers=False)
        self._names[torch.device("cpu")] = "cuda:0"


def make(d=32, blocks=24, batch=2, seq=8):
    torch.manual_seed(0)
    model = TwoStage(d, blocks)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(batch, seq, d)
    y = torch.randn(batch, seq, 1)
    return model, opt, x, y


class _CountCalls(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


class _CountAten(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def count_calls(model, opt, x, y) -> dict[str, int]:
    """Per step: torch-function calls outside optimizer.step (the debug mode steps aside
    there), module calls, aten ops (strict sees them all, optimizer included)."""
    modules = [0]

    def pre(mod, args):
        modules[0] += 1

    handle = torch.nn.modules.module.register_module_forward_pre_hook(pre)
    try:
        with _CountCalls() as fm:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        with _CountAten() as dm:
            step(model, opt, x, y)
    finally:
        handle.remove()
    return {"torch_calls": fm.n, "module_calls": modules[0] // 2, "aten_ops": dm.n}


def time_steps(model, opt, x, y, n) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.process_time()
        step(model, opt, x, y)
        out.append(time.process_time() - t0)
    return out


# (strict, recheck_every) of each variant; every-call: every call of every step checked (0.1.0's way).
VARIANTS = {"debug": (False, None), "strict": (True, None), "every-call": (False, 0), "strict-every-call": (True, 0)}


def run_variant(v, model, opt, x, y, n):
    """(first step's time or None, later steps' times): a fresh session's first step checks every call."""
    if v == "plain":
        return None, time_steps(model, opt, x, y, n)
    strict, recheck_every = VARIANTS[v]
    with mpcheck.debug(model, report=None, strict=strict, recheck_every=recheck_every, devices=ProxyDevices()) as dbg:
        first = time_steps(model, opt, x, y, 1)[0]
        t = time_steps(model, opt, x, y, n)
    if dbg.findings:
        raise SystemExit(f"unexpected findings: {[f.code for f in dbg.findings]}")
    return first, t


def first_steps(model, opt, x, y, n, plain_steps) -> dict[str, float]:
    """Median over n fresh debug sessions of (first, second, later step) / the plain steps before it."""
    ratios: dict[str, list[float]] = {"first": [], "second": [], "later": []}
    for _ in range(n):
        plain = statistics.median(time_steps(model, opt, x, y, plain_steps))
        with mpcheck.debug(model, report=None, devices=ProxyDevices()) as dbg:
            first, second = time_steps(model, opt, x, y, 2)
            time_steps(model, opt, x, y, 2)
            later = statistics.median(time_steps(model, opt, x, y, plain_steps))
        if dbg.findings:
            raise SystemExit(f"unexpected findings: {[f.code for f in dbg.findings]}")
        for k, v in (("first", first), ("second", second), ("later", later)):
            ratios[k].append(v / plain)
    return {k: statistics.median(v) for k, v in ratios.items()}


def count_opcodes(model, opt, x, y) -> dict[str, tuple[int, int, int, int]]:
    """(mpcheck's bytecodes, the rest's, mpcheck's function calls, the rest's) in one step: plain, then
    a fresh session's first, second and a later step."""
    import mpcheck as pkg

    ours = pkg.__file__.rsplit("/", 1)[0] + "/"
    counts = [0, 0, 0, 0]

    def tracer(frame, event, arg):
        mine = frame.f_code.co_filename.startswith(ours)
        if event == "opcode":
            counts[0 if mine else 1] += 1
        elif event == "call":
            frame.f_trace_opcodes = True
            counts[2 if mine else 3] += 1
        return tracer

    def traced() -> tuple[int, int, int, int]:
        counts[:] = [0, 0, 0, 0]
        sys.settrace(tracer)
        try:
            step(model, opt, x, y)
        finally:
            sys.settrace(None)
        return (counts[0], counts[1], counts[2], counts[3])

    out = {"plain": traced()}
    with mpcheck.debug(model, report=None, devices=ProxyDevices()):
        out["first"] = traced()
        out["second"] = traced()
        time_steps(model, opt, x, y, 3)
        out["later"] = traced()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument(
        "--profile",
        choices=["debug", "strict", "first"],
        help="cProfile that variant's later steps (first: the first step of fresh debug sessions) instead of timing",
    )
    ap.add_argument("--first", type=int, metavar="N", help="the first step of N fresh sessions (see above)")
    ap.add_argument("--opcodes", action="store_true", help="count Python bytecodes per step (see above)")
    opts = ap.parse_args(argv)
    torch.set_num_threads(1)
    model, opt, x, y = make()
    time_steps(model, opt, x, y, 5)
    if opts.opcodes:
        print("| step | mpcheck bytecodes | other bytecodes | mpcheck calls | other calls |")
        print("|---|---|---|---|---|")
        for k, (a, b, c, d) in count_opcodes(model, opt, x, y).items():
            print(f"| {k} | {a} | {b} | {c} | {d} |")
        return 0
    if opts.first:
        r = first_steps(model, opt, x, y, opts.first, opts.steps or 3)
        print(
            f"{opts.first} fresh sessions, torch {torch.__version__}: median step / plain step: "
            f"first x{r['first']:.3f}, second x{r['second']:.3f}, later x{r['later']:.3f}"
        )
        return 0
    if opts.profile == "first":
        prof = cProfile.Profile()
        for _ in range(5):
            with mpcheck.debug(model, report=None, devices=ProxyDevices()):
                prof.enable()
                time_steps(model, opt, x, y, 1)
                prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return 0
    if opts.profile:
        with mpcheck.debug(model, report=None, strict=opts.profile == "strict", devices=ProxyDevices()):
            time_steps(model, opt, x, y, 2)
            prof = cProfile.Profile()
            prof.enable()
            time_steps(model, opt, x, y, 20)
            prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return 0
    counts = count_calls(model, opt, x, y)
    rounds = opts.rounds or (3 if opts.quick else 9)
    steps = opts.steps or (10 if opts.quick else 30)
    variants = ["plain", *VARIANTS]
    per_round = {v: [] for v in variants}
    firsts = {v: [] for v in variants}
    for _ in range(rounds):
        for v in variants:
            first, later = run_variant(v, model, opt, x, y, steps)
            per_round[v].append(statistics.median(later))
            if first is not None:
                firsts[v].append(first)
    # The fastest round: on a shared machine other processes only ever slow a round down.
    med = {v: min(ts) for v, ts in per_round.items()}
    fn_calls = counts["torch_calls"] + counts["module_calls"]
    per_op = {v: (med[v] - med["plain"]) / (fn_calls + (counts["aten_ops"] if VARIANTS[v][0] else 0)) for v in VARIANTS}
    print(
        f"CPU proxy, torch {torch.__version__}, 1 thread; per step: {counts['torch_calls']} torch calls, "
        f"{counts['module_calls']} module calls, {counts['aten_ops']} aten ops; {rounds} rounds x {steps} steps"
    )
    print("| variant | later steps: median ms | ratio | overhead us per intercepted call | first step: ratio |")
    print("|---|---|---|---|---|")
    for v in variants:
        extra = "" if v == "plain" else f"{per_op[v] * 1e6:.2f}"
        first = f"x{min(firsts[v]) / med['plain']:.3f}" if firsts[v] else ""
        print(f"| {v} | {med[v] * 1e3:.2f} | x{med[v] / med['plain']:.3f} | {extra} | {first} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
