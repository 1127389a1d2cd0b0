"""Issue 11's run-time families on 2 real GPUs, each at its root-cause line: the current device (MP004), DDP with
device_ids on a split model (MP002), a view after a hop (MP012), a module never placed and a module shared by two
stages (MP001 where the placement went wrong), data read with a DataLoader; the correct uses stay silent.

Skipped without 2 CUDA devices (CI has none). The dry-run twins are in tests/dryrun/."""

import os
import tempfile

import pytest
from gpu_helpers import line_of

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mpcheck  # noqa: E402
from mpcheck.runtime.checks.findings import DeviceMismatchError  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() != 2, reason="needs exactly 2 CUDA devices"),
]


@pytest.fixture(autouse=True)
def _current_device_back_to_0():
    yield
    torch.set_default_device(None)
    torch.cuda.set_device(0)


class Stage1(nn.Module):
    def __init__(self, make):
        super().__init__()
        self.lin = nn.Linear(64, 64).to("cuda:1")
        self.make = make

    def forward(self, x):
        return self.lin(x) + self.make(x)


# MP004: the current device ------------------------------------------------------------------------
def test_a_bare_cuda_inside_a_stage_on_cuda1_at_the_line_that_made_it():
    def make(x):
        return torch.randn(x.shape).cuda()  # made

    stage = Stage1(make)
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(stage, report=None):
            stage(torch.randn(4, 64, device="cuda:1"))
    f = err.value.finding
    want = line_of(test_a_bare_cuda_inside_a_stage_on_cuda1_at_the_line_that_made_it, "# made")
    assert (f.code, f.line, f.devices) == ("MP004", want, ("cuda:1", "cuda:0"))


def test_a_factory_under_set_default_device_at_the_line_that_made_it():
    def make(x):
        return torch.ones(x.shape)  # made

    stage = Stage1(make)
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(stage, report=None):
            torch.set_default_device("cuda")
            stage(torch.randn(4, 64, device="cuda:1"))
    f = err.value.finding
    want = line_of(test_a_factory_under_set_default_device_at_the_line_that_made_it, "# made")
    assert (f.code, f.line) == ("MP004", want)


def test_init_hidden_with_a_bare_cuda_at_init_hidden():
    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(16, 16, batch_first=True).to("cuda:1")

        def init_hidden(self, batch):
            return torch.zeros(1, batch, 16).cuda()  # made

        def forward(self, x, h):
            return self.rnn(x, h)

    dec = Decoder()
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(dec, report=None):
            dec(torch.randn(4, 3, 16, device="cuda:1"), dec.init_hidden(4))
    f = err.value.finding
    assert (f.code, f.line) == ("MP004", line_of(test_init_hidden_with_a_bare_cuda_at_init_hidden, "# made"))


def test_set_device_collapses_a_split_placed_with_a_bare_cuda():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(64, 64).cuda()  # implicit
            self.dec = nn.Linear(64, 64).to("cuda:1")

        def forward(self, x):
            return self.dec(self.enc(x.to("cuda:1")))

    with mpcheck.debug(report=None) as dbg:
        torch.cuda.set_device(1)
        net = Net()
        net(torch.randn(4, 64)).sum().backward()
    want = line_of(test_set_device_collapses_a_split_placed_with_a_bare_cuda, "# implicit")
    assert [(f.code, f.line, f.severity) for f in dbg.findings] == [("MP004", want, "warning")]


def test_tensors_made_on_the_current_device_and_moved_on_are_silent():
    stage = Stage1(lambda x: torch.randn(x.shape, device="cuda").to(x.device))
    with mpcheck.debug(stage, report=None) as dbg:
        stage(torch.randn(4, 64, device="cuda:1")).sum().backward()
    assert dbg.findings == []


# MP002: DDP with device_ids on a split model ----------------------------------------------------------
def test_ddp_with_device_ids_around_a_split_model_at_the_wrap():
    import torch.distributed as dist

    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(64, 64).to("cuda:0")
            self.b = nn.Linear(64, 64).to("cuda:1")

        def forward(self, x):
            return self.b(self.a(x.to("cuda:0")).to("cuda:1"))

    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
    try:
        with pytest.raises(DeviceMismatchError) as err:
            with mpcheck.debug(report=None):
                nn.parallel.DistributedDataParallel(Split(), device_ids=[0])  # wrap
    finally:
        dist.destroy_process_group()
    f = err.value.finding
    assert (f.code, f.line) == ("MP002", line_of(test_ddp_with_device_ids_around_a_split_model_at_the_wrap, "# wrap"))


# MP012: a view after a hop ---------------------------------------------------------------------------
def test_a_permuted_tensor_viewed_after_a_hop_at_the_hop():
    x = torch.randn(4, 6, 8, device="cuda:0")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(report=None):
            h = x.permute(0, 2, 1).to("cuda:1")  # hop
            h.view(4, -1)
    f = err.value.finding
    assert (f.code, f.line) == ("MP012", line_of(test_a_permuted_tensor_viewed_after_a_hop_at_the_hop, "# hop"))


def test_a_contiguous_copy_viewed_after_a_hop_is_silent():
    x = torch.randn(4, 6, 8, device="cuda:0")
    with mpcheck.debug(report=None) as dbg:
        x.permute(0, 2, 1).contiguous().to("cuda:1").view(4, -1)
    assert dbg.findings == []


# MP001 / MP007 at the placement: never placed, shared ---------------------------------------------------------
def test_a_stage_never_placed_at_the_line_that_built_it():
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(report=None):
            s0 = nn.Linear(64, 64)  # built
            s1 = nn.Linear(64, 64).to("cuda:1")
            s1(s0(torch.randn(4, 64, device="cuda:0")).to("cuda:1"))
    f = err.value.finding
    assert (f.code, f.line) == ("MP001", line_of(test_a_stage_never_placed_at_the_line_that_built_it, "# built"))
    assert "never placed" in f.message


def test_a_module_shared_by_two_stages_at_the_second_move():
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(report=None):
            norm = nn.LayerNorm(64)
            s0 = nn.Sequential(nn.Linear(64, 64), norm).to("cuda:0")
            s1 = nn.Sequential(nn.Linear(64, 64), norm).to("cuda:1")  # second
            s1(s0(torch.randn(4, 64, device="cuda:0")).to("cuda:1"))
    f = err.value.finding
    assert (f.code, f.line) == ("MP007", line_of(test_a_module_shared_by_two_stages_at_the_second_move, "# second"))
    assert "shared" in f.message


# Data read with a DataLoader -----------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataloader_with_pinned_batches_feeding_a_split_model_is_silent(workers):
    from torch.utils.data import DataLoader, TensorDataset

    s0, s1 = nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 3).to("cuda:1")
    data = TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,)))
    with mpcheck.debug(report=None) as dbg:
        for x, y in DataLoader(data, batch_size=8, num_workers=workers, pin_memory=True):
            out = s1(s0(x.to("cuda:0", non_blocking=True)).to("cuda:1"))
            nn.functional.cross_entropy(out, y.to("cuda:1", non_blocking=True)).backward()
    assert dbg.findings == []
