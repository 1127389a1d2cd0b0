"""The debug mode's fast paths (per-op and per-module-call checks read devices with the
function modes off, compare torch.device objects first) decide exactly as the full checks
do: cpu/meta "split" on CPU, real CudaDevices."""

import pytest
import torch
from torch import nn

import mpcheck
from mpcheck.runtime.checks.findings import DeviceMismatchError


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


class ScaledLinear(nn.Linear):
    """A user subclass of a torch.nn leaf: its own forward is user code, checked op by op."""

    def __init__(self, device):
        super().__init__(4, 4, device=device)
        self.scale = torch.ones(4)  # a plain attribute left on the CPU: not a buffer

    def forward(self, x):
        return super().forward(x) * self.scale


def test_a_user_subclass_of_a_torch_leaf_is_still_checked_inside():
    model = ScaledLinear("meta")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            model(torch.ones(2, 4, device="meta"))
    assert err.value.finding.devices == ("meta", "cpu") and err.value.finding.modules == ("model",)


def test_a_forward_hook_on_a_torch_leaf_still_runs_under_the_mode():
    lin = nn.Linear(4, 4)
    seen = []
    lin.register_forward_hook(lambda mod, args, out: seen.append(torch._C._len_torch_function_stack()))
    # recheck_every=0: every call checked (the second call would otherwise run as a signature checked clean)
    with mpcheck.debug(lin, report=None, recheck_every=0) as dbg:
        lin(torch.ones(2, 4)).to("meta")
        lin(torch.ones(2, 4))
    assert seen == [1, 1]  # the checking mode was on while the hook ran
    assert dbg.ledger.by_pair()[("cpu", "meta", "forward")].count == 1


def test_torch_leaf_runs_without_the_mode_and_the_mode_comes_back():
    inside = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            inside.append(torch._C._len_torch_function_stack())
            return self.lin(x)

    model = Probe()
    depths = []
    real_linear = torch.nn.functional.linear

    def spy(*args, **kwargs):
        depths.append(torch._C._len_torch_function_stack())
        return real_linear(*args, **kwargs)

    torch.nn.functional.linear = spy
    try:
        with mpcheck.debug(model, report=None):
            model(torch.ones(2, 4))
            after = torch._C._len_torch_function_stack()
        with mpcheck.debug(model, report=None, strict=True):
            model(torch.ones(2, 4))
    finally:
        torch.nn.functional.linear = real_linear
    assert inside == [1, 1] and after == 1
    assert depths == [0, 1]  # debug: nn.Linear's forward ran outside the mode; strict: inside


@pytest.mark.parametrize("raises", [False, True])
def test_zero_grad_runs_outside_the_mode_and_the_mode_comes_back(raises):
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    depths = []
    real = torch.Tensor.grad.__set__

    class Boom(Exception):
        pass

    def spy_set(t, value):
        depths.append(torch._C._len_torch_function_stack())
        if raises:
            raise Boom
        real(t, value)

    originals = (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad)
    model(torch.ones(1, 4)).sum().backward()
    with mpcheck.debug(model, report=None):
        orig = nn.Parameter.grad
        try:
            nn.Parameter.grad = property(orig.__get__, spy_set)
            if raises:
                with pytest.raises(Boom):
                    opt.zero_grad(set_to_none=True)
                with pytest.raises(Boom):
                    model.zero_grad()
            else:
                opt.zero_grad(set_to_none=True)
                model(torch.ones(1, 4)).sum().backward()
                model.zero_grad()
        finally:
            del nn.Parameter.grad
        assert torch._C._len_torch_function_stack() == 1
    assert set(depths) == {0} and len(depths) == (2 if raises else 4)
    assert (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad) == originals
