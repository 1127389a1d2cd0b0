"""How the dry run scales: a ~7B decoder on 4 virtual GPUs (meta backing), and its cost with CPU backing.

    /tmp/venv/bin/python bench/dryrun_scale.py            # the whole table
    /tmp/venv/bin/python bench/dryrun_scale.py --quick    # smaller CPU model, fewer repeats

Rows:
- meta 7B built on the CPU then moved (`Block().to(dev)`, the usual way), the same on 4 virtual GPUs;
  goal <= 10 s, <= 1 GiB. With meta backing the CPU tensors are shapes only too.
- meta 70B: a Llama-2-70B-shaped decoder (80 layers, d=8192, GQA 64/8 heads, batch 1 x 256) built on
  the CPU then moved, over 8 virtual GPUs; goal <= 60 s, <= 2 GiB, and each device's weights +
  gradients + AdamW states within 5% of the arithmetic (both printed).
- meta 7B: a Llama-7B-shaped decoder (d=4096, 32 layers, SwiGLU 11008, vocab 32000, 6.7B
  parameters) split by hand over cuda:0..3, built directly on the virtual devices, one
  forward + backward + AdamW step, batch 1 x 2048 tokens, meta backing. Goal: <= 10 s wall and
  <= 1 GiB peak RSS (whole process, torch import included), on a 2-core machine without GPU.
- cpu backing: the same code with a decoder small enough for a CPU, run plainly on the CPU
  (every stage on "cpu") and under the dry run (stages on cuda:0..3, CPU backing), in one
  process with one thread; median CPU time per step of each (the first step, which pays
  one-time costs, left out), their ratio (goal <= 1.6x) and whether every step's loss is
  bit-identical.

Each row runs in a fresh subprocess, so the 7B row's peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

LLAMA_7B = dict(d=4096, layers=32, ffn=11008, vocab=32000, heads=32, batch=1, seq=2048)
# Llama-2-70B's shape: 80 layers, d=8192, grouped-query attention (64 query heads, 8 key/value heads).
LLAMA_70B = dict(d=8192, layers=80, ffn=28672, vocab=32000, heads=64, kv_heads=8, batch=1, seq=256)
SMALL = dict(d=256, layers=8, ffn=688, vocab=4000, heads=4, batch=4, seq=128)
QUICK = dict(d=128, layers=4, ffn=344, vocab=2000, heads=4, batch=4, seq=64)


def build(cfg: dict, devices: list[str], *, on_cpu: bool = False):
    """on_cpu: each part built on the CPU, then moved (`Block().to(dev)`), the usual way of writing it."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def place(dev: str) -> dict:
        return {} if on_cpu else {"device": dev}

    def moved(module: nn.Module, dev: str) -> nn.Module:
        return module.to(dev) if on_cpu else module

    class Block(nn.Module):
        def __init__(self, dev: str) -> None:
            super().__init__()
            d, f = cfg["d"], cfg["ffn"]
            self.heads = cfg["heads"]
            self.kv_heads = cfg.get("kv_heads", self.heads)
            kv = d // self.heads * self.kv_heads
            self.norm1 = nn.RMSNorm(d, **place(dev))
            self.qkv = nn.Linear(d, d + 2 * kv, bias=False, **place(dev))
            self.proj = nn.Linear(d, d, bias=False, **place(dev))
            self.norm2 = nn.RMSNorm(d, **place(dev))
            self.gate = nn.Linear(d, f, bias=False, **place(dev))
            self.up = nn.Linear(d, f, bias=False, **place(dev))
            self.down = nn.Linear(f, d, bias=False, **place(dev))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            hd = d // self.heads
            q, k, v = self.qkv(self.norm1(x)).split([d, hd * self.kv_heads, hd * self.kv_heads], dim=-1)
            q = q.view(b, t, self.heads, hd).transpose(1, 2)
            k = k.view(b, t, self.kv_heads, hd).transpose(1, 2)
            v = v.view(b, t, self.kv_heads, hd).transpose(1, 2)
            gqa = {"enable_gqa": True} if self.kv_heads != self.heads else {}
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            h = self.norm2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Decoder(nn.Module):
        """Split by hand: embedding and the first blocks on devices[0], ..., head on devices[-1]."""

        def __init__(self) -> None:
            super().__init__()
            n = len(devices)
            per = cfg["layers"] // n
            self.devices = devices
            self.embed = moved(nn.Embedding(cfg["vocab"], cfg["d"], **place(devices[0])), devices[0])
            self.stages = nn.ModuleList(
                nn.ModuleList(moved(Block(devices[s]), devices[s]) for _ in range(per)) for s in range(n)
            )
            self.norm = moved(nn.RMSNorm(cfg["d"], **place(devices[-1])), devices[-1])
            self.head = moved(nn.Linear(cfg["d"], cfg["vocab"], bias=False, **place(devices[-1])), devices[-1])

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            h = self.embed(tokens.to(self.devices[0]))
            for dev, stage in zip(self.devices, self.stages):
                h = h.to(dev)  # one transfer per stage boundary
                for block in stage:
                    h = block(h)
            return self.head(self.norm(h))

    return Decoder()


