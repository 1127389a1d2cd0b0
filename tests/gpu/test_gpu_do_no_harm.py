"""Do no harm on 2 real GPUs: the micro-batch pipeline under no_grad whose chunks wait as detached copies
(a freed arrival's id taken by a new tensor is no read: checks/arrivals.py) runs clean, and a mismatch that
stops `mpcheck.debug` leaves no mode or hook behind.

Skipped without 2 CUDA devices (CI has none)."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mpcheck  # noqa: E402
from mpcheck.runtime.checks.findings import DeviceMismatchError  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
]


class Pipeline(nn.Module):
    """Two stages; each chunk goes cuda:0 -> cuda:1 -> cuda:0 once and waits, detached, for torch.cat."""

    def __init__(self, kept):
        super().__init__()
        self.kept = kept
        self.first = nn.Linear(32, 32).to("cuda:0")
        self.second = nn.Linear(32, 32).to("cuda:1")

    def forward(self, x):
        outs = []
        for chunk in x.split(1):
            h = self.second(torch.relu(self.first(chunk)).to("cuda:1"))
            back = h.to("cuda:0")
            outs.append(back.detach() if self.kept == "detach" else back.detach().view(back.shape))
        return torch.cat(outs)


@pytest.mark.parametrize("kept", ["detach", "detach-view"])
def test_micro_batches_kept_as_detached_copies_run_clean(kept):
    model = Pipeline(kept)
    with mpcheck.debug(model, report=None, recheck_every=0) as dbg:
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(8, 32, device="cuda:0"))
    assert dbg.findings == []


def test_a_mismatch_that_stops_the_debug_mode_leaves_nothing_behind():
    modes = torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()
    call = nn.Module.__call__
    model = Pipeline("detach")
    with pytest.raises(DeviceMismatchError):
        with mpcheck.debug(model, report=None, strict=True):
            model.second(torch.randn(2, 32, device="cuda:0"))
    assert (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()) == modes
    assert nn.Module.__call__ is call
