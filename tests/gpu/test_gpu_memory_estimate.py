"""The dry run's memory estimate against the real peak of the same script on 2 GPUs (issue 12).

A 1.3B GPT-style decoder split by hand over cuda:0 / cuda:1, AdamW, batch 4 x 1024, fp32, two
training steps. Real: `torch.cuda.max_memory_allocated` per device, run plainly in a subprocess.
Estimate: `mpcheck dryrun --gpus 2 --backing meta` of the very same file, its JSON report's
"total" per device (the figure the fit check uses) and its "peak_allocated".
Goal: the fit estimate within 5% of the real peak on every device, and never more than 2% under
it (an estimate that says "fits" must be safe). Both figures are printed for the record (they are one
figure now: the simulated allocator's peak).

Ground truth of 2026-11-30 (2x H200, `torch.cuda.memory._record_memory_history`): both devices peak in
the second step's backward, cuda:0 at 15,303,279,104 B (its first block's backward, every activation
still saved) and cuda:1 at 18,365,162,496 B (the cross-entropy's backward: logits, log-probabilities and
both their gradients at once), over parameters and AdamW states. The dry run (this branch, on the CPU)
estimates 15,203,663,872 B (x0.9935) and 18,332,656,128 B (x0.9982). What it misses are allocations made
in C++ during backward that the meta kernels do not make: 100,663,360 B in 3 blocks on cuda:0 and one
33,554,432 B block on cuda:1 (sizes from the allocation history; their kernels were not identified).

Skipped without 2 CUDA devices (CI has none)."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import json
import torch
import torch.nn as nn
import torch.nn.functional as F

D, LAYERS, HEADS, VOCAB, BATCH, SEQ = 2048, 24, 16, 50257, 4, 1024


class Block(nn.Module):
    def __init__(self, dev):
        super().__init__()
        self.ln1 = nn.LayerNorm(D, device=dev)
        self.qkv = nn.Linear(D, 3 * D, device=dev)
        self.proj = nn.Linear(D, D, device=dev)
        self.ln2 = nn.LayerNorm(D, device=dev)
        self.fc = nn.Linear(D, 4 * D, device=dev)
        self.out = nn.Linear(4 * D, D, device=dev)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, d // HEADS).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        half = LAYERS // 2
        self.embed = nn.Embedding(VOCAB, D, device="cuda:0")
        self.first = nn.ModuleList(Block("cuda:0") for _ in range(half))
        self.second = nn.ModuleList(Block("cuda:1") for _ in range(LAYERS - half))
        self.ln = nn.LayerNorm(D, device="cuda:1")
        self.head = nn.Linear(D, VOCAB, bias=False, device="cuda:1")

    def forward(self, tokens):
        h = self.embed(tokens.to("cuda:0"))
        for blk in self.first:
            h = blk(h)
        h = h.to("cuda:1")
        for blk in self.second:
            h = blk(h)
        return self.head(self.ln(h))


torch.manual_seed(0)
model = Decoder()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for _ in range(2):
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten().to("cuda:1"))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print(json.dumps({f"cuda:{i}": torch.cuda.max_memory_allocated(i) for i in range(2)}))
"""


def test_dry_run_memory_estimate_matches_the_real_peak(tmp_path):
    script = tmp_path / "decoder_1p3b.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": ROOT}
    real_run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert real_run.returncode == 0, real_run.stderr[-3000:]
    real = json.loads(real_run.stdout.strip().splitlines()[-1])
    report_path = tmp_path / "report.json"
    dry_run = subprocess.run(
        [sys.executable, "-m", "mpcheck", "dryrun", "--gpus", "2", "--backing", "meta", "--output-format", "json"]
        + ["-o", str(report_path), str(script)],
        capture_output=True,
        text=True,
        env={**env, "CUDA_VISIBLE_DEVICES": ""},
        timeout=600,
    )
    assert report_path.exists(), dry_run.stderr[-3000:]
    memory = json.loads(report_path.read_text())["memory"]
    lines, off = [], []
    for dev, peak in real.items():
        total, simulated = memory[dev]["total"], memory[dev]["peak_allocated"]
        ratio = total / peak
        lines.append(f"{dev}: real {peak / 2**30:.3f} GiB, total x{ratio:.3f}, peak_allocated x{simulated / peak:.3f}")
        if not 0.98 <= ratio <= 1.05:
            off.append(dev)
    print("\n".join(lines))
    assert not off, "estimate off the real peak: " + "; ".join(lines)
