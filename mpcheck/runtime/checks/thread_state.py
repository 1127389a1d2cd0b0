"""The checks' per-thread state (autograd runs backward on its own threads): the module stack,
the module calls whose inputs were off their device, the forward pass counters MP006 and MP011
read, and the suspension while mpcheck itself moves tensors.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from mpcheck.runtime.checks.arguments import Where
from mpcheck.runtime.checks.sites import Site

_serials = itertools.count(1)


class ThreadState(threading.local):
    """Per-thread state (autograd runs backward on its own threads). Set in __init__, which
    runs once in each thread: a missing attribute read with getattr(tls, name, default) raises
    and swallows an AttributeError, ~0.6 us on every op and module call."""

    def __init__(self) -> None:
        # This thread's number (get_ident() is reused by a thread started after another one ended).
        self.serial = next(_serials)
        self.suspended = 0
        self.stack: list[str] = []
        # Module calls whose inputs were off the module's device, outermost first (enter_module).
        self.entries: list[Entry] = []
        self.forwards = 0  # outermost module calls so far: a forward pass's number, for MP006
        # Module calls run checked so far (any depth): were there layers between two crossings? (MP006)
        self.module_calls = 0
        # Transfers outside any module: forward passes ended by a backward (MP006 chains per pass).
        self.top_passes = 0
        self.top_pass_over = False
        self.passes_ended = 0  # losses and backward passes seen: the model ran (MP011, recurrence.py)
        self.top_calls: set[int] = set()  # id() of the modules the current pass called outermost
        self.top_inputs: set[int] = set()  # id() of the storages of the tensors the outermost module call was given
        # > 0 while a module call of a signature checked clean runs with the modes stepped aside
        # (capture/signatures.py): transfers are then recorded by capture/transfers.py instead.
        self.unchecked = 0
        # `stack` while `unchecked` is set, else None: what the module-call fast path reads first
        # (capture/hooks.py), one thread-local read where two would be (`unchecked`, then `stack`).
        self.unchecked_stack: list[str] | None = None
        # True while capture/transfers.py records a transfer made with the modes aside: the ops that read its
        # output are not seen either (MP016 does not take it for unread, reduced_after_move.py).
        self.transfer_unseen = False
        # id() of the torch.nn leaf module that the last checked call ran without the mode (capture/hooks.py):
        # the signature cache's fast path then skips the key of its calls on the same device.
        self.leaf_bypass: int | None = None


class Entry:
    """A module call that received tensors off its device: where, and which tensors (by id;
    the call's own frame keeps them alive until leave_module() drops the entry)."""

    __slots__ = ("what", "path", "device", "site", "tensors", "module", "moved_weights")

    def __init__(
        self, what: str, path: str, device: str | None, site: Site, tensors: dict[int, tuple[Any, Where]], module: Any
    ) -> None:
        self.module = module
        self.what = what
        self.path = path
        self.device = device
        self.site = site
        self.tensors = tensors
        # Its own parameters its forward copied to its inputs' GPU: (site, bytes) each (weights_to_input.py).
        self.moved_weights: list[tuple[Site, int]] | None = None


class Suspend:
    __slots__ = ("tls",)

    def __init__(self, tls: ThreadState) -> None:
        self.tls = tls

    def __enter__(self) -> None:
        self.tls.suspended += 1

    def __exit__(self, *exc: Any) -> None:
        self.tls.suspended -= 1
