"""What the dry run raises, and how its messages name the user's line."""

from __future__ import annotations

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
