"""Work on this process's data shared with forked workers, for the steps before the lint tasks.

The pre-filter's verdicts and the choice of the summaries each file needs read every file's
text and the project's modules: on torch's 2,285 files, about three seconds during which one
core of two was idle, before any lint task could start. Each file's verdict is independent
of the others', so the files are shared out: this process and `jobs - 1` forked workers take
chunks of them. A forked worker sees this process's memory as it was at the fork (the texts
already read, the pre-filter, the project's caches): the chunks name items by index only, and
only the small results travel back.

A chunk is a run of neighbouring items (files of one package import the same modules: what a
process learns of those serves the whole chunk). Each process claims its next chunk from a
counter in shared memory when it is free, the workers from the front, this process from the
back, so all finish within one chunk of each other (a pool's queue would have handed a worker
chunks ahead, and this process would wait for them). Where processes cannot start (a sandbox,
no `fork`), or a worker fails, this process does what is missing itself: same results.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

R = TypeVar("R")

CHUNKS_PER_PROCESS = 16  # small enough to finish together, big enough to keep the claims few


class _Share:
    """The running share_out()'s work and chunks, and the shared counter: [next from the front, next from
    the back]. Set before the workers fork, which is how they see it."""

    def __init__(self, work: Callable[[int], Any], chunks: list[list[int]], ends: Any) -> None:
        self.work = work
        self.chunks = chunks
        self.ends = ends

    def claim(self, front: bool) -> list[int] | None:
        with self.ends.get_lock():
            first, last = self.ends[0], self.ends[1]
            if first > last:
                return None
            if front:
                self.ends[0] = first + 1
                return self.chunks[first]
            self.ends[1] = last - 1
            return self.chunks[last]

    def drain(self, front: bool) -> list[tuple[int, Any]]:
        out: list[tuple[int, Any]] = []
        while (chunk := self.claim(front)) is not None:
            out.extend((i, self.work(i)) for i in chunk)
        return out


_SHARE: _Share | None = None


def _drain_front() -> list[tuple[int, Any]]:
    assert _SHARE is not None
    return _SHARE.drain(front=True)


def share_out(work: Callable[[int], R], sizes: Sequence[int], jobs: int) -> list[R]:
    """`[work(i) for i in range(len(sizes))]`, shared between this process and `jobs - 1` forked workers
    (`sizes`: each item's cost, roughly). `work` may read anything this process holds; it must not
    change what a later step reads (a worker's changes are lost)."""
    global _SHARE
    n = len(sizes)
    if jobs < 2 or n < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [work(i) for i in range(n)]
    from concurrent.futures import ProcessPoolExecutor

    per = max(1, sum(sizes) // (jobs * CHUNKS_PER_PROCESS))  # chunks of about equal cost
    chunks: list[list[int]] = [[]]
    cost = 0
    for i in range(n):
        if cost >= per:
            chunks.append([])
            cost = 0
        chunks[-1].append(i)
        cost += sizes[i]
    results: dict[int, Any] = {}
    ctx = multiprocessing.get_context("fork")
    try:
        _SHARE = _Share(work, chunks, ctx.Array("l", [0, len(chunks) - 1]))
        with ProcessPoolExecutor(max_workers=jobs - 1, mp_context=ctx) as pool:
            futures = [pool.submit(_drain_front) for _ in range(jobs - 1)]
            results.update(_SHARE.drain(front=False))
            for fut in futures:
                try:
                    results.update(fut.result())
                except Exception:  # noqa: BLE001  (a worker that died, or work that raised: redone below)
                    pass
    except (OSError, RuntimeError):  # no processes (or no shared memory) here: the rest is done below
        pass
    finally:
        _SHARE = None
    return [results[i] if i in results else work(i) for i in range(n)]
