"""Threads the program starts run under the session's modes.

PyTorch keeps its mode stacks (torch function modes, dispatch modes) per thread, and a new thread starts
with none: without this, what a thread of the program does (`threading.Thread`, a `ThreadPoolExecutor`,
transformers' checkpoint-loading workers) is not checked, and under the dry run a `.to("cuda:1")` made
there reaches real CUDA. While a session is active:

- `threading.Thread.start` is patched: a thread started then runs its `run()` with the session's modes
  pushed, in the order the program's thread holds them, and popped when `run()` ends, exception or not;
- `ThreadPoolExecutor.submit` wraps the callable it is given: a task submitted during the session runs under
  them, and they are popped after it (a pool's workers wait for tasks until the pool shuts down, perhaps
  after the session, and may have started before it: they are entered per task, not per thread).

The modes are mpcheck's own only (a mode the program entered itself is per thread in PyTorch, and stays
so). A thread started before the session and still running has no modes (not covered). A thread still
running when the session ends keeps the mode objects on its stack until its `run()` ends, but each owner
retires its modes on leaving (`retire`): a retired mode passes every call through, so the thread goes on
as it would without mpcheck, and the finished session records nothing more (`busy()`: the report says
how many such threads, daemon threads left aside, and tasks there were).

Threads PyTorch starts in C++ (autograd's device threads, gloo's workers) are not Python threads and are
left alone: the autograd engine hands its threads the dispatch modes of the thread that called
`backward()` itself, and the dry run puts its function modes back where autograd runs Python code
(patches/autograd.py), in whichever thread that is.
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from mpcheck.runtime.capture.hooks import Undo, patch
from mpcheck.runtime.checks.sites import origin_site, set_origin

_tf_len = torch._C._len_torch_function_stack
_tf_at = torch._C._get_function_stack_at
_tf_push = torch._C._push_on_torch_function_stack
_tf_pop = torch._C._pop_torch_function_stack
_td_len = torch._C._len_torch_dispatch_stack


def ours(mode: Any) -> bool:
    """A mode of mpcheck's (not one the program entered)."""
    return type(mode).__module__.startswith("mpcheck.")


