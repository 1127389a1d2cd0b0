"""A dry run whose program caught a dry-run limit and then stopped making progress: ended with that limit.

With `--backing meta`, code that needs a tensor's value stops with MetaValueError. A program may catch it
unknowingly: an asyncio task's exception is stored in the task, and the clients awaiting the futures it
would have resolved wait forever; a `try: ... except Exception:` around a worker does the same. The dry
run would hang until killed. So while the program runs, a watcher thread looks, twice a second, once a
limit was reached (errors.first_limit), at where the main thread is (its innermost frame's code and line):
when it has not moved for STALL_S seconds, the program is waiting on something the stopped code would have
given, and the watcher sends the process SIGINT (as Ctrl-C does); `launch.run_program` then reports the
limit as the stop, its line named, instead of the interrupt. A program that caught the limit and goes on
working moves from line to line and is left alone. MPCHECK_STALL_AFTER_LIMIT (seconds) sets STALL_S.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time
from types import TracebackType
from typing import Any

STALL_S = 20.0
STALL_ENV = "MPCHECK_STALL_AFTER_LIMIT"


def stall_seconds() -> float:
    raw = os.environ.get(STALL_ENV, "").strip()
    try:
        return float(raw) if raw else STALL_S
    except ValueError:
        return STALL_S


class StallWatch:
    """Used as `with StallWatch() as watch:` around the program's run in the main thread; `watch.fired` is the
    limit it ended the program with, or None."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = stall_seconds() if seconds is None else seconds
        self.fired: BaseException | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StallWatch:
        from mpcheck.runtime.virtual.errors import forget_limits

        forget_limits()
        if threading.current_thread() is threading.main_thread():  # interrupt_main reaches the main thread only
            self._thread = threading.Thread(target=self._watch, name="mpcheck-stall-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        from mpcheck.runtime.virtual.errors import first_limit

        main = threading.main_thread().ident
        where: Any = None
        since = time.monotonic()
        while not self._done.wait(0.5):
            limit = first_limit()
            if limit is None:
                continue
            frame = sys._current_frames().get(main) if main is not None else None
            here = (frame.f_code, frame.f_lineno) if frame is not None else None
            now = time.monotonic()
            if here != where:
                where, since = here, now
                continue
            if now - since >= self.seconds:
                self.fired = limit
                _interrupt_main()
                return


def _interrupt_main() -> None:
    """Ctrl-C for the main thread. A real signal where there are signals: a main thread blocked in `select()`
    (an idle asyncio loop) wakes only for one (`_thread.interrupt_main` waits for its next bytecode)."""
    if hasattr(signal, "pthread_kill"):
        os.kill(os.getpid(), signal.SIGINT)
    else:  # pragma: no cover - Windows
        _thread.interrupt_main()
