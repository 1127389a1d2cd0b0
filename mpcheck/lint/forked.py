"""Work on this process's data shared with forked workers, for the steps before the lint tasks.

The pre-filter's verdicts and the choice of the summaries each file needs read every file's
text and the project's modules: on torch's 2,285 files, about three seconds during which one
core of two was idle, before any lint task could start. Each file's verdict is independent
of the others', so the files are shared out: this process and `jobs - 1` forked workers take
chunks of them. A forked worker sees this process's memory as it was at the fork (the texts
already read, the pre-filter, the project's caches): the chunks name files by index only, and
only the small verdicts travel back.

Chunks are handed out from both ends: the workers from the first (the biggest files), this
process from the last, taking back every chunk no worker has started yet, so neither waits
for the other longer than one chunk. Where processes cannot start (a sandbox, no `fork`), or
a worker fails, this process does the work itself and gets the same results.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

R = TypeVar("R")

# The work of the running share_out(): set before the workers fork, which is how they see it.
_WORK: Callable[[int], Any] | None = None

CHUNKS_PER_PROCESS = 8  # small enough to balance the end, big enough to keep the hand-outs few


def _run(indices: list[int]) -> list[tuple[int, Any]]:
    assert _WORK is not None
    return [(i, _WORK(i)) for i in indices]


def share_out(work: Callable[[int], R], sizes: Sequence[int], jobs: int) -> list[R]:
    """`[work(i) for i in range(len(sizes))]`, shared between this process and `jobs - 1` forked workers
    (`sizes`: each item's cost, roughly). `work` may read anything this process holds; it must not
    change what a later step reads (a worker's changes are lost)."""
    global _WORK
    n = len(sizes)
    if jobs < 2 or n < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [work(i) for i in range(n)]
    from concurrent.futures import Future, ProcessPoolExecutor

    # Chunks of about equal cost, of neighbouring items (files of one package import the same modules:
    # what a process learns of those serves the whole chunk).
    per = max(1, sum(sizes) // (jobs * CHUNKS_PER_PROCESS))
    chunks: list[list[int]] = [[]]
    cost = 0
    for i in range(n):
        if cost >= per:
            chunks.append([])
            cost = 0
        chunks[-1].append(i)
        cost += sizes[i]
    results: dict[int, Any] = {}
    _WORK = work
    try:
        with ProcessPoolExecutor(max_workers=jobs - 1, mp_context=multiprocessing.get_context("fork")) as pool:
            futures: list[Future[list[tuple[int, Any]]]] = [pool.submit(_run, c) for c in chunks]
            for chunk, fut in zip(reversed(chunks), reversed(futures)):
                if not fut.cancel():  # a worker has it (and every chunk before it)
                    break
                results.update(_run(chunk))
            for chunk, fut in zip(chunks, futures):
                if fut.cancelled():
                    continue
                try:
                    results.update(fut.result())
                except Exception:  # noqa: BLE001  (a worker that died, or work that raised: redone here)
                    results.update(_run(chunk))
    except (OSError, RuntimeError):  # no processes here: whatever is missing is done in this process
        pass
    finally:
        _WORK = None
    return [results[i] if i in results else work(i) for i in range(n)]