class ThreadModes:
    """The modes a session's threads run under, and the patches that enter them."""

    def __init__(self, function_modes: Sequence[Any], dispatch_modes: Sequence[Any]) -> None:
        self.function_modes = tuple(function_modes)
        self.dispatch_modes = tuple(dispatch_modes)
        # Called with an exception that ends a thread's run() (or a task) while the session is active.
        self.on_error: Callable[[BaseException], None] | None = None
        # Called once, in the starting thread, before the first thread (or task) is started or submitted.
        self.before_first: list[Callable[[], None]] = []
        self.active = False
        self._lock = threading.Lock()
        self._busy = 0  # runs and tasks under way under the modes
        # Backward passes in flight, per thread (get_ident() -> depth), and the lock under which they are
        # counted: see grads_readable().
        self.backward_lock = threading.RLock()
        self._in_backward: dict[int, int] = {}
        # Threads running work under the modes (daemon threads left aside), get_ident() -> depth; and the
        # thread that started the session, the one thread that reads every parameter's gradient.
        self._running: dict[int, int] = {}
        self.home = threading.get_ident()

    # -- one thread ---------------------------------------------------------------------------
    def enter(self) -> tuple[int, int] | None:
        """Push the modes in this thread; the stacks' depths before, or None when nothing was pushed (the
        session is over, there are no modes, or this thread holds them already)."""
        if not self.active or not self.function_modes:
            return None
        first = self.function_modes[0]
        n = _tf_len()
        for i in range(n):
            if _tf_at(i) is first:
                return None
        from torch.utils._python_dispatch import _push_mode

        before = (n, _td_len())
        for m in self.function_modes:
            _tf_push(m)
        for m in self.dispatch_modes:
            _push_mode(m)
        return before

    def exit(self, before: tuple[int, int]) -> None:
        """Pop what enter() pushed (down to the depths it returned)."""
        from torch.utils._python_dispatch import _pop_mode

        n_tf, n_td = before
        while _td_len() > n_td:
            _pop_mode()
        while _tf_len() > n_tf:
            _tf_pop()

    def wrap(self, fn: Callable[..., Any], *, counted: bool = True) -> Callable[..., Any]:
        """`fn`, run under the modes when called in a thread without them; called where the thread is
        started (or the task submitted), whose user's line names what the thread does when its own frames
        are all a library's (a loader's thread pool: sites.set_origin). counted: in busy() while it runs
        (a daemon thread, which the program does not wait for either, is not)."""
        while self.before_first:
            self.before_first.pop(0)()
        origin = origin_site()
        counted_now = 1 if counted else 0

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            before = self.enter()
            if before is None:
                return fn(*args, **kwargs)
            me = threading.get_ident()
            with self._lock:
                self._busy += counted_now
                if counted:
                    self._running[me] = self._running.get(me, 0) + 1
            outer = set_origin(origin)
            try:
                return fn(*args, **kwargs)
            except BaseException as e:
                if self.active and self.on_error is not None:
                    self.on_error(e)
                raise
            finally:
                set_origin(outer)
                self.exit(before)
                with self._lock:
                    self._busy -= counted_now
                    if counted:
                        depth = self._running.pop(me) - 1
                        if depth:
                            self._running[me] = depth

        return run

    def busy(self) -> int:
        """How many runs of threads (not daemon threads) and thread pool tasks entered under the session are
        still under way."""
        return self._busy

    def grads_readable(self) -> bool:
        """May this thread read `.grad` of every parameter (the memory figures do)? Only the thread that
        started the session, while no other thread runs work under it or a backward: autograd's engine
        sets a leaf's `.grad` without the GIL, and another thread's `zero_grad()` resets it while PyTorch
        may hand the GIL over; a read at that moment met a half-destroyed tensor (a crash, seen with two
        threads training at once). Call with `backward_lock` held: no backward starts until it is released."""
        me = threading.get_ident()
        if me != self.home:
            return False
        return all(t == me for t in self._in_backward) and all(t == me for t in self._running)

    # -- the patches ------------------------------------------------------------------------------
    def install(self) -> list[Undo]:
        from concurrent.futures import ThreadPoolExecutor
        from concurrent.futures.thread import _worker as pool_worker

        orig_start = threading.Thread.start
        orig_submit = ThreadPoolExecutor.submit
        modes = self

        @functools.wraps(orig_start)
        def start(thread: threading.Thread) -> None:
            # A thread pool's worker waits for tasks until its pool shuts down, perhaps long after the session:
            # its tasks are entered one by one instead (submit).
            if modes.active and "run" not in vars(thread) and getattr(thread, "_target", None) is not pool_worker:
                run = modes.wrap(thread.run, counted=not thread.daemon)

                def run_then_forget() -> None:
                    try:
                        run()
                    finally:
                        vars(thread).pop("run", None)  # the thread no longer holds the session

                thread.run = run_then_forget  # type: ignore[method-assign]
            return orig_start(thread)

        def submit(executor: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            if modes.active:
                fn = modes.wrap(fn)
            return orig_submit(executor, fn, *args, **kwargs)

        orig_backward = torch.autograd.backward

        @functools.wraps(orig_backward)  # its name and module: the faces know torch.autograd.backward by them
        def backward(*args: Any, **kwargs: Any) -> Any:
            me = threading.get_ident()
            in_backward = modes._in_backward
            with modes.backward_lock:
                in_backward[me] = in_backward.get(me, 0) + 1
            try:
                return orig_backward(*args, **kwargs)
            finally:
                with modes.backward_lock:
                    depth = in_backward.pop(me) - 1
                    if depth:
                        in_backward[me] = depth

        self.active = True
        undos = [
            patch(threading.Thread, "start", start),
            patch(ThreadPoolExecutor, "submit", submit),
            patch(torch.autograd, "backward", backward),
        ]

        def deactivate() -> None:
            self.active = False

        return [*undos, deactivate]


def retire(mode: Any) -> None:
    """After its session: `mode` passes every call through, in the threads that still hold it (it stays
    on their stacks until their run() ends). Its class is untouched; the instance's own method shadows it."""
    if mode is None:
        return
    from torch.utils._python_dispatch import TorchDispatchMode

    name = "__torch_dispatch__" if isinstance(mode, TorchDispatchMode) else "__torch_function__"
    setattr(mode, name, types.MethodType(_pass_through, mode))


def _pass_through(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
    return func(*args, **(kwargs or {}))


class grad_reads:
    """`with grad_reads(modes) as readable:` -- may this thread read every parameter's `.grad` now (see
    ThreadModes.grads_readable)? No backward of another thread starts inside the block. `modes`: the
    session's (None: no threads were entered, and nothing to guard)."""

    __slots__ = ("_modes",)

    def __init__(self, modes: ThreadModes | None) -> None:
        self._modes = modes

    def __enter__(self) -> bool:
        modes = self._modes
        if modes is None:
            return True
        modes.backward_lock.acquire()
        return modes.grads_readable()

    def __exit__(self, *exc: Any) -> None:
        if self._modes is not None:
            self._modes.backward_lock.release()
