"""TorchScript under the debug mode (on CPU): torch.jit.trace checks its trace by tracing again and comparing
the graphs, which the checking mode's frames made differ, so a correct `torch.jit.trace` stopped the program;
tracing and scripting now run outside the session (what they make runs in TorchScript, unseen either way),
and the wrappers are gone after it."""

import pytest
import torch
from torch import nn

import mpcheck
from mpcheck.runtime.checks.findings import DeviceMismatchError


def test_trace_and_script_work_under_the_debug_mode_and_are_restored():
    real = (torch.jit.trace, torch.jit.script, torch.jit.trace_module)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 3))
    with mpcheck.debug():
        traced = torch.jit.trace(model, torch.randn(2, 8))
        scripted = torch.jit.script(nn.Sequential(nn.Linear(4, 8), nn.ReLU()))
        out = traced(torch.randn(2, 8)), scripted(torch.randn(3, 4))
        with pytest.raises(DeviceMismatchError):  # the checks are back on after tracing
            model(torch.randn(2, 8)) + torch.ones(1, device="meta")
    assert [tuple(o.shape) for o in out] == [(2, 3), (3, 8)]
    assert (torch.jit.trace, torch.jit.script, torch.jit.trace_module) == real
