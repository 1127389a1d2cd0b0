"""Reports of a multi-process job: one per rank, merged by rank 0 (or by `mpcheck dryrun --nproc`).

Under torchrun every process runs `mpcheck run|dryrun ... train.py` itself: each checks itself and
writes its own report, its rank in the file names (`-o report.json` -> `report.rank1.json`, the
same for --trace and --html). Each rank also leaves its json report in a folder the job's processes
share (MPCHECK_RANKS_DIR, else one in the temporary folder named after torchrun's run id, removed
once merged); rank 0, at its end, waits for the others' (MPCHECK_MERGE_TIMEOUT seconds, 60 by
default), and prints the merged summary: the findings once, with the ranks they occurred on; the transfers of each rank; the
memory of each rank and device. Its numbers are the per-rank ones summed. With `-o FILE` the merged
report is written as json beside it (`report.merged.json`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any, TextIO

from mpcheck.runtime.checks.ranks import RankEnv
from mpcheck.runtime.checks.report import fmt_bytes

DIR_ENV = "MPCHECK_RANKS_DIR"
TIMEOUT_ENV = "MPCHECK_MERGE_TIMEOUT"
PARENT_ENV = "MPCHECK_MERGED_BY_PARENT"  # set by `mpcheck dryrun --nproc`: the launcher merges, not rank 0
MEMORY_KEYS = ("params", "grads", "optimizer_state", "activations", "total", "peak_allocated")


def rank_path(path: str, rank: int) -> str:
    """`report.json` -> `report.rank1.json`; `trace` -> `trace.rank1`."""
    folder, name = os.path.split(path)
    stem, ext = os.path.splitext(name)
    return os.path.join(folder, f"{stem}.rank{rank}{ext}")


def merged_path(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f"{os.path.splitext(name)[0]}.merged.json")


def per_rank_options(opts: Any, env: RankEnv) -> None:
    """Each rank writes its own files: the rank goes into -o, --trace and --html."""
    for name in ("output", "trace", "html"):
        if getattr(opts, name, None):
            setattr(opts, name, rank_path(getattr(opts, name), env.rank))


def shared_dir() -> str:
    given = os.environ.get(DIR_ENV)
    if given:
        return given
    run = "-".join(os.environ.get(k, "") for k in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"))
    return os.path.join(tempfile.gettempdir(), f"mpcheck-ranks-{run.replace(os.sep, '_')}")


def start_rank(opts: Any) -> RankEnv | None:
    """At a rank's start: its own file names, and its report of an earlier job with the same
    folder removed (rank 0 reads the folder at its end, long after every rank started)."""
    env = RankEnv.from_env()
    if env is None:
        return None
    per_rank_options(opts, env)
    try:
        os.remove(os.path.join(shared_dir(), f"rank{env.rank}.json"))
    except OSError:
        pass
    return env


def publish(report: Mapping[str, Any], env: RankEnv, folder: str) -> None:
    """This rank's json report into the shared folder (written whole, then renamed: a reader never
    sees half of it)."""
    os.makedirs(folder, exist_ok=True)
    final = os.path.join(folder, f"rank{env.rank}.json")
    tmp = f"{final}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"rank": env.rank, "world_size": env.world_size, "report": report}, fh)
    os.replace(tmp, final)


def collect(folder: str, world_size: int, *, timeout: float) -> dict[int, dict[str, Any]]:
    """{rank: its report} for the ranks whose report arrived within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = {}
        for r in range(world_size):
            path = os.path.join(folder, f"rank{r}.json")
            try:
                with open(path, encoding="utf-8") as fh:
                    found[r] = json.load(fh)["report"]
            except (OSError, ValueError, KeyError):
                continue
        if len(found) == world_size or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def merge(reports: Mapping[int, Mapping[str, Any]], world_size: int) -> dict[str, Any]:
    """One report of the job: findings de-duplicated (code, file, line) with their ranks; transfers
    and memory per rank, and their sums."""
    findings: dict[tuple[str, str, int], dict[str, Any]] = {}
    for rank in sorted(reports):
        for f in reports[rank].get("findings") or []:
            key = (f["code"], f["path"], f["line"])
            entry = findings.get(key)
            if entry is None:
                entry = findings[key] = {**f, "ranks": [], "messages": {}}
            entry["ranks"].append(rank)
            entry["messages"][str(rank)] = f["message"]
    transfers: dict[str, dict[str, Any]] = {}
    count, nbytes, time_ms = 0, 0, 0.0
    for rank in sorted(reports):
        t = (reports[rank].get("transfers") or {}).get("total") or {}
        transfers[str(rank)] = {
            "count": int(t.get("count", 0)),
            "bytes": int(t.get("bytes", 0)),
            "time_ms": t.get("time_ms"),
        }
        count += int(t.get("count", 0))
        nbytes += int(t.get("bytes", 0))
        time_ms += t.get("time_ms") or 0.0
    total = {"count": count, "bytes": nbytes, "time_ms": time_ms}
    memory: dict[str, dict[str, dict[str, int]]] = {}
    memory_total: dict[str, int] = dict.fromkeys(MEMORY_KEYS, 0)
    for rank in sorted(reports):
        per_dev = {}
        for dev, m in sorted((reports[rank].get("memory") or {}).items()):
            kept = {k: int(m[k]) for k in MEMORY_KEYS if k in m}
            if not any(kept.values()):
                continue
            per_dev[dev] = kept
            for k, v in kept.items():
                memory_total[k] += v
        memory[str(rank)] = per_dev
    return {
        "world_size": world_size,
        "ranks": sorted(reports),
        "missing": [r for r in range(world_size) if r not in reports],
        "findings": sorted(findings.values(), key=lambda f: (f["path"], f["line"], f["code"])),
        "transfers": {"per_rank": transfers, "total": {**total, "time_ms": round(total["time_ms"], 6)}},
        "memory": memory,
        "memory_total": memory_total,
    }