def train_steps(
    cfg: dict, devices: list[str], steps: int, seed: int = 0, *, on_cpu: bool = False
) -> tuple[list[float], list[float], int]:
    """(losses, CPU seconds per step, parameter count). CPU time, not wall: this machine is shared,
    and a single-threaded step's CPU time does not move with other processes' load."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    model = build(cfg, devices, on_cpu=on_cpu)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(seed + 1)
    losses, times = [], []
    for _ in range(steps):
        tokens = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), generator=gen)
        t0 = time.process_time()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten().to(logits.device))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.process_time() - t0)
        losses.append(loss)
    return losses, times, n_params


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


# -- scenarios, each run in its own process ------------------------------------------------
def scenario_meta(kind: str) -> dict:
    """meta7b: built on the devices; meta7b-cpu: built on the CPU, then moved; meta70b-cpu: 70B so, 8 GPUs."""
    cfg, gpus = (LLAMA_70B, 8) if kind == "meta70b-cpu" else (LLAMA_7B, 4)
    t0 = time.perf_counter()
    c0 = time.process_time()
    import mpcheck

    with mpcheck.dryrun(gpus=gpus, backing="meta", device_memory="80GiB", report=None) as dr:
        t1 = time.perf_counter()
        devices = [f"cuda:{i}" for i in range(gpus)]
        _, times, n_params = train_steps(cfg, devices, steps=1, on_cpu=kind.endswith("-cpu"))
        t2 = time.perf_counter()
    mem = dr.memory
    return {
        "arithmetic": arithmetic(cfg, gpus),
        "params": n_params,
        "build_and_step_s": t2 - t1,
        "step_s": times[0],
        "process_s": time.perf_counter() - t0,
        "process_cpu_s": time.process_time() - c0,
        "peak_rss": peak_rss_bytes(),
        "findings": len(dr.findings),
        "memory": mem,
        "transfers": dr.ledger.total().count,
    }


def arithmetic(cfg: dict, gpus: int) -> dict[str, int]:
    """Per device, fp32 with AdamW: parameters x 16 bytes (weights, gradients, two optimizer states),
    counted by hand from the shapes build() uses."""
    d, f, v = cfg["d"], cfg["ffn"], cfg["vocab"]
    kv = d // cfg["heads"] * cfg.get("kv_heads", cfg["heads"])
    block = 2 * d + d * (d + 2 * kv) + d * d + 3 * d * f
    per = cfg["layers"] // gpus
    counts = {f"cuda:{i}": per * block for i in range(gpus)}
    counts["cuda:0"] += v * d  # embedding
    counts[f"cuda:{gpus - 1}"] += d + v * d  # final norm, head
    return {dev: 16 * n for dev, n in counts.items()}


def scenario_cpu(cfg_name: str, steps: int) -> dict:
    """The same training code plainly on the CPU, then under the dry run, in one process, one thread."""
    cfg = {"small": SMALL, "quick": QUICK}[cfg_name]
    import torch

    import mpcheck

    torch.set_num_threads(1)
    plain_losses, plain_times, n = train_steps(cfg, ["cpu"] * 4, steps)
    with mpcheck.dryrun(gpus=4, backing="cpu", report=None) as dr:
        dry_losses, dry_times, _ = train_steps(cfg, [f"cuda:{i}" for i in range(4)], steps)
        dry_losses = [float(x.item()) for x in dry_losses]
    return {
        "params": n,
        "plain": {"losses_hex": [float(x).hex() for x in plain_losses], "times": plain_times},
        "dry": {"losses_hex": [x.hex() for x in dry_losses], "times": dry_times},
        "findings": len(dr.findings),
    }


# Each meta row: (what, wall-clock goal in s, peak RSS goal in bytes).
META_ROWS = {
    "meta7b": ("7B decoder built on 4 virtual GPUs", 10, 2**30),
    "meta7b-cpu": ("7B decoder built on the CPU then moved (`Block().to(dev)`), 4 virtual GPUs", 10, 2**30),
    "meta70b-cpu": (
        "70B-shaped decoder (80 layers, d=8192, GQA) built on the CPU then moved, 8 virtual GPUs",
        60,
        2 * 2**30,
    ),
}


def within(meta: dict, tolerance: float) -> bool:
    """Is each device's params + grads + optimizer estimate within `tolerance` of the arithmetic?"""
    for dev, hand in meta["arithmetic"].items():
        m = meta["memory"].get(dev)
        if m is None or abs((m["params"] + m["grads"] + m["optimizer_state"]) / hand - 1) > tolerance:
            return False
    return True


