"""The debug mode's module-entry check (cpu/meta stand in for two devices): a module that moves
its inputs itself, or never uses one, runs clean; an input used unmoved is reported at the call."""

import warnings

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


class Stage(nn.Module):
    def __init__(self, moves):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.moves = moves

    def forward(self, x):
        return (x.to(self.scale.device) if self.moves else x) * self.scale


@pytest.mark.parametrize("moves", [False, True])
def test_one_tensor_argument_off_a_user_modules_device_is_noted_and_reported_where_used_unmoved(moves):
    # A call with one tensor argument (the common call): the entry compares that tensor's device
    # inline; noted, it is reported at the call only where it reaches a torch call unmoved.
    model = nn.Sequential(Stage(moves)).to("meta")
    with warnings.catch_warnings(), mpcheck.debug(model, report=None, on_mismatch="warn", recheck_every=0) as dbg:
        warnings.simplefilter("ignore")
        try:
            model(torch.randn(2, 4))
        except (RuntimeError, NotImplementedError):  # PyTorch's own error after mpcheck's finding
            pass
    if moves:
        assert dbg.findings == []
    else:
        assert [f.code for f in dbg.findings] == ["MP001"]
        f = dbg.findings[0]  # noted at the outermost call that received it off its device
        assert f.message.startswith("input of Sequential 'model': argument 0") and f.modules == ("model",)


def test_one_tensor_argument_off_a_torch_leafs_device_is_reported_at_its_entry():
    lin = nn.Linear(4, 4).to("meta")
    with warnings.catch_warnings(), mpcheck.debug(lin, report=None, on_mismatch="warn") as dbg:
        warnings.simplefilter("ignore")
        try:
            lin(torch.randn(2, 4))
        except (RuntimeError, NotImplementedError):
            pass
        out = lin(torch.randn(2, 4, device="meta"))  # on its device: clean, run without the mode
    assert [f.code for f in dbg.findings] == ["MP001"]
    assert "input of Linear" in dbg.findings[0].message and out.device.type == "meta"
