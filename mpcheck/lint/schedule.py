"""The order of a cold run's work when linted files are also imported by others.

A file that is linted and also imported by another linted file needs a libcst
tree twice: whole, to lint it, and cut to the names its importers look up, to
summarise it (lint/slices.py). Both can come from one parse, in one task, but
that task can start only once the summaries the file itself uses are made,
and the files that use its summary wait for it in turn. So the work is a graph:

    summary-only task (a module that is imported, not linted): starts at once
    lint task of a file: starts when every summary it uses is made; when others
        import the file, it makes the file's summary too, from the same parse

Summaries depend on nothing, so the graph has no cycle but that of imports:
`a` and `b` importing each other's names wait for each other. When no task can
start and a worker is idle, one lint task gives its summary away to a
summary-only task (the file is then parsed twice, as every file was before):
the one whose summary the most waiting files wait for. Linting torch's
site-packages, 382 of its 495 summarised modules are linted files too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Lint:
    """A file to lint: `waits`, the summaries (module paths) it needs first; `gives`,
    the module path whose summary its task makes too (None: none)."""

    key: Any
    waits: set[str]
    gives: str | None
    size: int
    waiters: int = field(default=0)


@dataclass
class Step:
    """What to run next: `summary`, a module path to summarise alone; or `lint`, a file
    (with `lint.gives` the summary its task makes too)."""

    summary: str | None = None
    lint: Lint | None = None


class Schedule:
    """Which task may start now; told of every summary made (`made`)."""

    def __init__(self, summaries: list[str], lints: list[Lint]) -> None:
        self._summaries = list(summaries)  # summary-only tasks not started
        self._waiting = [x for x in lints if x.waits]
        self._ready = [x for x in lints if not x.waits]
        self._by_summary: dict[str, list[Lint]] = {}
        for x in self._waiting:
            for path in x.waits:
                self._by_summary.setdefault(path, []).append(x)
        for x in lints:
            if x.gives is not None:
                x.waiters = len(self._by_summary.get(x.gives, ()))
        self.split = 0  # lint tasks that gave their summary away (a file parsed twice)

    def __bool__(self) -> bool:
        return bool(self._summaries or self._waiting or self._ready)

    def made(self, path: str) -> None:
        """The summary of `path` is made (or failed: nothing waits for it any longer)."""
        for x in self._by_summary.pop(path, ()):
            x.waits.discard(path)
            if not x.waits:
                self._waiting.remove(x)
                self._ready.append(x)

    def next(self, idle: bool) -> Step | None:
        """The task to start now; None when none may start yet. `idle`: nothing is running,
        or a worker would stay idle: then a lint task gives its summary away rather than wait."""
        if self._summaries:
            return Step(summary=self._summaries.pop())
        if self._ready:
            # Files whose summary others wait for first, then the biggest (a better balance at the end).
            best = max(range(len(self._ready)), key=lambda i: (self._ready[i].waiters, self._ready[i].size))
            return Step(lint=self._ready.pop(best))
        if not idle:
            return None
        givers = [x for x in self._waiting if x.gives is not None and x.gives in self._by_summary]
        if not givers:
            return None
        giver = max(givers, key=lambda x: (x.waiters, x.size))
        path, giver.gives = giver.gives, None
        self.split += 1
        assert path is not None
        return Step(summary=path)


def run(
    schedule: Schedule,
    prepare: Callable[[Step], Any],
    func: Callable[[Any], Any],
    done: Callable[[Any], list[str]],
    jobs: int,
) -> None:
    """Run every step of `schedule`: `func(prepare(step))`, in `jobs` worker processes when
    jobs > 1 (`prepare` runs in this process when the step starts: it sees every summary made
    by then); `done(result)` takes each result in this process and names the summaries it made."""
    if jobs > 1:
        _in_pool(schedule, prepare, func, done, jobs)  # does nothing where there can be no processes
    for step in _steps(schedule):
        for path in done(func(prepare(step))):
            schedule.made(path)


def _steps(schedule: Schedule) -> Iterator[Step]:
    while schedule:
        step = schedule.next(idle=True)
        if step is None:  # cannot happen: a waiting file waits for a summary some task makes
            raise RuntimeError("lint schedule: files wait for summaries no task makes")
        yield step


def _in_pool(
    schedule: Schedule,
    prepare: Callable[[Step], Any],
    func: Callable[[Any], Any],
    done: Callable[[Any], list[str]],
    jobs: int,
) -> None:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    ctx = multiprocessing.get_context(method)
    running: set[Future[Any]] = set()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        try:
            pool.submit(int).result()  # processes can start (not in a sandbox or a frozen app)
        except (OSError, ImportError, RuntimeError):
            return  # no step is started: run() does them all in this process
        while schedule or running:
            # One task per worker: what runs next is chosen when a worker is free, knowing more.
            while len(running) < jobs:
                step = schedule.next(idle=True)
                if step is None:
                    break
                running.add(pool.submit(func, prepare(step)))
            if not running:
                raise RuntimeError("lint schedule: files wait for summaries no task makes")
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                for path in done(fut.result()):
                    schedule.made(path)
