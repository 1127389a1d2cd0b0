"""One file's parse, started in a forked process before the summaries it needs are known.

Linting one file (an editor's run, torch's `_inductor/ir.py` alone) is three steps in
a row: choose the imported modules whose summaries can matter (`_project_modules`,
this process), summarise them (workers), then parse and analyse the file. Its libcst
parse needs no summary, so it used to run in this process while the workers
summarised, and the choice before that had one core of two to itself. Here a forked
process parses the file from the start, while this one chooses the summaries; it
then waits for them, analyses the file with the tree it holds and sends back only
the result (a libcst tree does not cross processes cheaply; a task and a result do).

Where no process can start (no `fork`, a sandbox) or the forked one dies, the file
is parsed and analysed in this process instead: the same result, later.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


def _parse_then_analyse(conn: Any, text: str, analyse: Callable[[tuple[Any, ...], Any], tuple[Any, ...]]) -> None:
    import gc

    from mpcheck import parsing

    gc.disable()  # the tree is alive until the end: a collection would only rescan it
    tree = parsing.parse_or_none(text)
    try:
        task = conn.recv()
    except EOFError:  # the run stopped before it sent the task
        return
    conn.send(analyse(task, tree))
    conn.close()


class ParseAhead:
    """`analyse(task, tree)` of one file's text, with the tree parsed in a forked process from the
    moment this is made; `result(task)` sends the task there and waits for what it gives."""

    def __init__(self, text: str, analyse: Callable[[tuple[Any, ...], Any], tuple[Any, ...]]) -> None:
        self.text, self.analyse = text, analyse
        self._conn: Any = None
        self._proc: Any = None
        if "fork" not in multiprocessing.get_all_start_methods():
            return
        ctx = multiprocessing.get_context("fork")
        try:
            self._conn, theirs = ctx.Pipe()
            self._proc = ctx.Process(target=_parse_then_analyse, args=(theirs, text, analyse), daemon=True)
            self._proc.start()
            theirs.close()
        except (OSError, RuntimeError):
            self._conn = self._proc = None

    def result(self, task: tuple[Any, ...]) -> tuple[Any, ...]:
        if self._conn is not None:
            try:
                self._conn.send(task)
                got: tuple[Any, ...] = self._conn.recv()
                self._proc.join()
                return got
            except (EOFError, OSError):  # it died (killed, out of memory): do it here
                self.close()
        from mpcheck import parsing

        return self.analyse(task, parsing.parse_or_none(self.text))

    def close(self) -> None:
        """Stop the forked process if it still runs (a run that ends before asking for the result)."""
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        if self._conn is not None:
            self._conn.close()
        self._conn = self._proc = None
