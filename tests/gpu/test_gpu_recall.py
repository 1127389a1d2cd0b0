"""Issue 11's run-time families on 2 real GPUs, each at its root-cause line: a loss fed across devices
(MP008), a device index that does not exist (MP009), DataParallel's internals on a split model (MP003),
DataParallel around one stage on cuda:1 (MP002); the correct uses next to them stay silent.

Skipped without 2 CUDA devices (CI has none)."""

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


class Split(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d, d), nn.ReLU()).to("cuda:0")
        self.dec = nn.Linear(d, d).to("cuda:1")

    def forward(self, x):
        return self.dec(self.enc(x.to("cuda:0")).to("cuda:1"))


# MP008 ------------------------------------------------------------------------------------------
def test_loss_module_class_weights_on_the_first_device_at_the_loss_line():
    model = Split()
    criterion = nn.CrossEntropyLoss(weight=torch.ones(64, device="cuda:0"))
    labels = torch.randint(0, 64, (4,), device="cuda:1")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            out = model(torch.randn(4, 64))
            criterion(out, labels)  # loss
    f = err.value.finding
    want = line_of(test_loss_module_class_weights_on_the_first_device_at_the_loss_line, "# loss")
    assert (f.code, f.line) == ("MP008", want)


def test_nll_loss_with_labels_on_the_first_device():
    model = Split()
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            out = model(torch.randn(4, 64))
            labels = torch.randint(0, 64, (4,)).to("cuda:0")
            nn.functional.nll_loss(out.log_softmax(-1), labels)  # loss
    f = err.value.finding
    assert (f.code, f.line) == ("MP008", line_of(test_nll_loss_with_labels_on_the_first_device, "# loss"))
    assert "`.to('cuda:1')`" in f.suggestion


def test_losses_fed_on_the_logits_device_are_silent():
    model = Split()
    criterion = nn.CrossEntropyLoss(weight=torch.ones(64, device="cuda:1"))
    with mpcheck.debug(model, report=None) as dbg:
        out = model(torch.randn(4, 64))
        labels = torch.randint(0, 64, (4,), device="cuda:0").to(out.device)
        loss = criterion(out, labels) + nn.functional.nll_loss(out.log_softmax(-1), labels)
        loss.backward()
    assert dbg.findings == []


# MP009 ------------------------------------------------------------------------------------------
def test_hop_to_k_plus_one_past_the_last_gpu():
    device_map = {"stage0": 1, "stage1": 0}
    h = torch.randn(4, 8, device="cuda:1")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(report=None):
            k = device_map["stage0"]
            h.to(f"cuda:{k + 1}")  # hop
    f = err.value.finding
    assert (f.code, f.line, f.devices) == (
        "MP009",
        line_of(test_hop_to_k_plus_one_past_the_last_gpu, "# hop"),
        ("cuda:2",),
    )


def test_factory_on_a_missing_gpu_in_move_mode_still_fails_like_cuda():
    with mpcheck.debug(report=None, on_mismatch="move") as dbg:
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.zeros(4, device=torch.device("cuda", 2))  # factory
    assert [(f.code, f.line) for f in dbg.findings] == [
        ("MP009", line_of(test_factory_on_a_missing_gpu_in_move_mode_still_fails_like_cuda, "# factory"))
    ]


def test_existing_gpus_and_unused_device_objects_are_silent():
    with mpcheck.debug(report=None) as dbg:
        planned = [torch.device("cuda", i) for i in range(4)]
        x = torch.randn(4).to(planned[1]).cuda(0).to("cuda") + torch.zeros(4, device=planned[0])
        nn.Linear(4, 4).to(planned[1])(x.to(1))
    assert dbg.findings == []


# MP003 ------------------------------------------------------------------------------------------
def test_replicate_of_a_split_model_at_the_call():
    model = Split()
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            nn.parallel.replicate(model, [0, 1])  # replicate
    f = err.value.finding
    assert (f.code, f.line) == ("MP003", line_of(test_replicate_of_a_split_model_at_the_call, "# replicate"))


def test_data_parallel_function_on_a_split_model_at_the_call():
    model = Split()
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            nn.parallel.data_parallel(model, torch.randn(4, 64, device="cuda:0"), device_ids=[0, 1])  # dp
    f = err.value.finding
    assert (f.code, f.line) == ("MP003", line_of(test_data_parallel_function_on_a_split_model_at_the_call, "# dp"))


