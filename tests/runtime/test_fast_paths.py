"""The debug mode's fast paths (per-op and per-module-call checks read devices with the
function modes off, compare torch.device objects first) decide exactly as the full checks
do: cpu/meta "split" on CPU, real CudaDevices."""

import pytest
import torch
from torch import nn

import mpcheck
from mpcheck.runtime.core import DeviceMismatchError


class Masked(nn.Module):
    def __init__(self, device):
        super().__init__()
        self.lin = nn.Linear(4, 4, device=device)

    def forward(self, x, *, mask=None):
        y = self.lin(x)
        return y if mask is None else y * mask


@pytest.mark.parametrize("strict", [False, True])
def test_a_list_argument_is_checked_even_alone(strict):
    # torch.cat([a, b]) passes one argument: a sequence whose tensors may disagree.
    a, b = torch.ones(2), torch.ones(2, device="meta")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(report=None, strict=strict):
            torch.cat([a, b])
    f = err.value.finding
    assert f.code == "MP001" and f.devices == ("cpu", "meta")
    assert "argument 0[1]" in f.message


def test_module_entry_checks_keyword_tensors():
    model = Masked("meta")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            model(torch.ones(2, 4, device="meta"), mask=torch.ones(2, 4))
    f = err.value.finding
    assert f.modules == ("model",) and "keyword argument 'mask'" in f.message
    assert f.devices == ("meta", "cpu")


@pytest.mark.parametrize("strict", [False, True])
def test_cpu_scalars_mix_with_any_device_and_the_rest_runs_clean(strict):
    model = Masked("meta")
    with mpcheck.debug(model, report=None, strict=strict) as dbg:
        out = model(torch.ones(2, 4, device="meta"), mask=torch.ones(2, 4, device="meta"))
        out = out * torch.tensor(2.0)  # a 0-dim CPU tensor: allowed next to meta
        torch.cat([out, out])
    assert dbg.findings == []


def test_move_mode_fixes_a_mismatch_found_by_the_fast_path():
    model = Masked("meta")
    with mpcheck.debug(model, report=None, on_mismatch="move") as dbg:
        out = model(torch.ones(2, 4))
    assert out.device.type == "meta"
    assert [f.code for f in dbg.findings] == ["MP001"]
