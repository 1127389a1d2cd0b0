"""Tensors over memory that torch does not write: their data changes where no version counter sees it.

`host = torch.frombuffer(buf, dtype=torch.int32)`, refilled by `stream.readinto(buf)` each step, and
then `host.to(dev)`: the same storage, the same version, new data every step. MP011 (repeats.py)
would call each copy a repeat of unchanged data. The same holds for `torch.from_numpy(a)` (numpy
writes `a`) and `torch.from_dlpack(x)` (another library's memory). None of these goes through the
checking function mode (they take no tensor), so they are patched on `torch` while the session
runs, and what they return is marked as changing unseen (provenance.changes_unseen).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from mpcheck.runtime.capture import hooks

WRAPPERS = ("frombuffer", "from_numpy", "from_dlpack")


def install(provenance: Any) -> list[hooks.Undo]:
    def marking(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrap(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            if isinstance(out, torch.Tensor):
                provenance.changes_unseen(out)
            return out

        return wrap

    return [hooks.patch(torch, name, marking(getattr(torch, name))) for name in WRAPPERS if hasattr(torch, name)]
