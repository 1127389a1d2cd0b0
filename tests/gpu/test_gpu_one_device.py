"""The debug mode on one real GPU (the host is the second device): what needs no second GPU. A sparse
tensor's transfer (its layout has no strides: the transfer's bookkeeping once raised inside the user's
`.to`), weights swapped in by torch.func.functional_call or replaced by assignment after a call, a slice
of a GPU tensor assigned from the host, noise made on the host and copied at once every step (MP019).
tests/dryrun runs the same programs on virtual GPUs.

Skipped without a CUDA device (CI has none)."""

import pytest

torch = pytest.importorskip("torch")
from gpu_helpers import line_of  # noqa: E402
from torch import nn  # noqa: E402

import mpcheck  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_sparse_tensors_move_to_the_gpu_and_count_what_they_hold():
    dense = torch.eye(64)
    with mpcheck.debug(report=None, on_mismatch="raise") as dbg:
        coo = dense.to_sparse().to("cuda:0")
        csr = dense.to_sparse_csr().to("cuda:0")
        h = torch.randn(64, 8, device="cuda:0")
        out = torch.sparse.mm(coo, h) + torch.sparse.mm(csr, h)
        dbg.step()
    assert out.device == torch.device("cuda:0")
    assert dbg.findings == []
    agg = dbg.ledger.by_pair()[("cpu", "cuda:0", "forward")]
    assert (agg.count, agg.bytes) == (2, (64 * 4 + 2 * 64 * 8) + (64 * 4 + 65 * 8 + 64 * 8))  # values and indices


def test_weights_replaced_after_a_call_and_a_slice_assigned_from_the_host_run_clean():
    from torch.func import functional_call

    lin = nn.Linear(8, 4)
    with mpcheck.debug(lin, report=None, on_mismatch="raise") as dbg:
        x = torch.randn(2, 8)
        lin(x)
        swapped = {k: v.detach().to("cuda:0") for k, v in lin.named_parameters()}
        functional_call(lin, swapped, (x.to("cuda:0"),))
        lin.weight = nn.Parameter(lin.weight.detach().to("cuda:0"))
        lin.bias = nn.Parameter(lin.bias.detach().to("cuda:0"))
        buf = torch.zeros(2, 8, device="cuda:0")
        buf[:, 4:] = x[:, :4]
        out = lin(buf)
    assert out.device == torch.device("cuda:0")
    assert dbg.findings == []


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("how", [{"foreach": True}, {"fused": True}])
def test_an_ema_on_the_host_copies_new_data_each_step(strict, how):
    # The optimizer updates the parameters in place over lists of tensors (foreach, fused), which PyTorch
    # bumps no version counter for under strict mode's dispatch mode: the per-step copy to the host's EMA
    # looked like the same unchanged data moved again (MP011). runtime/capture/list_versions.py.
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).to("cuda:0")
    ema = [p.detach().cpu() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **how)
    with mpcheck.debug(model, report=None, strict=strict, on_mismatch="raise") as dbg:
        for _ in range(3):
            loss = model(torch.randn(8, 256, device="cuda:0")).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for e, p in zip(ema, model.parameters()):
                    e.lerp_(p.to("cpu"), 0.01)
            dbg.step()
    assert [f.code for f in dbg.findings] == []
    assert dbg.ledger.by_pair()[("cuda:0", "cpu", "forward")].count == 3 * len(ema)


def test_a_broadcast_view_moved_to_the_gpu_is_mp016_at_its_line_and_the_numbers_are_the_same():
    def program():
        bias = torch.randn(1, 4, 64, 64)
        scores = torch.randn(8, 4, 64, 64, device="cuda:0")
        out = scores + bias.expand(8, -1, -1, -1).to("cuda:0")  # <- expanded
        fixed = scores + bias.to("cuda:0").expand(8, -1, -1, -1)
        return out, fixed

    torch.manual_seed(0)
    plain, _ = program()
    torch.manual_seed(0)
    with mpcheck.debug(report=None, on_mismatch="raise") as dbg:
        out, fixed = program()
    assert torch.equal(out, plain) and torch.equal(out, fixed)
    (f,) = dbg.findings
    assert (f.code, f.line, f.devices) == ("MP016", line_of(program, "<- expanded"), ("cpu", "cuda:0"))
    assert f.extra["bytes_saved"] == 7 * 64 * 1024


# MP019: a tensor made on the host and copied at once, every step -------------------------------------------
def _noise(on_host: bool):
    a = nn.Linear(256, 256).to("cuda:0")
    with mpcheck.debug(report=None) as dbg:
        for _ in range(2):
            x0 = torch.randn(128, 256, device="cuda:0")
            if on_host:
                noise = torch.randn(x0.shape).to(x0.device)  # host
            else:
                noise = torch.randn_like(x0)
            nn.functional.mse_loss(a(x0 + noise), noise).backward()
    return dbg


