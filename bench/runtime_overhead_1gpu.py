"""Where the debug mode's time goes on one GPU: bench/runtime_overhead.py's launch-bound model split apart.

    python bench/runtime_overhead_1gpu.py [ROUNDS]

The launch-bound model (24 blocks d=256, batch 8x128, AdamW), both stages on cuda:0; the hop between
them is a real copy (`h.to(HOP, copy=True)`) that mpcheck is told goes to "cuda:1" (HOP: a str
subclass that FakeTwo.normalize maps to cuda:1), so the whole transfer path (ledger, CUDA events,
backward hooks) runs as it does on two GPUs. Variants, interleaved per round like the 2-GPU bench:
plain, debug, debug without transfer timing (debug-notime), and both without the hop (-nohop). Per
variant: step time (wall, with a sync) and the time until step() returns (enqueue), each against
the round's plain blocks, and the time Python's gc took per step. Then the first step of fresh
sessions (its gc too), cProfile of first and later steps, the costs of a transfer timing, and the
CPU proxy (bench/runtime_overhead_cpu.py --quick) on the same host. Without CUDA it runs on the CPU
(a smoke run: the model is made tiny). Needs no second GPU.
"""

from __future__ import annotations

import cProfile
import gc
import io
import platform
import pstats
import statistics
import subprocess
import sys
import time

import torch
from runtime_overhead import Block  # bench/ is on sys.path when this script runs
from torch import nn

import mpcheck
from mpcheck.runtime.real.devices import CudaDevices


class Hop(str):
    pass


DEV = "cuda:0" if torch.cuda.is_available() else "cpu"
HOP = Hop(DEV)
if DEV == "cpu":
    torch.cuda.synchronize = lambda *a: None
    torch.cuda.get_device_name = lambda *a: "cpu"


class FakeTwo(CudaDevices):
    def normalize(self, device_like):
        if isinstance(device_like, Hop):
            return "cuda:1"
        return super().normalize(device_like)

    def gpu_count(self):
        return 2

    def start_transfer(self, src, dst, nbytes):
        fix = {"cuda:1": DEV}
        return super().start_transfer(fix.get(src, src), fix.get(dst, dst), nbytes)


class TwoStage(nn.Module):
    def __init__(self, d, blocks):
        super().__init__()
        half = blocks // 2
        self.stage0 = nn.Sequential(*[Block(d) for _ in range(half)])
        self.stage1 = nn.Sequential(*[Block(d) for _ in range(blocks - half)])
        self.head = nn.Linear(d, 1)
        self.hop = True

    def forward(self, x):
        h = self.stage0(x)
        if self.hop:
            h = h.to(HOP, copy=True)
        return self.head(self.stage1(h))


