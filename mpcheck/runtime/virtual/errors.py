"""What the dry run raises, and how its messages name the user's line."""

from __future__ import annotations

import os
import re
import sysconfig
from typing import Any

from mpcheck.runtime.checks.sites import user_site


class DryRunLimitError(RuntimeError):
    """A documented limit of the dry run was reached; the message names the user's line. The first one made is
    kept (`first_limit`): a program that catches it (an asyncio task's exception, stored and never read) may
    wait forever for what the stopped code would have given, and the dry run then ends it with this message
    (commands/stall.py)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if not _FIRST:
            _FIRST.append(self)


_FIRST: list[DryRunLimitError] = []


def first_limit() -> DryRunLimitError | None:
    """The first dry-run limit reached since `forget_limits`, caught or not."""
    return _FIRST[0] if _FIRST else None


def forget_limits() -> None:
    _FIRST.clear()


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


# What PyTorch (or code around it) says when it needs CUDA itself: a kernel handed CPU or meta tensors,
# a CPU build asked for its CUDA library or bindings, code checking for a real GPU, an op with a CUDA kernel only.
NEEDS_CUDA = re.compile(
    r"not compiled with CUDA|must be (a )?CUDA|is_cuda\(\)|CUDA tensor|expected .*cuda|'CUDA' backend|"
    r"CUDA error|no CUDA|requires CUDA|only supports CUDA|CUDA (is )?not available|without ATen_cuda|"
    r"not linked with support for cuda|has no attribute '_(cuda|nccl|cudnn)|"
    # an operator with a CUDA kernel only (a custom op registered with device_types="cuda"), given host tensors
    r"from the '(CPU|Meta)' backend[\s\S]*?available for these backends: \[[^\]]*\bCUDA\b",
    re.IGNORECASE,
)


def needs_real_cuda(exc: BaseException) -> bool:
    """Did `exc` (or an exception it came from) stop on something only real CUDA has?"""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if NEEDS_CUDA.search(str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


def stop_message(exc: BaseException) -> str:
    """What stopped the program, for the report: a dry-run limit's own message (it names the line), else
    "path:line: ExceptionType: message" at the user's line in the traceback (crash_site)."""
    if isinstance(exc, DryRunLimitError):
        return str(exc)
    head = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    site = crash_site(exc)
    return f"{site}: {head}" if site else head


def crash_site(exc: BaseException) -> str | None:
    """ "path:line" of the innermost frame of the user's code in `exc`'s traceback (outside mpcheck, the
    standard library and installed packages); else the innermost frame outside mpcheck; else None."""
    tb, user, other = exc.__traceback__, None, None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        where = f"{filename}:{tb.tb_lineno}"
        if not _installed(filename):
            user = where
        elif not _in_mpcheck(filename):
            other = where
        tb = tb.tb_next
    return user or other


_MPCHECK_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _in_mpcheck(filename: str) -> bool:
    return not filename.startswith("<") and os.path.abspath(filename).startswith(_MPCHECK_DIR)


def _installed(filename: str) -> bool:
    """A file of mpcheck, the standard library or an installed package (torch's included): not the user's."""
    if filename.startswith("<"):
        return filename.startswith("<frozen")  # "<string>": the user's `-c` code
    full = os.path.abspath(filename)
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return _in_mpcheck(filename) or any(full.startswith(os.path.join(r, "")) for r in roots)
