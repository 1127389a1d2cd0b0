"""A program that catches a dry-run limit and then waits forever (an asyncio task whose exception is stored in
the task, the clients awaiting its futures): the dry run ends it with the limit as the stop, its line named
(mpcheck/runtime/commands/stall.py), instead of hanging until killed. Run in a subprocess: the watcher sends
the process SIGINT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

SERVER = """
import asyncio
import torch

model = torch.nn.Linear(8, 2).to("cuda:1")


async def serve(queue):
    while True:
        x, fut = await queue.get()
        fut.set_result(model(x.to("cuda:1")).softmax(-1).tolist())  # <- value


async def main():
    queue = asyncio.Queue()
    server = asyncio.create_task(serve(queue))
    fut = asyncio.get_running_loop().create_future()
    await queue.put((torch.randn(2, 8), fut))
    print(await fut)


asyncio.run(main())
"""


def test_a_limit_caught_by_an_asyncio_task_ends_the_run_with_its_message(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    out = tmp_path / "report.json"
    env = {**os.environ, "MPCHECK_STALL_AFTER_LIMIT": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "mpcheck", "dryrun", "--gpus", "2", "--backing", "meta"]
    start = time.monotonic()
    done = subprocess.run(
        [*cmd, "--output-format", "json", "-o", str(out), str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert time.monotonic() - start < 100
    assert done.returncode == 1, done.stderr
    report = json.loads(out.read_text())
    line = SERVER.splitlines().index(next(s for s in SERVER.splitlines() if "# <- value" in s)) + 1
    assert f"server.py:{line}: `.tolist()` needs the tensor's value" in report["stopped"], report["stopped"]
    assert "the program caught this, then waited without progress: ended" in done.stderr
    assert "KeyboardInterrupt" not in done.stderr  # the stop is the limit's, not an interrupt's


def test_a_program_that_ends_by_itself_is_left_alone(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import torch\nx = torch.randn(4, 4, device='cuda:0')\nprint((x @ x).shape)\n")
    env = {**os.environ, "MPCHECK_STALL_AFTER_LIMIT": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mpcheck", "dryrun", "--gpus", "2", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
