"""Multi-process jobs on 2 real GPUs under torchrun (issue 13): `torchrun -m mpcheck run` around
PyTorch's DDP-over-a-split-model tutorial (tests/fixtures/ranks/ddp_split.py).

- 1 rank x 2 GPUs, NCCL: the split model inside DDP(device_ids=None), checked and drawn (--html).
- 2 ranks x 1 GPU each, NCCL and gloo: the DDP path across processes; each rank's report, and rank
  0's merged report equal to the ranks' numbers summed.
- 2 ranks x 1 GPU, gloo, every rank on cuda:0: MP013 on rank 1 (NCCL refuses two ranks on one GPU).
A 2 ranks x 2 GPUs job (the tutorial's own layout) needs 4 GPUs: tests/dryrun/test_ranks.py runs it
on virtual GPUs. Skipped without 2 CUDA devices (CI has none)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from mpcheck.runtime.commands.ranks import merged_path, rank_path  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
]

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "fixtures" / "ranks" / "ddp_split.py"


def _torchrun(nproc, tmp_path, *, extra_env=(), options=()):
    out = tmp_path / "report.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["MPCHECK_RANKS_DIR"] = str(tmp_path / "ranks")
    env.update(dict(extra_env))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
        + ["-m", "mpcheck", "run", "--output-format", "json", "-o", str(out), *options, str(PROGRAM)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, out


def _json(path):
    return json.loads(Path(path).read_text())


def test_one_rank_two_gpus_nccl_split_model_in_ddp(tmp_path):
    html = tmp_path / "report.html"
    proc, out = _torchrun(
        1, tmp_path, extra_env={"BACKEND": "nccl", "GPUS_PER_RANK": "2"}.items(), options=("--html", str(html))
    )
    assert proc.returncode == 0, proc.stderr
    report = _json(out)  # one process: no rank in the names
    assert report["findings"] == []
    pairs = {(p["src"], p["dst"], p["phase"]) for p in report["transfers"]["by_pair"]}
    assert {("cuda:0", "cuda:1", "forward"), ("cuda:1", "cuda:0", "backward")} <= pairs
    assert report["memory"]["cuda:0"]["params"] == 440 and report["memory"]["cuda:1"]["params"] == 220
    page = html.read_text()
    assert "cuda:0 to cuda:1, forward" in page and 'data-path="ddp.module.net1"' in page


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_two_ranks_one_gpu_each_merged_report_sums_the_ranks(tmp_path, backend):
    proc, out = _torchrun(2, tmp_path, extra_env={"BACKEND": backend, "GPUS_PER_RANK": "1"}.items())
    assert proc.returncode == 0, proc.stderr
    per_rank = [_json(rank_path(str(out), r)) for r in range(2)]
    merged = _json(merged_path(str(out)))
    assert merged["ranks"] == [0, 1] and merged["findings"] == []
    assert proc.stderr.count("merged report of 2 ranks") == 1
    for key in ("count", "bytes"):
        assert merged["transfers"]["total"][key] == sum(r["transfers"]["total"][key] for r in per_rank)
    assert set(merged["memory"]["0"]) == {"cuda:0"} and set(merged["memory"]["1"]) == {"cuda:1"}
    assert merged["memory_total"]["params"] == sum(m["params"] for r in per_rank for m in r["memory"].values())


def test_two_ranks_on_one_gpu_is_mp013_on_rank_1(tmp_path):
    proc, out = _torchrun(2, tmp_path, extra_env={"BACKEND": "gloo", "GPUS_PER_RANK": "1", "FIXED_DEVICE": "1"}.items())
    assert proc.returncode != 0  # an error-level finding
    merged = _json(merged_path(str(out)))
    stage = next(i for i, t in enumerate(PROGRAM.read_text().splitlines(), 1) if "# stage 0" in t)
    found = {(f["code"], f["line"]): f["ranks"] for f in merged["findings"]}
    assert found[("MP013", stage)] == [1]
