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
`a` and `b` importing each other's names wait for each other. Each such cycle
is broken before the run starts, at its smallest file: that lint task gives its
summary away to a summary-only task (the file is then parsed twice, the
cheapest way out). Should a worker still find nothing to start (a task that
failed), a lint task gives its summary away then, if it is no bigger than the
tasks still running (waiting for them would cost less).

The order is that of the longest chain of work first (the critical path): the
summaries the biggest files wait for, then the lint task that starts the
longest chain. Linting torch's site-packages, 382 of its 495 summarised modules
are linted files too; its two biggest files (1.4 MB, 0.5 MB) are in import
cycles, and ran last and alone until cycles were broken up front.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
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

    def __init__(self, summaries: list[str], lints: list[Lint], sizes: Mapping[str, int] | None = None) -> None:
        self._summaries = list(summaries)  # summary-only tasks not started
        self._sizes = sizes or {}  # the size of each module to summarise (characters)
        self.split = 0  # lint tasks that gave their summary away (a file parsed twice)
        # Import cycles among linted files are broken here, at their cheapest file, rather than when the
        # run has nothing else left to do (then the files of the cycle, torch's biggest among them,
        # ran last and alone).
        for x in _cycle_breakers(lints):
            assert x.gives is not None
            self._summaries.append(x.gives)
            x.gives = None
            self.split += 1
        self._waiting = [x for x in lints if x.waits]
        self._ready = [x for x in lints if not x.waits]
        self._by_summary: dict[str, list[Lint]] = {}
        for x in self._waiting:
            for path in x.waits:
                self._by_summary.setdefault(path, []).append(x)
        for x in lints:
            if x.gives is not None:
                x.waiters = len(self._by_summary.get(x.gives, ()))
        self._after = _chains(lints, self._by_summary)  # module path -> the longest work waiting for its summary

    def __bool__(self) -> bool:
        return bool(self._summaries or self._waiting or self._ready)

    def _chain(self, x: Lint) -> tuple[int, int, int]:
        return (x.size + (self._after.get(x.gives, 0) if x.gives is not None else 0), x.waiters, x.size)

    def size(self, step: Step) -> int:
        """How big a step's work is (characters of the files it parses)."""
        return step.lint.size if step.lint is not None else self._sizes.get(step.summary or "", 0)

    def made(self, path: str) -> None:
        """The summary of `path` is made (or failed: nothing waits for it any longer)."""
        for x in self._by_summary.pop(path, ()):
            x.waits.discard(path)
            if not x.waits:
                self._waiting.remove(x)
                self._ready.append(x)

    def next(self, idle: bool, budget: int | None = None) -> Step | None:
        """The task to start now; None when none may start yet. `idle`: nothing is running,
        or a worker would stay idle: then a lint task gives its summary away rather than wait.
        `budget`: other tasks are running, the smallest of them this big (characters); only a
        file no bigger gives its summary away, since parsing it twice would cost more than
        waiting for a running task to make the summaries it needs (torch's sparse/_triton_ops_meta.py,
        500 kB, was parsed twice a moment before the summary it waited for came)."""
        # The longest chain of work first (the critical path): a summary that the biggest files wait
        # for, then the lint task that starts the longest chain (its file, then the files waiting for
        # its summary). Torch's two biggest files (1.4 MB and 0.5 MB) otherwise started last.
        if self._summaries:
            best = max(range(len(self._summaries)), key=lambda i: self._after.get(self._summaries[i], 0))
            return Step(summary=self._summaries.pop(best))
        if self._ready:
            best = max(range(len(self._ready)), key=lambda i: self._chain(self._ready[i]))
            return Step(lint=self._ready.pop(best))
        if not idle:
            return None
        givers = [
            x
            for x in self._waiting
            if x.gives is not None and x.gives in self._by_summary and (budget is None or x.size <= budget)
        ]
        if not givers:
            return None
        giver = max(givers, key=lambda x: (x.waiters, x.size))
        path, giver.gives = giver.gives, None
        self.split += 1
        assert path is not None
        return Step(summary=path)


