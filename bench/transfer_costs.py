"""What the transfer rules' advice is worth, measured on two GPUs.

    python bench/transfer_costs.py [--json out.json]

The performance rules (MP005 round-trip-transfer, MP006 transfer-per-layer,
MP011 repeated-transfer) each claim a cost; this script measures each claim on
the GPUs at hand, so that the docs quote numbers instead of folklore:

  - round trip: a forward that moves the activation cuda:0 -> cuda:1 -> cuda:0
    with no work on cuda:1, against the same forward without the two copies;
  - transfer per layer: 16 small blocks alternating cuda:0 / cuda:1 (15
    crossings) against the same blocks grouped 8 + 8 (1 crossing), forward and
    backward;
  - repeated transfer: an attention-style mask moved to cuda:1 on every call
    against a copy kept there once;
  - host detour: an activation moved cuda:0 -> CPU -> cuda:1 (`h.cpu().to("cuda:1")`)
    against one direct copy cuda:0 -> cuda:1 (MP005's detour form);
  - loss direction: the logits moved to the labels' GPU against the labels
    moved to the logits' GPU before the same cross-entropy (MP014's advice, forward only);
  - contiguity: a transposed (non-contiguous) tensor moved as is, against
    `.contiguous()` first (the advice mpcheck deliberately does not give);
  - logits direction (MP014, forward and backward): a loss step whose logits on cuda:1 are moved to the
    labels on cuda:0, against the labels moved to cuda:1, forward and backward;
  - constant per forward (MP011 by provenance): a causal mask built on the host and moved in every
    forward, against one kept on the device;
  - shared module (MP006): a LayerNorm shared by 16 blocks and left on cuda:0 while blocks 8-15 live
    on cuda:1 (each of those crosses twice), against one copy of it per device.

Each variant is timed as the median of many repetitions after warm-up, with a
synchronize around each repetition (wall time of the whole forward/backward),
variants interleaved so that clock drift hits them alike. Needs 2 CUDA devices.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

import torch
from torch import nn


def _sync() -> None:
    for i in range(torch.cuda.device_count()):
        torch.cuda.synchronize(i)


def _time(fns: dict, reps: int, warmup: int = 10) -> dict[str, float]:
    """Median microseconds per call of each function, interleaved."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _sync()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            _sync()
            t0 = time.perf_counter()
            fn()
            _sync()
            samples[name].append((time.perf_counter() - t0) * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def one_gpu_main(doc: str, script: str, make_rows, default_reps: int, argv: list[str] | None = None) -> int:
    """The command line of a one-GPU rule benchmark (made_on_host.py, host_sync_per_element.py): `--reps`,
    `--json`; `make_rows(reps)` gives rows with `case`, `as_written` and `fix` (us) and `ratio`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--reps", type=int, default=default_reps)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print(f"{script} needs a CUDA device", file=sys.stderr)
        return 2
    rows = make_rows(args.reps)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {datetime.date.today()}")
    for r in rows:
        print(f"{r['case']}: {r['as_written']:.1f} us against {r['fix']:.1f} us, x{r['ratio']:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


def _block(d: int, device: str) -> nn.Module:
    return nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU()).to(device)


def round_trip(d: int, rows: int, reps: int) -> dict:
    a, b = _block(d, "cuda:0"), _block(d, "cuda:0")
    x = torch.randn(rows, d, device="cuda:0")

    def plain():
        with torch.no_grad():
            b(a(x))

    def with_round_trip():
        with torch.no_grad():
            h = a(x).to("cuda:1")
            b(h.to("cuda:0"))

    t = _time({"plain": plain, "round_trip": with_round_trip}, reps)
    return {"case": f"round trip, {rows}x{d} fp32", **t, "ratio": t["round_trip"] / t["plain"]}


def per_layer(d: int, rows: int, layers: int, reps: int) -> dict:
    alternating = [_block(d, f"cuda:{i % 2}") for i in range(layers)]
    grouped = [_block(d, f"cuda:{0 if i < layers // 2 else 1}") for i in range(layers)]
    x = torch.randn(rows, d, device="cuda:0", requires_grad=True)

    def run(blocks):
        def step():
            h = x
            for blk in blocks:
                dev = next(blk.parameters()).device
                if h.device != dev:
                    h = h.to(dev)
                h = blk(h)
            h.sum().backward()

        return step

    t = _time({"grouped": run(grouped), "alternating": run(alternating)}, reps)
    return {
        "case": f"{layers} blocks {rows}x{d}, fwd+bwd: alternating ({layers - 1} crossings) vs grouped (1)",
        **t,
        "ratio": t["alternating"] / t["grouped"],
    }


def repeated(seq: int, reps: int) -> dict:
    mask0 = torch.ones(seq, seq, device="cuda:0").tril_()
    mask1 = mask0.to("cuda:1")  # the copy kept once
    scores = torch.randn(8, seq, seq, device="cuda:1")

    def every_call():
        with torch.no_grad():
            scores.masked_fill(mask0.to("cuda:1") == 0, float("-inf"))

    def kept():
        with torch.no_grad():
            scores.masked_fill(mask1 == 0, float("-inf"))

    t = _time({"kept": kept, "every_call": every_call}, reps)
    return {"case": f"mask {seq}x{seq} fp32 moved on every call vs kept", **t, "ratio": t["every_call"] / t["kept"]}


def host_detour(rows: int, d: int, reps: int) -> dict:
    x = torch.randn(rows, d, device="cuda:0")

    def direct():
        x.to("cuda:1")

    def through_host():
        x.cpu().to("cuda:1")

    t = _time({"direct": direct, "through_host": through_host}, reps)
    return {
        "case": f"{rows}x{d} fp32 cuda:0 -> cuda:1 direct vs through the CPU",
        **t,
        "ratio": t["through_host"] / t["direct"],
    }


def loss_direction(rows: int, vocab: int, reps: int) -> dict:
    logits = torch.randn(rows, vocab, device="cuda:1")
    labels = torch.randint(0, vocab, (rows,), device="cuda:0")
    loss = nn.CrossEntropyLoss()

    def labels_to_logits():
        with torch.no_grad():
            loss(logits, labels.to(logits.device))

    def logits_to_labels():
        with torch.no_grad():
            loss(logits.to(labels.device), labels)

    t = _time({"labels_to_logits": labels_to_logits, "logits_to_labels": logits_to_labels}, reps)
    return {
        "case": f"cross-entropy on {rows}x{vocab} fp32 logits: labels moved vs logits moved",
        **t,
        "ratio": t["logits_to_labels"] / t["labels_to_logits"],
    }


def contiguity(n: int, reps: int) -> dict:
    x = torch.randn(n, n, device="cuda:0").t()  # a transposed view: non-contiguous

    def as_is():
        x.to("cuda:1")

    def contiguous_first():
        x.contiguous().to("cuda:1")

    t = _time({"as_is": as_is, "contiguous_first": contiguous_first}, reps)
    return {"case": f"transposed {n}x{n} fp32 to cuda:1", **t, "ratio": t["contiguous_first"] / t["as_is"]}


def logits_direction(rows: int, vocab: int, reps: int) -> dict:
    head = nn.Linear(256, vocab).to("cuda:1")
    h = torch.randn(rows, 256, device="cuda:1")
    labels0 = torch.randint(0, vocab, (rows,), device="cuda:0")  # where the data loader put them

    def labels_move():
        nn.functional.cross_entropy(head(h), labels0.to("cuda:1")).backward()

    def logits_move():
        nn.functional.cross_entropy(head(h).to("cuda:0"), labels0).backward()

    t = _time({"labels_move": labels_move, "logits_move": logits_move}, reps)
    return {
        "case": f"loss on {rows}x{vocab} fp32 logits (cuda:1), fwd+bwd: logits to the labels vs labels to the logits",
        **t,
        "ratio": t["logits_move"] / t["labels_move"],
    }


def constant_per_forward(seq: int, reps: int) -> dict:
    kept = torch.ones(seq, seq).tril().to("cuda:0")
    scores = torch.randn(8, seq, seq, device="cuda:0")

    def every_forward():
        with torch.no_grad():
            scores.masked_fill(torch.ones(seq, seq).tril().to("cuda:0") == 0, float("-inf"))

    def once():
        with torch.no_grad():
            scores.masked_fill(kept == 0, float("-inf"))

    t = _time({"kept": once, "every_forward": every_forward}, reps)
    return {
        "case": f"{seq}x{seq} host mask built and moved every forward vs kept on the GPU",
        **t,
        "ratio": t["every_forward"] / t["kept"],
    }


def shared_module(d: int, rows: int, layers: int, reps: int) -> dict:
    devs = [f"cuda:{0 if i < layers // 2 else 1}" for i in range(layers)]
    blocks = [nn.Linear(d, d).to(dev) for dev in devs]
    shared = nn.LayerNorm(d).to("cuda:0")
    copies = {dev: nn.LayerNorm(d).to(dev) for dev in ("cuda:0", "cuda:1")}
    x = torch.randn(rows, d, device="cuda:0", requires_grad=True)

    def run(norm_for):
        def step():
            h = x
            for blk, dev in zip(blocks, devs):
                norm, on = norm_for(dev)
                h = blk(norm(h.to(on)).to(dev))
            h.sum().backward()

        return step

    t = _time(
        {
            "per_device": run(lambda dev: (copies[dev], dev)),
            "shared_on_first": run(lambda dev: (shared, "cuda:0")),
        },
        reps,
    )
    return {
        "case": f"{layers} blocks {rows}x{d}, fwd+bwd: a LayerNorm shared on cuda:0 vs one per device",
        **t,
        "ratio": t["shared_on_first"] / t["per_device"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        print("bench/transfer_costs.py needs 2 CUDA devices; found", torch.cuda.device_count(), file=sys.stderr)
        return 2
    reps = args.reps
    rows = [
        round_trip(1024, 32, reps),
        round_trip(4096, 4096, reps // 4),
        per_layer(768, 32, 16, reps),
        per_layer(4096, 2048, 16, reps // 4),
        repeated(512, reps),
        repeated(4096, reps // 4),
        host_detour(32, 1024, reps),
        host_detour(4096, 4096, reps // 4),
        loss_direction(8 * 512, 32000, reps // 4),
        contiguity(4096, reps),
        host_detour(32, 4096, reps),
        logits_direction(2048, 32000, reps // 4),
        constant_per_forward(2048, reps // 4),
        shared_module(768, 32, 16, reps),
        shared_module(4096, 2048, 16, reps // 4),
    ]
    gpus = f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    print(f"# transfer costs, {datetime.date.today()}, {gpus}, torch {torch.__version__}")
    print("| case | without (us) | with (us) | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        base, worse = [v for k, v in r.items() if k not in ("case", "ratio")]
        print(f"| {r['case']} | {base:.1f} | {worse:.1f} | {r['ratio']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": str(datetime.date.today()), "gpus": gpus, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
