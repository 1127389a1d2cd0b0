"""Shared by the drivers: loading a case's cached real file, and the tutorial's two-stage model."""

import ast
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


def load_definitions(path: str, name: str, run: tuple[int, int] | None = None) -> ModuleType:
    """The file's imports, functions, classes and constants as a module under its own path, without its script.

    For tutorials and scripts whose module level trains, times and plots: the driver
    calls their functions itself (or runs some of their lines, `run_lines`). The
    statements that lie within the lines `run` (first, last) are run as written,
    in order with the definitions. An import that fails (a plotting library) is
    left out: the definitions the driver calls do not use it, and would fail
    loudly if they did.
    """
    module = ModuleType(name)
    module.__file__ = os.path.abspath(path)
    for node in _statements(module.__file__):
        if (run and _within(node, *run)) or _is_definition(node):
            try:
                _exec(node, module)
            except ImportError:
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    raise
    return module


def run_lines(module: ModuleType, first: int, last: int) -> None:
    """Run, as written and in the module's namespace, the module-level statements of its file within lines first..last."""
    assert module.__file__ is not None
    for node in _statements(module.__file__):
        if _within(node, first, last):
            _exec(node, module)


def _statements(path: str) -> list[ast.stmt]:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path).body


def _within(node: ast.stmt, first: int, last: int) -> bool:
    return first <= node.lineno and (node.end_lineno or node.lineno) <= last


def _exec(node: ast.stmt, module: ModuleType) -> None:
    # Compiled under the file's own path, with its own line numbers: findings point at the file.
    assert module.__file__ is not None
    exec(compile(ast.Module(body=[node], type_ignores=[]), module.__file__, "exec"), module.__dict__)


def _is_definition(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
        return True
    # `num_classes = 1000`: a constant the definitions read.
    return isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)


# GPT-2 at a test's size: the twelve blocks of gpt2, narrow (the projects deal blocks by index).
GPT2_SMALL = dict(n_layer=12, n_embd=32, n_head=2, vocab_size=128, n_positions=64)


# T5 at a test's size: two blocks a stack.
T5_SMALL = dict(
    num_layers=2,
    num_decoder_layers=2,
    d_model=32,
    d_kv=16,
    d_ff=64,
    num_heads=2,
    vocab_size=128,
    decoder_start_token_id=0,
)


def offline_gpt2_config(cls, name, *args, **kwargs):
    """Stands for `GPT2Config.from_pretrained(name)` (a download): the small config instead."""
    return cls(**GPT2_SMALL)


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
