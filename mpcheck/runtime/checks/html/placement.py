"""Which module sits on which device, read while the model is alive.

A program launched by `mpcheck run` often builds its model inside `main()`: by the time the
report is written the model is gone (the session's module names are weak references). So the
placement is read when a root model becomes known (its first call, or `mpcheck.debug(model)`)
and read again when the report is built, for the roots still alive then.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A model with more modules than this is cut (the page must stay a few hundred KB for a 7B model:
# a Llama-7B has about 400 modules).
MAX_MODULES = 5000


@dataclass
class ModuleRow:
    path: str  # "model.blocks.3.attn"
    type: str  # its class name
    devices: tuple[str, ...]  # the devices of its own parameters (or buffers, where it has no parameters)
    param_bytes: int  # its own parameters' bytes (not its children's)


class Placement:
    """path -> ModuleRow, over every root model seen; a later read of a root replaces an earlier one."""

    def __init__(self) -> None:
        self.rows: dict[str, ModuleRow] = {}

    def record(self, root: Any, name: str, device_of: Callable[[Any], str]) -> None:
        for sub_name, sub in root.named_modules():
            if len(self.rows) >= MAX_MODULES:
                return
            path = f"{name}.{sub_name}" if sub_name else name
            params = [p for p in sub._parameters.values() if p is not None]
            tensors = params or [b for b in sub._buffers.values() if b is not None]
            devices = tuple(sorted({device_of(t) for t in tensors}))
            nbytes = sum(_nbytes(p) for p in params)
            self.rows[path] = ModuleRow(path, type(sub).__name__, devices, nbytes)


def _modes_off(checker: Any) -> Any:
    """The torch function modes stepped aside while a placement is read on real devices: a root
    found at its first call is read inside the checking mode, where each `.device`, `.numel()` and
    `.element_size()` of each parameter would be a __torch_function__ call (a virtual device, by
    contrast, is answered by a mode: read as it is)."""
    import torch

    if checker.plain_devices:
        return torch._C.DisableTorchFunction()
    return contextlib.nullcontext()


def _nbytes(t: Any) -> int:
    try:
        return int(t.numel() * t.element_size())
    except ValueError:  # a LazyModule's parameter before its first call: no size yet
        return 0


def watch(session: Any, placement: Placement) -> None:
    """Record each root model the session's namer learns, as it learns it (the root is alive then).

    The namer is capture's ModuleNamer (this package sits below capture): its `add_root` is
    wrapped on the instance, so the hooks' own calls reach the wrapper."""
    namer = session.checker.namer
    if namer is None:
        return
    checker = session.checker
    add_root = namer.add_root

    def add_root_and_record(root: Any, name: str) -> None:
        add_root(root, name)
        with checker.suspend(), _modes_off(checker):
            placement.record(root, name, checker.devices.device_of)

    namer.add_root = add_root_and_record


def refresh(session: Any, placement: Placement) -> None:
    """Read again the roots still alive (their placement at the end of the run)."""
    namer = session.checker.namer
    if namer is None:
        return
    checker = session.checker
    with checker.suspend(), _modes_off(checker):
        for root in namer.roots():
            name = namer.known(root)
            if name is not None:
                placement.record(root, name, checker.devices.device_of)
