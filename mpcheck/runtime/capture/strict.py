"""Strict mode: a TorchDispatchMode that checks the devices of every aten op, forward and backward.

The function mode (mode.py) sees Python-level calls only; this sees what
autograd runs too, on its per-device threads, so the checker's state is
touched under its lock. It costs 10-15 us per op (see notes): opt-in.

In backward there is no user frame: the forward line that built the failing
node is stamped on each node (`grad_fn.metadata`) in forward and read back
through `torch._C._current_autograd_node()`.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mpcheck.runtime.capture.list_versions import call_keeping_versions
from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.sites import UNKNOWN, Site
from mpcheck.runtime.checks.torchapi import ATEN_CPU_INDEX_AS, CPU_INDEX, SKIP, aten_op_kind

_SITE_KEY = "mpcheck_site"
_current_autograd_node = torch._C._current_autograd_node
_MODULE_KEY = "mpcheck_module"


class _AtenOp:
    """What the checker needs of an aten op: a name for the message and for the allowed mixes."""

    __slots__ = ("__name__", "full")

    def __init__(self, packet_name: str, full: str) -> None:
        self.__name__ = packet_name
        self.full = full


class StrictMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch wraps each dispatch mode's __torch_dispatch__ in a dynamo-disable wrapper
        # (two more Python frames and four eval-frame switches per aten op, ~20% of this mode's
        # cost). Nothing compiles under the debug mode (torch.compile is turned off there), so
        # there is no compiled frame to keep out of this one.
        return False

    def __init__(self, checker: Checker) -> None:
        super().__init__()
        self.checker = checker
        self._names: dict[Any, _AtenOp | None] = {}
        self._tls = checker._tls

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op: _AtenOp | None | Literal[False] = self._names.get(func, False)
        if op is False:
            packet = func.overloadpacket.__name__
            kind = aten_op_kind(packet)  # the kinds: checks/torchapi.py
            op = (
                None
                if kind == SKIP
                else _AtenOp(packet if kind != CPU_INDEX else ATEN_CPU_INDEX_AS, f"aten.{func.__name__}")
            )
            self._names[func] = op
        if kwargs is None:
            kwargs = {}
        if op is None or self._tls.suspended:
            return call_keeping_versions(func, args, kwargs)
        checker = self.checker
        node = _current_autograd_node()
        if node is not None:
            site, module = _stamped(node)
            with checker._lock:
                args, kwargs = checker.check_op(
                    op, args, kwargs, site=site, module=module, name=op.full, phase="backward"
                )
            return call_keeping_versions(func, args, kwargs)
        args, kwargs = checker.check_op(op, args, kwargs, name=op.full)
        return call_keeping_versions(func, args, kwargs)


def _stamped(node: Any) -> tuple[Site, str | None]:
    try:
        meta = node.metadata
    except Exception:
        return UNKNOWN, None
    return meta.get(_SITE_KEY, UNKNOWN), meta.get(_MODULE_KEY)


def stamp_node(node: Any, site: Site, module: str | None) -> None:
    """Record on an autograd node where it was built in forward (used by backward checks)."""
    try:
        meta = node.metadata
        meta[_SITE_KEY] = site
        meta[_MODULE_KEY] = module
    except Exception:
        pass
