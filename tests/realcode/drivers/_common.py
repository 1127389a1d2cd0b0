"""Shared by the drivers: loading a case's cached real file, and the tutorial's two-stage model."""

import importlib.util
import os
from types import ModuleType

import torch
from torch import nn


def load_file(path: str, name: str) -> ModuleType:
    """The file as a module, under its own path (so findings point at its lines)."""
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TwoStages(nn.Module):
    """The two-stage shape of the PyTorch model-parallel tutorial: Linear on cuda:0, Linear on cuda:1, hop in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.net1 = nn.Linear(10, 10).to("cuda:0")
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5).to("cuda:1")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.net1(x.to("cuda:0")))
        return self.net2(x.to("cuda:1"))
