"""lint/forked.py: work on this process's data shared with forked workers gives what doing it here gives."""

from __future__ import annotations

import os
import time

import pytest

from mpcheck.lint import forked

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="workers are forked")


@needs_fork
def test_shared_out_work_gives_every_result_in_order():
    data = [f"item {i}" * (i % 7 + 1) for i in range(400)]
    # A closure over unpicklable state (a lambda): the workers see it because they are forked, not sent it.
    shape = lambda s: (len(s), s[:6])  # noqa: E731
    got = forked.share_out(lambda i: (i, shape(data[i])), [len(s) for s in data], jobs=2)
    assert got == [(i, shape(data[i])) for i in range(len(data))]


@needs_fork
def test_a_worker_takes_part_while_this_process_works_too():
    def work(i: int) -> int:
        time.sleep(0.005)  # long enough for a forked worker to start on the first chunks
        return os.getpid()

    pids = forked.share_out(work, [1] * 64, jobs=2)
    assert os.getpid() in pids  # this process took the last chunks back
    assert len(set(pids)) == 2
    assert pids[0] != os.getpid()  # the worker started from the first


@needs_fork
def test_work_that_fails_in_a_worker_is_done_again_here():
    parent = os.getpid()

    def work(i: int) -> int:
        if os.getpid() != parent:
            raise RuntimeError("a worker's failure")
        return i * i

    assert forked.share_out(work, [1000] * 64, jobs=2) == [i * i for i in range(64)]


def test_one_job_or_one_item_runs_here():
    parent = os.getpid()
    assert forked.share_out(lambda i: (i, os.getpid()), [5, 5, 5], jobs=1) == [(i, parent) for i in range(3)]
    assert forked.share_out(lambda i: (i, os.getpid()), [5], jobs=4) == [(0, parent)]
    assert forked.share_out(lambda i: i, [], jobs=4) == []


@needs_fork
def test_an_exception_of_the_work_itself_reaches_the_caller():
    def work(i: int) -> int:
        if i == 3:
            raise ValueError("item 3")
        return i

    with pytest.raises(ValueError, match="item 3"):
        forked.share_out(work, [10] * 8, jobs=2)