def step(model, opt, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


GC = {"t": 0.0, "n": 0, "t0": 0.0}


def _gc_cb(phase, info):
    if phase == "start":
        GC["t0"] = time.perf_counter()
    else:
        GC["t"] += time.perf_counter() - GC["t0"]
        GC["n"] += 1


gc.callbacks.append(_gc_cb)


def time_steps(model, opt, x, y, n):
    wall, enq = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(model, opt, x, y)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        wall.append(t2 - t0)
        enq.append(t1 - t0)
    return wall, enq


def block(v, model, opt, x, y, steps):
    model.hop = not v.endswith("nohop")
    g0 = dict(GC)
    if v.startswith("plain"):
        w, e = time_steps(model, opt, x, y, steps)
        gcs = (GC["t"] - g0["t"], GC["n"] - g0["n"])
        return w, e, gcs, []
    devs = FakeTwo(time_transfers=not v.startswith("debug-notime"))
    with mpcheck.debug(model, report=None, devices=devs) as dbg:
        time_steps(model, opt, x, y, 4)  # checked steps (CLEAN_AFTER)
        g0 = dict(GC)
        w, e = time_steps(model, opt, x, y, steps)
        gcs = (GC["t"] - g0["t"], GC["n"] - g0["n"])
    return w, e, gcs, [f.code for f in dbg.findings]


def main():
    print(platform.python_version(), torch.__version__, torch.cuda.get_device_name(0))
    try:
        print([ln for ln in open("/proc/cpuinfo") if ln.startswith("model name")][0].strip())
    except Exception:
        pass
    torch.manual_seed(0)
    D, B = (256, 8) if DEV != "cpu" else (32, 2)
    model = TwoStage(D, 24).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(B, 128 if DEV != "cpu" else 8, D, device=DEV)
    y = torch.randn(B, 128 if DEV != "cpu" else 8, 1, device=DEV)
    time_steps(model, opt, x, y, 10)
    variants = ["plain", "debug", "debug-notime", "plain-nohop", "debug-nohop", "plain-again"]
    res = {v: {"wall": [], "enq": [], "gc_ms": [], "gc_n": []} for v in variants}
    rounds, steps = int(sys.argv[1]) if len(sys.argv) > 1 else 14, 20
    codes = {}
    t_start = time.perf_counter()
    for r in range(rounds):
        for v in variants if r % 2 == 0 else variants[::-1]:
            w, e, gcs, c = block(v, model, opt, x, y, steps)
            res[v]["wall"].append(statistics.median(w))
            res[v]["enq"].append(statistics.median(e))
            res[v]["gc_ms"].append(gcs[0] * 1e3 / steps)
            res[v]["gc_n"].append(gcs[1] / steps)
            codes[v] = c
    print(f"timing took {time.perf_counter() - t_start:.1f}s; findings {codes}")
    base = [(a + b) / 2 for a, b in zip(res["plain"]["wall"], res["plain-again"]["wall"])]
    base_e = [(a + b) / 2 for a, b in zip(res["plain"]["enq"], res["plain-again"]["enq"])]
    print(
        "| variant | wall ms | ratio med (min-max) | wall - plain ms | enqueue ms | enq - plain ms | gc ms/step | gc n/step |"
    )
    for v in variants:
        rw = [a / b for a, b in zip(res[v]["wall"], base)]
        dw = [(a - b) * 1e3 for a, b in zip(res[v]["wall"], base)]
        de = [(a - b) * 1e3 for a, b in zip(res[v]["enq"], base_e)]
        print(
            f"| {v} | {statistics.median(res[v]['wall']) * 1e3:.3f} | x{statistics.median(rw):.3f} "
            f"({min(rw):.3f}-{max(rw):.3f}) | {statistics.median(dw):+.3f} | "
            f"{statistics.median(res[v]['enq']) * 1e3:.3f} | {statistics.median(de):+.3f} | "
            f"{statistics.mean(res[v]['gc_ms']):.3f} | {statistics.mean(res[v]['gc_n']):.2f} |"
        )
    try:
        tail(model, opt, x, y)
    except Exception:
        import traceback

        traceback.print_exc()
    torch.cuda.synchronize()
    out = subprocess.run(
        [sys.executable, "bench/runtime_overhead_cpu.py", "--quick"], capture_output=True, text=True, timeout=60
    )
    print(out.stdout[-1500:], out.stderr[-500:])


def tail(model, opt, x, y):
    # first steps of fresh sessions
    firsts, plains, gcs = [], [], []
    prof = cProfile.Profile()
    for i in range(12):
        plains.append(time_steps(model, opt, x, y, 3)[0][1])
        with mpcheck.debug(model, report=None, devices=FakeTwo()) as dbg:
            if i >= 8:
                prof.enable()
            g0 = dict(GC)
            firsts.append(time_steps(model, opt, x, y, 1)[0][0])
            gcs.append((round((GC["t"] - g0["t"]) * 1e3, 2), GC["n"] - g0["n"]))
            if i >= 8:
                prof.disable()
            time_steps(model, opt, x, y, 5)
        if i == 0:
            print("ledger", {k: v.as_dict() for k, v in dbg.ledger.by_pair().items()})
            timer = getattr(dbg.session.devices, "_timer", None)
            print("event pools", {k: len(v) for k, v in timer._pools.items()} if timer else None)
    print(f"first step ms {[round(f * 1e3, 2) for f in firsts]} plain {statistics.median(plains) * 1e3:.2f}")
    print(f"first step ratio median x{statistics.median(firsts[:8]) / statistics.median(plains):.3f} (unprofiled 8)")
    print(f"first step gc (ms, collections) {gcs}")
    _print_prof(prof, 28, "first steps (4 sessions)")
    # steady-state profile
    with mpcheck.debug(model, report=None, devices=FakeTwo()):
        time_steps(model, opt, x, y, 4)
        prof = cProfile.Profile()
        prof.enable()
        time_steps(model, opt, x, y, 30)
        prof.disable()
    _print_prof(prof, 40, "debug steady, 30 steps")
    prof = cProfile.Profile()
    prof.enable()
    time_steps(model, opt, x, y, 30)
    prof.disable()
    _print_prof(prof, 15, "plain, 30 steps")
    # micro
    dev = torch.device(DEV)
    cd = CudaDevices()

    def _read(t):
        t.stop()
        t.end.synchronize()
        t.elapsed_ms()

    for name, fn in [
        *(
            [
                ("start_transfer+stop", lambda: cd.start_transfer(DEV, "cuda:1", 0).stop()),
                ("start+stop+read", lambda: _read(cd.start_transfer(DEV, "cuda:1", 0))),
                ("current_stream(dev)", lambda: torch.cuda.current_stream(dev)),
                ("Event(timing)", lambda: torch.cuda.Event(enable_timing=True)),
            ]
            if DEV != "cpu"
            else []
        ),
        ("is_grad_enabled", torch.is_grad_enabled),
    ]:
        n = 3000
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        print(f"micro {name}: {(time.perf_counter() - t0) / n * 1e6:.2f} us")


def _print_prof(prof, n, title):
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(n)
    print(f"==== {title}")
    print("\n".join(ln for ln in s.getvalue().splitlines() if ln.strip())[:9000])


if __name__ == "__main__":
    main()