def test_scatter_inside_a_split_forward_is_recorded_at_the_scatter():
    class HalfNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.left = nn.Linear(16, 16).to("cuda:0")
            self.right = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)).to("cuda:1")

        def forward(self, x):
            chunks = nn.parallel.scatter(x, [0, 1])  # scatter
            return nn.parallel.gather([self.left(chunks[0]), self.right(chunks[1])], target_device=0)  # gather

    model = HalfNet()
    with mpcheck.debug(model, report=None) as dbg:
        model(torch.randn(4, 16, device="cuda:0"))
    assert sorted((f.code, f.line) for f in dbg.findings) == [
        ("MP003", line_of(HalfNet.forward, "# scatter")),
        ("MP003", line_of(HalfNet.forward, "# gather")),
    ]


def test_primitives_on_a_single_device_model_and_parallel_apply_over_branches_are_silent():
    net = nn.Linear(16, 16).to("cuda:0")
    branches = [nn.Linear(16, 16).to("cuda:0"), nn.Linear(16, 16).to("cuda:1")]
    x = torch.randn(8, 16, device="cuda:0")
    with mpcheck.debug(net, report=None) as dbg:
        replicas = nn.parallel.replicate(net, [0, 1])
        chunks = nn.parallel.scatter(x, [0, 1])
        outs = nn.parallel.parallel_apply(replicas, [(c,) for c in chunks])
        nn.parallel.gather(outs, 0).sum().backward()
        nn.parallel.data_parallel(net, x, device_ids=[0, 1])
        nn.parallel.parallel_apply(branches, [(x,), (x.to("cuda:1"),)])
        nn.DataParallel(net)(x)
    assert dbg.findings == []


def test_scatter_and_gather_in_a_module_holding_one_replica_per_gpu_are_silent():
    class Replicated(nn.Module):
        def __init__(self):
            super().__init__()
            self.copies = nn.ModuleList([nn.Linear(16, 16).to(f"cuda:{i}") for i in range(2)])

        def forward(self, x):
            chunks = nn.parallel.scatter(x, [0, 1])
            return nn.parallel.gather(nn.parallel.parallel_apply(list(self.copies), chunks), 0)

    model = Replicated()
    with mpcheck.debug(model, report=None) as dbg:
        model(torch.randn(8, 16, device="cuda:0")).sum().backward()
    assert dbg.findings == []


# MP002: DataParallel around one stage on cuda:1 ---------------------------------------------------
def test_data_parallel_around_a_stage_on_cuda1_with_default_device_ids_at_the_wrap():
    model = Split()
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            nn.DataParallel(model.dec)  # wrap
    f = err.value.finding
    want = line_of(test_data_parallel_around_a_stage_on_cuda1_with_default_device_ids_at_the_wrap, "# wrap")
    assert (f.code, f.line, f.devices) == ("MP002", want, ("cuda:1", "cuda:0"))


def test_data_parallel_around_a_stage_with_device_ids_starting_on_it_is_silent():
    model = Split()
    with mpcheck.debug(model, report=None) as dbg:
        dp = nn.DataParallel(model.dec, device_ids=[1, 0])
        dp(torch.randn(8, 64, device="cuda:1")).sum().backward()
    assert dbg.findings == []


# MP001 in a custom autograd Function's backward --------------------------------------------------
class Hop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dst):
        ctx.src = x.device
        return x.to(dst)

    @staticmethod
    def backward(ctx, grad):
        return grad, None  # wrong device


class GoodHop(Hop):
    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.src), None


def test_a_custom_function_returning_a_gradient_on_the_wrong_device_at_its_return():
    a, b = nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 2).to("cuda:1")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(nn.ModuleList([a, b]), report=None):
            b(Hop.apply(a(torch.randn(4, 8, device="cuda:0")), torch.device("cuda:1"))).sum().backward()
    f = err.value.finding
    assert (f.code, f.line) == ("MP001", line_of(Hop.backward, "# wrong device"))
    assert f.devices == ("cuda:0", "cuda:1")


def test_a_custom_function_returning_its_gradient_on_the_input_device_is_silent():
    a, b = nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 2).to("cuda:1")
    with mpcheck.debug(nn.ModuleList([a, b]), report=None) as session:
        b(GoodHop.apply(a(torch.randn(4, 8, device="cuda:0")), torch.device("cuda:1"))).sum().backward()
    assert session.findings == []


def test_packed_sequence_lengths_on_a_gpu_at_the_call():
    lstm = nn.LSTM(8, 8, batch_first=True).to("cuda:1")
    x = torch.randn(3, 5, 8, device="cuda:1")
    lengths = torch.tensor([5, 4, 2], device="cuda:1")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(lstm, report=None):
            nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)  # pack
    f = err.value.finding
    assert (f.code, f.line) == ("MP001", line_of(test_packed_sequence_lengths_on_a_gpu_at_the_call, "# pack"))
