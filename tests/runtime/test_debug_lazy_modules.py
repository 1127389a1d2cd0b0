"""A lazy module (nn.LazyLinear, nn.LazyBatchNorm1d) moved before its first forward under the debug mode:
its placeholders allow `.to`/`.cuda`/`.cpu`/`.copy_` by identity, so the debug mode's wrappers of those
methods (runtime/capture/transfers.py) are allowed too while it runs, and only then. Under `mpcheck run` on a
real GPU, `nn.Sequential(nn.LazyLinear(8), nn.LazyBatchNorm1d()).to("cuda:0")` raised a ValueError."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mpcheck  # noqa: E402


def test_a_lazy_module_moved_under_the_debug_mode_runs_as_without_it():
    from torch.nn.parameter import UninitializedTensorMixin

    before = list(UninitializedTensorMixin._allowed_methods)
    torch.manual_seed(0)
    plain = nn.Sequential(nn.LazyLinear(8), nn.LazyBatchNorm1d()).to("cpu")
    want = plain(torch.ones(4, 3))
    torch.manual_seed(0)
    with mpcheck.debug(report=None, on_mismatch="raise") as dbg:
        model = nn.Sequential(nn.LazyLinear(8), nn.LazyBatchNorm1d()).to("cpu")
        got = model(torch.ones(4, 3))
    assert torch.equal(got, want)
    assert dbg.findings == []
    assert UninitializedTensorMixin._allowed_methods == before  # the wrappers left with the debug mode


def test_the_placeholders_still_refuse_other_methods_under_the_debug_mode():
    with mpcheck.debug(report=None):
        lazy = nn.LazyLinear(4)
        with pytest.raises(ValueError, match="uninitialized parameter"):
            lazy.weight.sum()