def _ranks(ranks: list[int], world: int) -> str:
    return (
        "all ranks"
        if len(ranks) == world and world > 1
        else "rank" + ("s " if len(ranks) > 1 else " ") + ", ".join(map(str, ranks))
    )


def render_merged(m: Mapping[str, Any]) -> str:
    world = m["world_size"]
    lines = [f"mpcheck: merged report of {world} ranks"]
    if m["missing"]:
        lines.append(f"  no report from rank(s) {', '.join(map(str, m['missing']))} (stopped, or past the wait)")
    if m["findings"]:
        for f in m["findings"]:
            lines.append(
                f"{f['path']}:{f['line']}:{f['column']}: {f['code']} [{_ranks(f['ranks'], world)}] {f['message']}"
            )
    else:
        lines.append("No device findings on any rank.")
    t = m["transfers"]
    lines.append("Transfers per rank:")
    for rank, row in t["per_rank"].items():
        ms = f", {row['time_ms']:.3f} ms" if row["time_ms"] is not None else ""
        lines.append(f"  rank {rank:<4} {row['count']:>8} transfers {fmt_bytes(row['bytes']):>10}{ms}")
    tot = t["total"]
    lines.append(f"  {'all':<9} {tot['count']:>8} transfers {fmt_bytes(tot['bytes']):>10}, {tot['time_ms']:.3f} ms")
    lines.append("Memory per rank and device (params / grads / optimizer / activations or peak):")
    for rank, devs in m["memory"].items():
        for dev, d in devs.items():
            last = d.get("activations", d.get("peak_allocated", 0))
            lines.append(
                f"  rank {rank:<4} {dev:<8} {fmt_bytes(d.get('params', 0)):>10} {fmt_bytes(d.get('grads', 0)):>10} "
                f"{fmt_bytes(d.get('optimizer_state', 0)):>10} {fmt_bytes(last):>10}"
            )
    mt = m["memory_total"]
    lines.append(
        f"  {'all':<14} {fmt_bytes(mt['params']):>10} {fmt_bytes(mt['grads']):>10} {fmt_bytes(mt['optimizer_state']):>10}"
    )
    return "\n".join(lines) + "\n"


def announce(env: RankEnv | None, opts: Any) -> None:
    """Before a rank's report on stderr: which rank's it is (the ranks' reports share the terminal)."""
    if env is not None and not getattr(opts, "output", None):
        print(f"mpcheck: report of rank {env.rank} of {env.world_size}", file=sys.stderr)


def finish_rank(report: Mapping[str, Any], env: RankEnv, opts: Any, stream: TextIO | None = None) -> None:
    """At a rank's end: publish its report; rank 0 (unless a launcher merges) waits for the others and
    prints the merged summary (and writes it as json beside -o)."""
    folder = shared_dir()
    publish(report, env, folder)
    if env.rank != 0 or os.environ.get(PARENT_ENV):
        return
    timeout = float(os.environ.get(TIMEOUT_ENV, "60"))
    reports = collect(folder, env.world_size, timeout=timeout)
    write_merged(merge(reports, env.world_size), opts, stream)
    if not os.environ.get(DIR_ENV):
        remove_shared(folder, reports)


def remove_shared(folder: str, reports: Mapping[int, Any]) -> None:
    """The folder mpcheck chose in the temporary folder goes once merged (a folder the user named
    in MPCHECK_RANKS_DIR stays theirs). A rank past the wait keeps its file, and so the folder."""
    for rank in reports:
        try:
            os.remove(os.path.join(folder, f"rank{rank}.json"))
        except OSError:
            pass
    try:
        os.rmdir(folder)
    except OSError:
        pass


def write_merged(merged: Mapping[str, Any], opts: Any, stream: TextIO | None = None) -> None:
    (stream or sys.stderr).write(render_merged(merged))
    if getattr(opts, "output", None):
        base = opts.output
        with open(merged_path(_unranked(base)), "w", encoding="utf-8") as fh:
            json.dump(merged, fh, indent=2)


def _unranked(path: str) -> str:
    """`report.rank0.json` -> `report.json` (the merged report's name comes from the one given)."""
    folder, name = os.path.split(path)
    stem, ext = os.path.splitext(name)
    stem = stem.rsplit(".rank", 1)[0]
    return os.path.join(folder, stem + ext)
