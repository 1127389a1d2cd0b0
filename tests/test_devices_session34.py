"""Session 34: MP018 for a tensor's own move dropped in a loop over a module's parameters or buffers
(`for p in m.parameters(): p.data.to(d)`): a tensor's `.to()` returns a copy and leaves it where it was."""

from __future__ import annotations

import textwrap

import pytest

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str, code: str) -> list:
    return [f for f in analyze("t.py", textwrap.dedent(src), ALL, "m", {}, (2, 4, 8)).findings if f.code == code]


PLACE = """
import itertools

import torch
import torch.nn as nn


def place(module, device):
    LOOP
        BODY


net = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
place(net, torch.device("cuda:1"))
"""


@pytest.mark.parametrize(
    "loop,body",
    [
        ("for p in module.parameters():", "p.data.to(device)"),
        ("for p in module.parameters():", "p.cuda(device)"),
        ("for _, p in module.named_parameters():", "p.to(device, non_blocking=True)"),
        ("for t in itertools.chain(module.parameters(), module.buffers()):", "t.data.to(device)"),
        ("for b in module.buffers():", "if b is not None:\n            b.data.to(device)"),
        ("for p in module.parameters():", "with torch.no_grad():\n            p.data.to(device)"),
    ],
)
def test_a_tensor_move_dropped_in_a_loop_over_a_modules_tensors_is_mp018(loop, body):
    src = PLACE.replace("LOOP", loop).replace("BODY", body)
    (f,) = findings(src, "MP018")
    line = next(i for i, t in enumerate(textwrap.dedent(src).splitlines(), 1) if ".to(" in t or ".cuda(" in t)
    assert (f.line, f.severity) == (line, "error")
    assert "not in place" in f.message and f.suggestion.startswith("`") and ".data = " in f.suggestion


@pytest.mark.parametrize(
    "loop,body",
    [
        ("for p in module.parameters():", "p.data = p.data.to(device)"),  # assigned back
        ("for p in module.parameters():", "moved.append(p.to(device))"),  # kept
        ("for x in module:", "x.to(device)"),  # the children: a module's .to() is in place
        ("for p in module.parameters():", "p = p.grad\n        p.to(device)"),  # the name holds a gradient now
        ("for p in tensors(module):", "p.to(device)"),  # not known to walk a module's tensors
    ],
)
def test_a_kept_move_a_module_move_or_an_unknown_walk_is_not_mp018(loop, body):
    src = PLACE.replace("LOOP", "moved = []\n    " + loop).replace("BODY", body)
    assert findings(src, "MP018") == []
