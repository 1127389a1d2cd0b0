"""Reports of a multi-process job (issue 13): per-rank files, the merge, MP013, and whole jobs on CPU
(gloo, virtual GPUs): `mpcheck dryrun --nproc 2` and torchrun around `mpcheck dryrun`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpcheck.runtime.checks.ranks import RankEnv
from mpcheck.runtime.commands.ranks import merge, merged_path, rank_path, render_merged

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "fixtures" / "ranks" / "ddp_split.py"


def test_rank_env_and_the_gpus_a_rank_owns():
    assert RankEnv.from_env({}) is None
    assert RankEnv.from_env({"RANK": "0", "WORLD_SIZE": "1"}) is None  # one process: no ranks
    env = RankEnv.from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert env == RankEnv(rank=3, world_size=4, local_rank=1, local_world_size=2)
    assert env.owned(4) == [2, 3]  # the tutorial's dev0 = 2 * rank, dev1 = 2 * rank + 1 (local)
    assert env.owned(2) == [1]
    assert env.owned(1) is None  # one GPU a process (CUDA_VISIBLE_DEVICES): each owns its cuda:0
    assert env.owned(3) is None  # not dealt evenly: no ownership to check


def test_rank_in_the_file_names():
    assert rank_path("/x/report.json", 1) == "/x/report.rank1.json"
    assert rank_path("trace", 0) == "trace.rank0"
    assert merged_path("/x/report.json") == "/x/report.merged.json"


def test_a_ranks_report_on_stderr_says_whose_it_is(capsys):
    from types import SimpleNamespace

    from mpcheck.runtime.commands.ranks import announce

    env = RankEnv(rank=1, world_size=2, local_rank=1, local_world_size=2)
    announce(env, SimpleNamespace(output=None))
    announce(env, SimpleNamespace(output="report.rank1.json"))  # its own file: nothing to say
    announce(None, SimpleNamespace(output=None))  # one process
    assert capsys.readouterr().err == "mpcheck: report of rank 1 of 2\n"


def _report(findings, count, nbytes, memory):
    return {
        "findings": findings,
        "transfers": {"total": {"count": count, "bytes": nbytes, "time_ms": 0.5}},
        "memory": memory,
    }


def test_merge_dedups_findings_with_their_ranks_and_sums_the_numbers():
    f = {"code": "MP001", "path": "t.py", "line": 9, "column": 1, "message": "on cuda:0"}
    g = {"code": "MP011", "path": "t.py", "line": 4, "column": 1, "message": "copied"}
    r0 = _report([f], 10, 1000, {"cuda:0": {"params": 100, "grads": 100, "optimizer_state": 0, "activations": 7}})
    r1 = _report(
        [{**f, "message": "on cuda:2"}, g], 12, 3000, {"cuda:2": {"params": 100, "grads": 50, "optimizer_state": 8}}
    )
    m = merge({0: r0, 1: r1}, 3)
    assert [(x["code"], x["ranks"]) for x in m["findings"]] == [("MP011", [1]), ("MP001", [0, 1])]
    assert m["findings"][1]["messages"] == {"0": "on cuda:0", "1": "on cuda:2"}
    assert m["transfers"]["total"] == {"count": 22, "bytes": 4000, "time_ms": 1.0}
    assert m["memory"]["1"]["cuda:2"]["grads"] == 50
    assert m["memory_total"]["params"] == 200 and m["memory_total"]["optimizer_state"] == 8
    assert m["missing"] == [2]
    text = render_merged(m)
    assert "t.py:9:1: MP001 [ranks 0, 1] on cuda:0" in text and "no report from rank(s) 2" in text


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def _json(path):
    return json.loads(Path(path).read_text())


def _check_merged_equals_the_ranks_summed(out, world):
    per_rank = [_json(rank_path(str(out), r)) for r in range(world)]
    merged = _json(merged_path(str(out)))
    assert merged["ranks"] == list(range(world)) and merged["missing"] == []
    for key in ("count", "bytes"):
        assert merged["transfers"]["total"][key] == sum(r["transfers"]["total"][key] for r in per_rank)
    for r, rep in enumerate(per_rank):
        assert merged["transfers"]["per_rank"][str(r)]["count"] == rep["transfers"]["total"]["count"]
    for key in ("params", "grads", "activations"):
        assert merged["memory_total"][key] == sum(m.get(key, 0) for rep in per_rank for m in rep["memory"].values())
    return per_rank, merged


def _dryrun_nproc(out, *options, env=()):
    """`mpcheck dryrun --gpus 4 --nproc 2 -o out ... ddp_split.py`, json reports."""
    return subprocess.run(
        [sys.executable, "-m", "mpcheck", "dryrun", "--gpus", "4", "--nproc", "2", "--output-format", "json"]
        + ["-o", str(out), *options, str(PROGRAM)],
        env={**_env(), **dict(env)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_dryrun_nproc_runs_the_ddp_tutorial_as_two_gloo_ranks(tmp_path):
    out = tmp_path / "report.json"
    html = tmp_path / "report.html"
    proc = _dryrun_nproc(out, "--html", str(html))
    assert proc.returncode == 0, proc.stderr
    per_rank, merged = _check_merged_equals_the_ranks_summed(out, 2)
    # each rank on its own GPUs: rank r's split over cuda:2r and cuda:2r+1
    assert per_rank[1]["memory"]["cuda:0"]["params"] == 0
    assert set(merged["memory"]["0"]) == {"cuda:0", "cuda:1"}
    assert set(merged["memory"]["1"]) == {"cuda:2", "cuda:3"}
    assert merged["findings"] == []
    assert "merged report of 2 ranks" in proc.stderr
    for r in (0, 1):
        page = Path(rank_path(str(html), r)).read_text()
        assert f"cuda:{2 * r} to cuda:{2 * r + 1}, forward" in page and f"rank {r} of 2" in page


@pytest.mark.slow
def test_a_rank_on_another_ranks_gpu_is_mp013_on_that_rank_only(tmp_path):
    out = tmp_path / "report.json"
    proc = _dryrun_nproc(out, env={"FIXED_DEVICE": "1"})
    assert proc.returncode == 1, proc.stderr  # an error-level finding on rank 1
    _, merged = _check_merged_equals_the_ranks_summed(out, 2)
    stage = next(i for i, t in enumerate(PROGRAM.read_text().splitlines(), 1) if "# stage 0" in t)
    found = {(f["code"], f["line"]): f["ranks"] for f in merged["findings"]}
    assert found[("MP013", stage)] == [1]
    assert all(code == "MP013" and ranks == [1] for (code, _), ranks in found.items())
    assert "places this on cuda:0, a GPU of local rank 0; this rank owns cuda:2, cuda:3" in proc.stderr


@pytest.mark.slow
def test_torchrun_around_mpcheck_dryrun_rank0_prints_the_merged_report(tmp_path):
    out = tmp_path / "report.json"
    (tmp_path / "tmp").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        + ["-m", "mpcheck", "dryrun", "--gpus", "4", "--output-format", "json", "-o", str(out), str(PROGRAM)],
        env={**_env(), "TMPDIR": str(tmp_path / "tmp")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    _, merged = _check_merged_equals_the_ranks_summed(out, 2)
    assert set(merged["memory"]["1"]) == {"cuda:2", "cuda:3"}
    assert proc.stderr.count("merged report of 2 ranks") == 1  # rank 0 alone
    # the ranks' shared folder, in the temporary folder, went with the job (torch's own stay)
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("mpcheck")] == []
