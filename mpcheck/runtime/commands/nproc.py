"""`mpcheck dryrun --gpus G --nproc N ...`: N processes of one job on one machine, as torchrun would
start them (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the program
calls `init_process_group("gloo")`). Each is `mpcheck dryrun --gpus G ...` with the same options: it
sees all G virtual GPUs and owns G/N of them (local rank r: cuda:r*G/N ..), writes its own report
(ranks.py), and this launcher merges them once all have ended."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from typing import Any

from mpcheck.runtime.commands import ranks


def without_nproc(argv: list[str]) -> list[str]:
    """The tool's own options less --nproc (and its value)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
            continue
        if a.startswith("--nproc="):
            continue
        out.append(a)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(nproc: int, tool_argv: list[str], program_argv: list[str], opts: Any) -> int:
    """Run the N ranks, wait for all, print the merged report; the worst status of the ranks."""
    folder = tempfile.mkdtemp(prefix="mpcheck-ranks-")
    port = str(free_port())
    procs = []
    for rank in range(nproc):
        env = dict(os.environ)
        env.update(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(nproc),
                "LOCAL_WORLD_SIZE": str(nproc),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                ranks.DIR_ENV: folder,
                ranks.PARENT_ENV: "1",
            }
        )
        cmd = [sys.executable, "-m", "mpcheck", "dryrun", *without_nproc(tool_argv), *program_argv]
        procs.append(subprocess.Popen(cmd, env=env))
    statuses = [p.wait() for p in procs]
    reports = ranks.collect(folder, nproc, timeout=0)
    ranks.write_merged(ranks.merge(reports, nproc), opts)
    for f in os.listdir(folder):
        os.remove(os.path.join(folder, f))
    os.rmdir(folder)
    return max(statuses) if all(s >= 0 for s in statuses) else 1  # < 0: a rank killed by a signal
