"""TorchScript on virtual GPUs: `torch.jit.script` and `torch.jit.trace` give back what they are handed
(the eager module or function), noted as a limit. A scripted module runs its ops in TorchScript, where the
dry run's modes neither see nor label them: its outputs would come back as the real CPU (or meta) tensors
and meet the labelled ones as if they were on the CPU; and a trace's own sanity check compares devices
that TorchScript reads off the real tensors. The eager code computes the same thing on the same devices."""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any

import torch

from mpcheck.runtime.virtual.patches.base import Patches

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs

_WHY = "the dry run runs the eager module or function instead (TorchScript's ops are not seen by the dry run)"


def install(g: VirtualGPUs, p: Patches) -> None:
    for name in ("script", "trace", "trace_module"):
        orig = getattr(torch.jit, name, None)
        if orig is not None:
            p.set(torch.jit, name, _eager(g, name, orig))


def _eager(g: VirtualGPUs, name: str, orig: Any) -> Any:
    @functools.wraps(orig)
    def compile_(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if _caller_module().startswith("torch."):
            # PyTorch's own use (forward-mode AD scripts its decompositions and reads `.graph`): the real one.
            return orig(obj, *args, **kwargs)
        g.note_limit(f"torch.jit.{name}: {_WHY}")
        return obj

    return compile_


def _caller_module() -> str:
    """The module that called torch.jit's function, past mpcheck's own wrappers (the session's, this one)."""
    frame: Any = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("mpcheck."):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""