def _cycle_breakers(lints: list[Lint]) -> list[Lint]:
    """Lint tasks that should give their summary away so that no import cycle is left among those
    that make summaries: in each cycle, its smallest file (parsed twice, the cheapest way out), again
    until no cycle is left."""
    givers = {x.gives: x for x in lints if x.gives is not None}
    out: list[Lint] = []
    while True:
        # edges: a file -> the files whose summaries it waits for (those that make one)
        edges = {id(x): [givers[p] for p in x.waits if p in givers] for x in givers.values()}
        cycles = [c for c in _components(list(givers.values()), edges) if len(c) > 1]
        if not cycles:
            return out
        for component in cycles:
            cheapest = min(component, key=lambda x: (x.size, str(x.gives)))
            out.append(cheapest)
        # A cycle left is inside one of these components: the next round looks at their other files only
        # (torch: 150 rounds over all 382 files that make summaries took 0.4 s).
        left = {id(x) for component in cycles for x in component} - {id(x) for x in out}
        givers = {path: x for path, x in givers.items() if id(x) in left}


def _components(nodes: list[Lint], edges: dict[int, list[Lint]]) -> list[list[Lint]]:
    """The strongly connected components of the graph (Tarjan's algorithm, without recursion)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[Lint] = []
    on_stack: set[int] = set()
    out: list[list[Lint]] = []
    for root in nodes:
        if id(root) in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            key = id(node)
            if i == 0:
                index[key] = low[key] = len(index)
                stack.append(node)
                on_stack.add(key)
            targets = edges.get(key, [])
            if i < len(targets):
                work.append((node, i + 1))
                nxt = targets[i]
                if id(nxt) not in index:
                    work.append((nxt, 0))
                elif id(nxt) in on_stack:
                    low[key] = min(low[key], index[id(nxt)])
                continue
            if low[key] == index[key]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(id(member))
                    component.append(member)
                    if member is node:
                        break
                out.append(component)
            if work:
                parent = id(work[-1][0])
                low[parent] = min(low[parent], low[key])
    return out


def _chains(lints: list[Lint], by_summary: dict[str, list[Lint]]) -> dict[str, int]:
    """Module path -> the longest chain of lint work waiting for its summary (characters): a file
    waiting for it, that file's own waiters, and so on. An import cycle counts once."""
    after: dict[str, int] = {}
    on_path: set[str] = set()

    def chain(path: str) -> int:
        if path in after:
            return after[path]
        if path in on_path:
            return 0
        on_path.add(path)
        longest = 0
        for x in by_summary.get(path, ()):
            longest = max(longest, x.size + (chain(x.gives) if x.gives is not None else 0))
        on_path.discard(path)
        after[path] = longest
        return longest

    try:
        for path in by_summary:
            chain(path)
    except RecursionError:  # a chain of imports deeper than Python's stack: no order is worth that
        return {}
    return after


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
    running: dict[Future[Any], int] = {}  # each task's size: how long a free worker may wait for it
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        try:
            pool.submit(int).result()  # processes can start (not in a sandbox or a frozen app)
        except (OSError, ImportError, RuntimeError):
            return  # no step is started: run() does them all in this process
        while schedule or running:
            # One task per worker and one queued ahead: a worker that is done takes the queued task at
            # once instead of waiting for this process to hear of it and choose (~2 ms a task: torch's
            # 790 tasks left each worker idle 0.7 s in all); the rest is chosen later, knowing more.
            while len(running) < jobs + 1:
                # Only for a worker that would stay idle may a file give its summary away (be parsed twice).
                idle = len(running) < jobs
                step = schedule.next(idle=idle, budget=min(running.values()) if running else None)
                if step is None:
                    break
                running[pool.submit(func, prepare(step))] = schedule.size(step)
            if not running:
                raise RuntimeError("lint schedule: files wait for summaries no task makes")
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                del running[fut]
                for path in done(fut.result()):
                    schedule.made(path)