def run_child(*args: str) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-W", "ignore", __file__, "--child", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"scenario {args} failed:\n{out.stderr[-3000:]}")
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["wall_s"] = time.perf_counter() - t0
    return d


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller CPU model and fewer steps")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        kind = opts.child[0]
        result = scenario_meta(kind) if kind.startswith("meta") else scenario_cpu(opts.child[1], int(opts.child[2]))
        print(json.dumps(result))
        return 0

    cfg_name, steps = ("quick", 4) if opts.quick else ("small", 6)
    metas = {kind: run_child(kind) for kind in META_ROWS}
    cpu = run_child("cpu", cfg_name, str(steps))
    plain, dry = cpu["plain"], cpu["dry"]

    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, torch {__import__('torch').__version__}")
    print()
    print("| scenario | parameters | step | whole process | peak RSS | goal | met |")
    print("|---|---|---|---|---|---|---|")
    for kind, (what, wall_goal, rss_goal) in META_ROWS.items():
        meta = metas[kind]
        ok = meta["wall_s"] <= wall_goal and meta["peak_rss"] <= rss_goal and within(meta, 0.05)
        print(
            f"| meta backing, {what}, 1 fwd+bwd+AdamW step | {meta['params'] / 1e9:.2f} B | "
            f"{meta['step_s']:.2f} s CPU (build + step {meta['build_and_step_s']:.2f} s wall) | "
            f"{meta['wall_s']:.2f} s wall, {meta['process_cpu_s']:.2f} s CPU | {gib(meta['peak_rss'])} | "
            f"<= {wall_goal} s, <= {gib(rss_goal)}, weights within 5% of the arithmetic | {'yes' if ok else 'NO'} |"
        )
    # the first step pays one-time costs (optimizer state, lazy imports): compare the rest
    p_med = statistics.median(plain["times"][1:])
    d_med = statistics.median(dry["times"][1:])
    ratio = d_med / p_med
    same = plain["losses_hex"] == dry["losses_hex"]
    print(
        f"| CPU backing vs plain CPU, {cfg_name} decoder, 1 thread, median of {steps - 1} steps | "
        f"{cpu['params'] / 1e6:.1f} M | {d_med * 1e3:.0f} ms vs {p_med * 1e3:.0f} ms CPU = {ratio:.2f}x | "
        f"{cpu['wall_s']:.1f} s wall (both runs) | - | <= 1.6x, identical losses | "
        f"{'yes' if ratio <= 1.6 and same else 'NO'} ({'bit-identical' if same else 'losses differ'}) |"
    )
    print()
    for kind, (what, _, _) in META_ROWS.items():
        meta = metas[kind]
        print(f"\n{what}: estimate per virtual GPU (params / grads / optimizer / activations / total of 80 GiB), ")
        print("and the arithmetic of params + grads + optimizer (16 bytes a parameter) against the estimate's:")
        for dev, m in meta["memory"].items():
            weights = m["params"] + m["grads"] + m["optimizer_state"]
            hand = meta["arithmetic"].get(dev, 0)
            print(
                f"  {dev}: {gib(m['params'])} / {gib(m['grads'])} / {gib(m['optimizer_state'])} / "
                f"{gib(m['activations'])} / {gib(m['total'])} {'fits' if m['fits'] else 'DOES NOT FIT'}; "
                f"weights {gib(weights)} vs arithmetic {gib(hand)} (x{weights / hand:.4f})"
            )
        print(f"  findings: {meta['findings']}; transfers in the step: {meta['transfers']}")
    print(f"findings: cpu dry run {cpu['findings']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
