"""copy.deepcopy of a model under the run-time faces: which parameters are copies.

A deep copy of a split model moved whole onto one GPU (`self.ema = copy.deepcopy(model).to("cuda:1")`:
an EMA, a teacher or a snapshot kept on one device) undoes no split: the model being trained keeps its
placement. Each parameter of a deep copy is made by Parameter.__deepcopy__ (torch/nn/parameter.py), so
wrapping it notes the copies, however `deepcopy` was imported; split_model.on_module_move leaves a module
whose parameters are all copies alone. The copies are held weakly (Checker.copied_params): nothing is kept
alive by the note."""

from __future__ import annotations

from typing import Any

import torch

from mpcheck.runtime.capture.hooks import Undo, patch
from mpcheck.runtime.checks.checker import Checker


def install(checker: Checker) -> Undo:
    orig = torch.nn.Parameter.__dict__.get("__deepcopy__")
    if orig is None:  # pragma: no cover - a torch whose Parameter has none: copies are not told apart
        return lambda: None

    def deepcopy(self: Any, memo: dict[int, Any]) -> Any:
        out = orig(self, memo)
        checker.copied_params[id(out)] = out
        return out

    return patch(torch.nn.Parameter, "__deepcopy__", deepcopy)
