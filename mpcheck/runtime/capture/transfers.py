"""The transfer ledger while the checking mode stands aside (a module call of a signature already
checked clean, see signatures.py). Two ways, by what sits below the checking mode:

- on real GPUs (nothing below it), `Tensor.to/.cuda/.cpu/.copy_` are wrapped for the session, and
  only while `tls.unchecked` is set do the wrappers record what the mode would have; otherwise a
  wrapper is one Python call more on a transfer, which the mode then sees (and knows by its
  `mpcheck_transfer_kind`: PyTorch hands a mode the attribute of torch.Tensor, the wrapper);
- under the dry run, whose virtual-device mode keys its tables by torch's own methods, a
  TransferMode takes the checking mode's place instead: it looks at transfers only.

Both record through the same `CheckingMode._transfer` (ledger, timing, round trips, repeats,
MP006 chains).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from mpcheck.runtime.capture.hooks import Undo, patch
from mpcheck.runtime.checks.torchapi import COPY, CPU, CUDA, TO

_METHODS = (("to", TO), ("cuda", CUDA), ("cpu", CPU), ("copy_", COPY))
KIND_ATTR = "mpcheck_transfer_kind"


def install(mode: Any) -> list[Undo]:
    """Wrap each transfer method of torch.Tensor; `mode`: the session's CheckingMode."""
    tls = mode.checker._tls
    # torch.overrides.resolve_name builds its table of names once, from torch.Tensor's attributes:
    # built while the wrappers stand there, it would name the wrappers for the rest of the process.
    torch.overrides.resolve_name(torch.Tensor.to)
    wrappers = {name: _wrap(getattr(torch.Tensor, name), kind, mode, tls) for name, kind in _METHODS}
    return [
        *(patch(torch.Tensor, name, w) for name, w in wrappers.items()),
        _allowed_on_placeholders(wrappers.values()),
    ]


def _allowed_on_placeholders(wrappers: Any) -> Undo:
    """A lazy module's parameters and buffers before its first forward (UninitializedParameter) allow only
    some of torch.Tensor's methods, `.to`, `.cuda`, `.cpu` and `.copy_` among them, checked by identity: the
    wrappers are allowed too, or `nn.LazyLinear(8).to("cuda:0")` raised under `mpcheck run`."""
    from torch.nn.parameter import UninitializedTensorMixin  # type: ignore[attr-defined]  # (not in its stubs)

    allowed = list(UninitializedTensorMixin._allowed_methods)
    return patch(UninitializedTensorMixin, "_allowed_methods", allowed + [w for w in wrappers if w not in allowed])


def _wrap(orig: Any, kind: int, mode: Any, tls: Any) -> Any:
    transfer = mode._transfer

    @functools.wraps(orig)
    def method(*args: Any, **kwargs: Any) -> Any:
        unchecked = tls.unchecked
        if not unchecked or tls.suspended:
            return orig(*args, **kwargs)
        stack = tls.unchecked_stack
        tls.unchecked = 0  # the calls made inside are not the user's
        tls.unchecked_stack = None
        tls.transfer_unseen = True
        try:
            return transfer(kind, orig, args, kwargs)
        finally:
            tls.unchecked = unchecked
            tls.unchecked_stack = stack
            tls.transfer_unseen = False

    setattr(method, KIND_ATTR, kind)
    return method


class TransferMode(TorchFunctionMode):
    """The checking mode's stand-in during an unchecked call under the dry run: transfers only."""

    def __init__(self, mode: Any) -> None:
        super().__init__()
        self._kinds = {getattr(torch.Tensor, name): kind for name, kind in _METHODS}
        self._transfer = mode._transfer
        self._tls = mode.checker._tls

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            kind = self._kinds.get(func)
        except TypeError:  # an unhashable callable: no transfer
            kind = None
        tls = self._tls
        if kind is None or tls.suspended:
            return func(*args, **kwargs) if kwargs else func(*args)
        tls.transfer_unseen = True
        try:
            return self._transfer(kind, func, args, kwargs or {})
        finally:
            tls.transfer_unseen = False
