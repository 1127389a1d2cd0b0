"""Check once per signature: a module call like one already checked and found clean runs unchecked.

Device placement almost never changes after a program's first step, yet the function mode
(mode.py) costs ~3 us per torch call plus the checks themselves. A module call's *signature* is
what decides which devices its forward touches, as far as mpcheck can see from outside:

- the module itself (its placement: every placement change bumps `checker.placement_epoch`,
  which empties this cache),
- the device and dtype of each tensor argument (positional and keyword; inside lists, tuples
  and dicts too), which keyword arguments are given, and the value of each None, bool and str
  argument (`use_cache=True`, `mask=None` take other branches),
- the module's training flag, grad mode and autocast state.

A call whose signature was checked CLEAN_AFTER times before, with no finding emitted while those
ran, runs with the checking function mode (and the strict dispatch mode) stepped aside; only the module hooks and
the transfer ledger stay (see transfers.py: `Tensor.to/.cuda/.cpu/.copy_` are still recorded).
Inside such a call, a module call whose signature is ready (checked clean CLEAN_AFTER times under
the current placements: `ready`) costs one lookup, its key and the module stack's push (hooks.py; a
torch.nn leaf that the checks ran without the mode, its input on its own device, needs no key there:
its input's device is compared instead, since nothing else of the key changes how it is checked);
the first call of a new signature there brings the modes back for that call.
Every `recheck_every`-th step starts from an empty cache, so a branch taken only later in
training is checked within that many steps; `recheck_every=0` checks every call (0.1.0's way).

What it can miss: a branch inside `forward` that depends on data or on state the signature does
not hold (a Python int argument, an attribute set between steps, a random choice) and uses other
devices than the checked calls did; on real GPUs PyTorch still raises its own error there, and the
next re-check step catches it with mpcheck's message.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch

RECHECK_EVERY = 100  # steps between full re-checks, by default
RECHECK_EVERY_ENV = "MPCHECK_RECHECK_EVERY"
_SCALARS = (bool, str, type(None))
_MAX_DEPTH = 3  # containers nested deeper than this are keyed by their type alone
_PURGE_AT = 8192
# Checked calls a signature needs before it runs unchecked. Not 1: a repeat of unchanging data
# (MP011) shows only across calls, and a fresh copy of a buffer needs its provenance seen from the
# second forward on (the buffers are listed at the first transfer, the copy repeats at the third).
CLEAN_AFTER = 3


def recheck_every_from_env(default: int = RECHECK_EVERY) -> int:
    """MPCHECK_RECHECK_EVERY when set (0: every call checked), else `default`."""
    raw = os.environ.get(RECHECK_EVERY_ENV, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{RECHECK_EVERY_ENV} must be a whole number of steps, not {raw!r}") from None
    if value < 0:
        raise ValueError(f"{RECHECK_EVERY_ENV} must be 0 (check every call) or more, not {value}")
    return value


class SignatureCache:
    """The signatures of module calls checked clean, per module, since the last placement change
    or re-check step."""

    def __init__(self, checker: Any, recheck_every: int) -> None:
        self.checker = checker
        self.recheck_every = recheck_every
        self.steps = 0
        self._clean: dict[int, tuple[weakref.ref, dict[tuple, int]]] = {}
        # id(module) -> (ref, its signatures checked CLEAN_AFTER times, its path, the placement epoch
        # they were checked under, and for a torch.nn leaf run without the mode, its input's device or
        # None): what a call inside an unchecked call reads first (hooks.py's fast path: one lookup
        # instead of the namer's and this cache's; a leaf's call on that device needs no key).
        # Emptied in place, never rebound.
        # Each entry is a live module's under the current placements, so that the fast path reads it
        # without a weak reference's call or an epoch's comparison: a module's entries go when it does
        # (the callback of _ref), and the whole table at each placement change (on_invalidate).
        self.ready: dict[int, tuple[weakref.ref, set[tuple], str, int, Any]] = {}
        checker.on_invalidate.append(self.ready.clear)
        self._epoch = checker.placement_epoch
        self._gone = _dropper(self._clean, self.ready)
        self._purge_at = _PURGE_AT
        # Outermost module calls since the last backward, checked and unchecked: strict mode's
        # backward of a forward that ran all unchecked runs unchecked too (session.py).
        self.checked_roots = 0
        self.unchecked_roots = 0
        devices = checker.devices
        self._plain = checker.plain_devices
        self._device_of = devices.device_of
        self._tensor = torch.Tensor
        self._grad_enabled = torch.is_grad_enabled
        any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None)
        self._autocast = any_autocast if any_autocast is not None else _autocast_state
        self._no_torch_function = torch._C.DisableTorchFunction
        self._tf_depth = torch._C._len_torch_function_stack
        self.key = self._make_key()

    # -- lifetime ----------------------------------------------------------------------------
    def step_end(self) -> None:
        """A training step ended: every recheck_every-th one empties the cache (and the placements)."""
        self.steps += 1
        if self.recheck_every and self.steps % self.recheck_every == 0:
            self.checker.invalidate_placement()  # bumps the epoch: the cache empties at its next use

    def clear(self) -> None:
        self._clean.clear()
        self.ready.clear()

    # -- lookups ---------------------------------------------------------------------------------
    def _make_key(self) -> Any:
        """key(module, args, kwargs): the call's signature, read with the function modes off (`t.device`
        through the checking mode costs ~1.6 us a read). A closure over locals: every module call pays it."""
        tf_depth, no_torch_function = self._tf_depth, self._no_torch_function
        grad_enabled, autocast, tensor, plain = self._grad_enabled, self._autocast, self._tensor, self._plain
        add = self._add

        def key_of(module: Any, args: tuple, kwargs: dict) -> tuple:
            if plain and not kwargs and len(args) == 1:
                a = args[0]
                if isinstance(a, tensor):  # the common call, `block(x)`: its key without a list
                    return (module.training, grad_enabled(), autocast(), a.device, a.dtype)
            parts: list[Any] = [module.training, grad_enabled(), autocast()]
            for a in args:
                add(parts, a, 0)
            if kwargs:
                for name, a in kwargs.items():
                    parts.append(name)
                    add(parts, a, 0)
            return tuple(parts)

        def key(module: Any, args: tuple, kwargs: dict) -> tuple:
            if tf_depth():
                with no_torch_function():
                    return key_of(module, args, kwargs)
            return key_of(module, args, kwargs)

        return key

    def _add(self, parts: list, a: Any, depth: int) -> None:
        if isinstance(a, self._tensor):
            parts.append(a.device if self._plain else self._device_of(a))
            parts.append(a.dtype)
        elif isinstance(a, _SCALARS):
            parts.append(a)
        elif isinstance(a, (list, tuple)) and depth < _MAX_DEPTH:
            parts.append(len(a))
            for x in a:
                self._add(parts, x, depth + 1)
        elif isinstance(a, dict) and depth < _MAX_DEPTH:
            parts.append(len(a))
            for k, x in a.items():
                parts.append(k if isinstance(k, (str, int)) else type(k))
                self._add(parts, x, depth + 1)
        else:
            parts.append(type(a))

    def is_clean(self, module: Any, key: tuple) -> bool:
        """Was a call of `module` with this signature checked clean under the current placements?"""
        if self._epoch != self.checker.placement_epoch:
            self._epoch = self.checker.placement_epoch
            self.clear()
            return False
        entry = self._clean.get(id(module))
        return entry is not None and entry[0]() is module and entry[1].get(key, 0) >= CLEAN_AFTER

    def add(self, module: Any, key: tuple, path: str, leaf: Any = None) -> None:
        """A call of `module` (named `path`) with this signature ran checked and clean. leaf: the device
        of its one tensor input where it ran as a torch.nn leaf without the mode (hooks.py), else None."""
        epoch = self.checker.placement_epoch
        if self._epoch != epoch:
            return  # placements changed while the call ran: not checked under the current ones
        entry = self._clean.get(id(module))
        if entry is None or entry[0]() is not module:
            if len(self._clean) > self._purge_at:  # modules built per step must not pile up
                self._purge()
            entry = self._clean[id(module)] = (self._ref(module), {})
        count = entry[1][key] = entry[1].get(key, 0) + 1
        if count >= CLEAN_AFTER:
            ready = self.ready.get(id(module))
            if ready is None or ready[0] is not entry[0] or ready[3] != epoch:
                ready = self.ready[id(module)] = (entry[0], set(), path, epoch, leaf)
            elif leaf is not None and ready[4] is None:
                ready = self.ready[id(module)] = (*ready[:4], leaf)
            ready[1].add(key)
            if self.checker.placement_epoch != epoch:  # placements changed meanwhile (another thread)
                self.ready.pop(id(module), None)

    def _ref(self, module: Any) -> weakref.ref:
        """A weak reference to `module` whose callback drops the module's entries once it is gone (its id
        may then be another module's). One callback for all (the reference carries the id as its key): a
        fresh session's first step makes one per module, and a closure each would cost a function and
        three cells more per module (allocations that bring the garbage collector round sooner)."""
        ref = _KeyedRef(module, self._gone)
        ref.key = id(module)
        return ref

    def _purge(self) -> None:
        """Drop the entries of modules gone; both dicts are emptied and refilled in place (the
        fast path holds them)."""
        live = {k: v for k, v in self._clean.items() if v[0]() is not None}
        ready = {k: v for k, v in self.ready.items() if v[0]() is not None}
        self.clear()
        self._clean.update(live)
        self.ready.update(ready)
        self._purge_at = max(_PURGE_AT, 2 * len(self._clean))


class _KeyedRef(weakref.ref):
    """A weak reference that carries its module's id (weakref.KeyedRef without its Python-level
    __new__ and __init__: a third of the cost)."""

    __slots__ = ("key",)
    key: int


def _dropper(clean: dict, ready: dict) -> Any:
    """The callback of the cache's weak references (a _KeyedRef, keyed by the module's id): drops
    the entries of the module gone, if they are still its own. Holds the two tables, not the cache."""

    def gone(ref: Any) -> None:
        key = ref.key
        entry = clean.get(key)
        if entry is not None and entry[0] is ref:
            clean.pop(key, None)
        rec = ready.get(key)
        if rec is not None and rec[0] is ref:
            ready.pop(key, None)

    return gone


def _autocast_state() -> tuple[bool, bool]:  # pragma: no cover - a PyTorch without _is_any_autocast_enabled
    return torch.is_autocast_enabled(), torch.is_autocast_cpu_enabled()