def test_noise_made_on_the_host_and_copied_every_step():
    assert [(f.code, f.line) for f in _noise(True).findings] == [("MP019", line_of(_noise, "# host"))]
    assert _noise(False).findings == []


def test_a_lazy_module_moved_before_its_first_forward_runs_clean():
    # Its weights and statistics are placeholders until the first batch, which allow `.to` by identity (the
    # debug mode's wrapper of it raised in the user's `.to`), and refuse to give their storage (the debug
    # mode's check of which buffers a transfer may repeat asked for it). tests/dryrun/test_lazy_modules.py
    # runs the same on virtual GPUs.
    with mpcheck.debug(report=None, on_mismatch="raise") as dbg:
        model = nn.Sequential(nn.LazyLinear(8), nn.LazyBatchNorm1d()).to("cuda:0")
        for _ in range(2):
            out = model(torch.randn(4, 3).to("cuda:0"))
            out.sum().backward()
            dbg.step()
    assert model[1].running_mean.device == torch.device("cuda:0")
    assert dbg.findings == []


# MP011: a parameter kept on the host and copied to the GPU in every forward ---------------------------------
def _host_tokens(placed: bool):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(16, 32).to("cuda:0")
            self.tokens = nn.ParameterDict({"cls": nn.Parameter(torch.zeros(1, 32))})
            if placed:
                self.tokens.to("cuda:0")

        def forward(self, x):
            return self.embed(x) + self.tokens["cls"].to(x.device)  # tokens

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with mpcheck.debug(model, report=None, on_mismatch="raise") as dbg:
        for _ in range(3):
            model(torch.randn(8, 16, device="cuda:0")).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            dbg.step()
    return dbg


def test_a_host_parameter_moved_in_every_forward_is_mp011_on_a_gpu():
    (f,) = _host_tokens(False).findings
    assert (f.code, f.line) == ("MP011", line_of(_host_tokens, "# tokens"))
    assert "lives on the host" in f.message
    assert _host_tokens(True).findings == []


# MP020: a GPU tensor's elements read on the host one at a time -----------------------------------------------
def _labels(whole: bool):
    model = nn.Linear(16, 10).to("cuda:0")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with mpcheck.debug(model, report=None, on_mismatch="raise") as dbg:
        for _ in range(3):
            out = model(torch.randn(32, 16, device="cuda:0"))
            preds = out.argmax(1)
            if whole:
                labels = [str(p) for p in preds.tolist()]
            else:
                labels = [str(p.item()) for p in preds]  # elements
            assert len(labels) == 32
            out.pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            dbg.step()
    return dbg


def test_elements_of_a_gpu_tensor_read_one_at_a_time_are_mp020_on_a_gpu():
    (f,) = _labels(False).findings
    assert (f.code, f.line) == ("MP020", line_of(_labels, "# elements"))
    assert "on cuda:0 (32)" in f.message
    assert _labels(True).findings == []


class _FocalLoss(nn.Module):
    def __init__(self, alpha, as_buffer):
        super().__init__()
        if as_buffer:
            self.register_buffer("alpha", alpha)
        else:
            self.alpha = alpha  # a plain attribute: `.to()` does not carry it

    def forward(self, logits, target):
        at = self.alpha[target]  # use
        return (at * nn.functional.cross_entropy(logits, target, reduction="none")).mean()


def test_a_loss_modules_plain_tensor_attribute_left_on_the_host_is_named_at_its_use():
    head = nn.Linear(8, 4).to("cuda:0")
    criterion = _FocalLoss(torch.tensor([1.0, 2.0, 3.0, 4.0]), as_buffer=False).to("cuda:0")
    with mpcheck.debug(head, report=None, on_mismatch="move") as dbg:
        logits = head(torch.randn(6, 8, device="cuda:0"))
        criterion(logits, torch.randint(0, 4, (6,), device="cuda:0")).backward()
    [f] = dbg.findings
    assert (f.code, f.line) == ("MP001", line_of(_FocalLoss.forward, "# use"))
    assert ".alpha`" in f.message and "plain tensor attribute" in f.message, f.message
    assert "register_buffer('alpha'" in f.suggestion


def test_the_same_weights_as_a_buffer_run_clean():
    head = nn.Linear(8, 4).to("cuda:0")
    criterion = _FocalLoss(torch.tensor([1.0, 2.0, 3.0, 4.0]), as_buffer=True).to("cuda:0")
    with mpcheck.debug(head, report=None, on_mismatch="raise") as dbg:
        logits = head(torch.randn(6, 8, device="cuda:0"))
        criterion(logits, torch.randint(0, 4, (6,), device="cuda:0")).backward()
    assert dbg.findings == []
