"""The debug mode's module-entry check (cpu/meta stand in for two devices): a module that moves
its inputs itself, or never uses one, runs clean; an input used unmoved is reported at the call."""

import pytest
import torch
from torch import nn

import mpcheck
from mpcheck.runtime.checks.findings import DeviceMismatchError


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

    def forward(self, x, mask=None, bias=None):
        h = x
        for blk in self.blocks:
            h = blk(h.to(blk.weight.device))
        return h if bias is None else h + bias  # the mask is never used when a bias is given


def test_container_that_moves_its_input_and_ignores_a_mask_runs_clean():
    model = Blocks().to("meta")
    with mpcheck.debug(model, report=None, on_mismatch="raise") as dbg:
        model(torch.randn(2, 4), mask=torch.ones(2, 4), bias=torch.ones(2, 4, device="meta"))
    assert dbg.findings == []


def test_an_input_that_reaches_a_torch_call_unmoved_is_reported_at_the_module_call():
    model = Blocks().to("meta")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None, on_mismatch="raise"):
            model(torch.randn(2, 4), bias=torch.ones(2, 4))  # bias on cpu
    f = err.value.finding
    assert (
        f.line
        == test_an_input_that_reaches_a_torch_call_unmoved_is_reported_at_the_module_call.__code__.co_firstlineno + 4
    )
    assert f.modules == ("model",) and "keyword argument 'bias'" in f.message
