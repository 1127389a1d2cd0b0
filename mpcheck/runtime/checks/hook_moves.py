"""Transfers made by a module's hooks, not by model code: the placement's own input alignment.

accelerate's `dispatch_model` (AlignDevicesHook, through `add_hook_to_module`'s forward wrapper) and a
`register_forward_pre_hook` that moves a module's inputs to its device both copy tensors while a module
is being called but before (or after) its `forward` runs. Those copies follow the placement (a device
map, which may list modules in an order the data does not visit them): the user's code never asked for
them and cannot drop them, so they are counted in the transfer report but are not the user's waste
(no MP005/MP006/MP011 chain starts or goes on through them). Transfers made by `forward` code, the
user's own around the model included, are checked as before.

The test walks the frames above the transfer once, with each code object classified once: the
transfer is a hook's when a module call's machinery (`Module._call_impl` and its inner function) is
reached before any frame of a function named `forward` (a module's forward, nested or wrapped, or an
autograd Function's: any of them makes the copy model code). mpcheck's own `nn.Module.__call__` counts as
that machinery (mark_module_call): from a signature's second call on it calls `forward` itself, and a
wrapper in its place (accelerate's offload bringing weights in) would otherwise look like model code.
Only transfers pay for it.
"""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType

_FORWARD, _CALL, _OTHER = 1, 2, 0
_kind: dict[CodeType, int] = {}
_CALL_NAMES = frozenset({"_call_impl", "inner", "_wrapped_call_impl"})
_module_py: str | None = None


def _module_file() -> str:
    """torch/nn/modules/module.py, where a module call's machinery runs the hooks and `forward`."""
    global _module_py
    if _module_py is None:
        mod = sys.modules.get("torch.nn.modules.module")
        _module_py = os.path.abspath(mod.__file__) if mod is not None and mod.__file__ else "\0"
    return _module_py


def _classify(code: CodeType) -> int:
    kind = _kind.get(code)
    if kind is None:
        if code.co_name == "forward":
            kind = _FORWARD
        elif code.co_name in _CALL_NAMES and os.path.abspath(code.co_filename) == _module_file():
            kind = _CALL
        else:
            kind = _OTHER
        _kind[code] = kind
    return kind


def mark_module_call(code: CodeType) -> None:
    """`code` runs a module call as `Module._call_impl` would: the capture layer's `nn.Module.__call__`, whose
    fast path calls a module's `forward` itself (capture/hooks.py), so no `_call_impl` frame is left to find."""
    _kind[code] = _CALL


def made_by_module_hook(depth: int = 1) -> bool:
    """Is the transfer being made now, `depth` frames up, inside a module call but outside any
    `forward` (a forward pre-hook, a forward hook, a wrapper that replaced `module.forward`)?"""
    try:
        frame: FrameType | None = sys._getframe(depth + 1)
    except ValueError:
        return False
    while frame is not None:
        kind = _classify(frame.f_code)
        if kind == _FORWARD:
            return False
        if kind == _CALL:
            return True
        frame = frame.f_back
    return False
