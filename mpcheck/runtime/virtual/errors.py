"""What the dry run raises, and how its messages name the user's line."""

from __future__ import annotations

import os
import sysconfig
from typing import Any

from mpcheck.runtime.checks.sites import user_site


class DryRunLimitError(RuntimeError):
    """A documented limit of the dry run was reached; the message names the user's line."""


class MetaValueError(DryRunLimitError):
    """Python needed a tensor's value, which meta backing does not have."""


class VirtualDeviceError(RuntimeError):
    """What PyTorch itself would raise on real GPUs (mixed devices, bad ordinal, numpy of a CUDA tensor)."""


def user_line() -> str:
    """ "path:line" of the user's code running now, for messages."""
    s = user_site(2)
    return f"{s.path}:{s.line}" if s.line else "<unknown line>"


def call_name(func: Any) -> str:
    """A torch function's name for messages (a property getter: the property's)."""
    n = getattr(func, "__name__", None)
    if n == "__get__":
        n = getattr(getattr(func, "__self__", None), "__name__", "attribute")
    return n or str(func)


def stop_message(exc: BaseException) -> str:
    """What stopped the program, for the report: a dry-run limit's own message (it names the line), else
    "path:line: ExceptionType: message" at the innermost line of the user's code in the traceback."""
    if isinstance(exc, DryRunLimitError):
        return str(exc)
    head = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    tb, site = exc.__traceback__, None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not _installed(filename):
            site = f"{filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return f"{site}: {head}" if site else head


_MPCHECK_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _installed(filename: str) -> bool:
    """A file of mpcheck, the standard library or an installed package (torch's included): not the user's."""
    if filename.startswith("<"):
        return filename.startswith("<frozen")  # "<string>": the user's `-c` code
    full = os.path.abspath(filename)
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return full.startswith(_MPCHECK_DIR) or any(full.startswith(os.path.join(r, "")) for r in roots)
