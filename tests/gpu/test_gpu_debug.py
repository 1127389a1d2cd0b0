"""The debug mode on 2 real GPUs: each run-time bug family of notes/domain.md caught with the
right module and line, correct code clean, the report's numbers against a hand-timed copy.

Skipped without 2 CUDA devices (CI has none)."""

import statistics

import pytest
from gpu_helpers import line_of

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mpcheck  # noqa: E402
from mpcheck.runtime.checks.findings import DeviceMismatchError  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
]


class Split(nn.Module):
    """Two stages on cuda:0 and cuda:1; `hop` decides whether forward moves the activation."""

    def __init__(self, hop=True, d=64):
        super().__init__()
        self.hop = hop
        self.enc = nn.Sequential(nn.Linear(d, d), nn.ReLU()).to("cuda:0")
        self.dec = nn.Sequential(nn.Linear(d, d), nn.ReLU()).to("cuda:1")

    def forward(self, x):
        h = self.enc(x)
        if self.hop and self.training:
            h = h.to("cuda:1")  # hop
        return self.dec(h)  # dec entry


# 1. placement without transfers -----------------------------------------------------------
def test_missing_transfer_between_stages_is_caught_at_the_stage_entry():
    model = Split(hop=False)
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            model(torch.randn(4, 64, device="cuda:0"))
    f = err.value.finding
    assert (f.code, f.line, f.modules, f.devices) == (
        "MP001",
        line_of(Split.forward, "# dec entry"),
        ("model.dec",),
        ("cuda:1", "cuda:0"),
    )


def test_cpu_batch_into_the_first_stage():
    model = Split()
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            model(torch.randn(4, 64))  # cpu batch
    f = err.value.finding
    # The model spans two GPUs and its forward never moves its input: the caller's missing `.to()` is
    # reported at the model's call (as the linter does), naming the stage that needed the batch.
    assert f.modules == ("model", "model.enc.0") and f.devices == ("cuda:0", "cpu")
    assert f.line == line_of(test_cpu_batch_into_the_first_stage, "# cpu batch")
    assert f"{line_of(Split.forward, 'h = self.enc(x)')}" in f.message


def test_labels_on_the_first_device_at_the_loss_line():
    model = Split()
    labels = torch.randint(0, 64, (4,), device="cuda:0")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            out = model(torch.randn(4, 64, device="cuda:0"))
            nn.functional.cross_entropy(out, labels)  # loss
    f = err.value.finding
    assert f.line == line_of(test_labels_on_the_first_device_at_the_loss_line, "# loss")
    assert set(f.devices) == {"cuda:0", "cuda:1"}
    assert f.code == "MP008"  # a loss: the fix moves the labels, not a module
    assert "`.to('cuda:1')`" in f.suggestion


def test_mismatch_inside_forward_at_the_op_line_with_module_path():
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(8, 8).to("cuda:1")
            self.bias = torch.zeros(8, device="cuda:0")  # a plain attribute: never moved with the module

        def forward(self, x):
            return self.q(x) + self.bias  # op

    model = nn.Module()
    model.blocks = nn.ModuleList([nn.Identity(), Attn()])
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            model.blocks[1](torch.randn(2, 8, device="cuda:1"))
    f = err.value.finding
    assert f.modules == ("model.blocks.1",) and f.line == line_of(Attn.forward, "# op")


def test_move_mode_lists_every_mismatch_in_one_run():
    model = Split(hop=False)
    labels = torch.randn(4, 64, device="cuda:0")
    with mpcheck.debug(model, on_mismatch="move", report=None) as dbg:
        out = model(torch.randn(4, 64))  # cpu batch and a missing hop
        nn.functional.mse_loss(out, labels).backward()
    assert sorted(f.modules for f in dbg.findings if f.modules) == [("model", "model.enc.0"), ("model.dec",)]
    assert len(dbg.findings) == 3  # enc entry, dec entry, the loss


# 4. set_device changes what a bare .cuda() means ---------------------------------------------
def test_set_device_moves_a_bare_cuda_layer_and_the_mismatch_follows():
    torch.cuda.set_device(1)
    try:
        head = nn.Linear(8, 8).cuda()  # meant for cuda:0
    finally:
        torch.cuda.set_device(0)
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(head, report=None):
            head(torch.randn(2, 8, device="cuda:0"))
    assert err.value.finding.devices == ("cuda:1", "cuda:0")


# 7. an eval-only path that skips the transfer ------------------------------------------------
def test_eval_path_without_the_transfer():
    model = Split(hop=True).eval()
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None), torch.no_grad():
            model(torch.randn(4, 64, device="cuda:0"))
    assert err.value.finding.line == line_of(Split.forward, "# dec entry")


# 2. DataParallel / DDP with device_ids on a split model ---------------------------------------
def test_data_parallel_on_a_split_model_at_the_wrap_line():
    model = Split()
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(report=None):
            nn.DataParallel(model)  # wrap
    f = err.value.finding
    assert f.code == "MP002" and f.line == line_of(test_data_parallel_on_a_split_model_at_the_wrap_line, "# wrap")


@pytest.fixture
def gloo_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_ddp_with_device_ids_on_a_split_model(gloo_group):
    model = Split()
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(report=None):
            nn.parallel.DistributedDataParallel(model, device_ids=[0])  # ddp
    f = err.value.finding
    assert f.code == "MP002" and f.line == line_of(test_ddp_with_device_ids_on_a_split_model, "# ddp")


def test_ddp_with_device_ids_none_around_a_split_model_runs_clean(gloo_group):
    model = Split()
    with mpcheck.debug(model, report=None) as dbg:
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=None)
        ddp(torch.randn(4, 64, device="cuda:0")).sum().backward()
    assert dbg.findings == []
    assert model.enc[0].weight.grad.device.index == 0 and model.dec[0].weight.grad.device.index == 1


# 5. .cuda() / .to() collapsing a split model ------------------------------------------------------
def test_cuda_collapsing_a_split_model_at_the_line():
    model = Split()
    with mpcheck.debug(model, report=None) as dbg:
        model.cuda(0)  # collapse
        model.to("cuda:0")  # collapse again? no: already one device
    (f,) = dbg.findings
    assert f.code == "MP007" and f.line == line_of(test_cuda_collapsing_a_split_model_at_the_line, "# collapse")


# 6. transfers as cost ---------------------------------------------------------------------------
def test_round_trip_with_both_lines():
    x = torch.randn(128, 128, device="cuda:0")
    with mpcheck.debug(report=None) as dbg:
        y = x.to("cuda:1")  # there
        z = y.to("cuda:0")  # back
    assert z.device == x.device
    (f,) = dbg.findings
    assert f.code == "MP005"
    assert f.line == line_of(test_round_trip_with_both_lines, "# back")
    assert f.extra["first_line"] == line_of(test_round_trip_with_both_lines, "# there")


def test_round_trip_through_the_cpu():
    x = torch.randn(16, device="cuda:1")
    with mpcheck.debug(report=None) as dbg:
        x.cpu().cuda(1)  # cpu round trip
    assert [f.code for f in dbg.findings] == ["MP005"]


def test_mask_moved_by_every_layer_is_a_repeated_transfer(monkeypatch):
    monkeypatch.setenv("MPCHECK_REPEAT_MIN_BYTES", "0")  # a 64-byte mask: below the default threshold

    class Layer(nn.Module):
        def __init__(self, mask):
            super().__init__()
            self.lin = nn.Linear(16, 16).to("cuda:1")
            self.mask = mask  # shared, lives on cuda:0

        def forward(self, x):
            return self.lin(x) * self.mask.to(x.device)  # per-layer move

    mask = torch.ones(16, device="cuda:0")
    model = nn.Sequential(*[Layer(mask) for _ in range(4)])
    with mpcheck.debug(model, report=None) as dbg:
        model(torch.randn(2, 16, device="cuda:1"))
    (f,) = dbg.findings  # one finding for the line, naming the layers that repeat it
    assert f.code == "MP011" and f.line == line_of(Layer.forward, "# per-layer")
    assert f.extra["count"] == 3 and f.modules == ("model.1", "model.2", "model.3")


def test_layers_alternating_gpus_are_reported_once_with_the_grouping():
    class RoundRobin(nn.Module):
        def __init__(self, depth=8):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(64, 64).to(f"cuda:{i % 2}") for i in range(depth)])

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x.to(layer.weight.device)))  # per-layer hop
            return x

    model = RoundRobin()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with mpcheck.debug(model, report=None) as dbg:
        for _ in range(3):
            model(torch.randn(8, 64, device="cuda:0")).sum().backward()
            opt.step()
    (f,) = dbg.findings  # once for the chain, counted per forward pass
    assert f.code == "MP006" and f.line == line_of(RoundRobin.forward, "# per-layer hop")
    assert f.devices == ("cuda:0", "cuda:1") and f.modules == ("model.layers",)
    assert f.extra["crossings"] == 7 and f.extra["count"] == 3
    assert "model.layers 0-3 on cuda:0, 4-7 on cuda:1" in f.suggestion


def test_correct_training_is_clean_bit_identical_and_its_transfers_counted():
    def train(use_debug):
        torch.manual_seed(0)
        model = Split()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        torch.manual_seed(1)
        data = [(torch.randn(8, 64, device="cuda:0"), torch.randn(8, 64, device="cuda:1")) for _ in range(4)]
        losses = []

        def loop():
            for x, y in data:
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                losses.append(loss.detach())

        if use_debug:
            with mpcheck.debug(model, report=None) as dbg:
                loop()
            return losses, model, dbg
        loop()
        return losses, model, None

    plain, m1, _ = train(False)
    checked, m2, dbg = train(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, checked))
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    assert dbg.findings == []
    pairs = dbg.ledger.by_pair()
    hop = [
        a
        for (site, s, d, ph), a in dbg.ledger.by_site().items()
        if site.line == line_of(Split.forward, "# hop") and ph == "forward"
    ]
    assert [a.count for a in hop] == [4]
    assert pairs[("cuda:1", "cuda:0", "backward")].count == 4
    # clip_grad_norm_ over a split model: tiny copies every step, at the user's clip line
    clip = [
        k
        for k in dbg.ledger.by_site()
        if k[0].line
        == line_of(test_correct_training_is_clean_bit_identical_and_its_transfers_counted, "clip_grad_norm_")
    ]
    assert clip
    assert all(a.timed == a.count for a in pairs.values())
    mem = dbg.ledger.memory
    assert mem["cuda:0"]["params"] == mem["cuda:1"]["params"] == (64 * 64 + 64) * 4
    assert mem["cuda:0"]["optimizer_state"] > 0 and mem["cuda:1"]["peak_allocated"] > 0


def test_reported_time_matches_a_hand_timed_copy():
    src = torch.randn(16 * 1024 * 1024, device="cuda:0")  # 64 MiB
    for _ in range(3):
        src.to("cuda:1")
    torch.cuda.synchronize(0)
    hand = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(torch.cuda.current_stream(0))
        src.to("cuda:1")
        b.record(torch.cuda.current_stream(0))
        b.synchronize()
        hand.append(a.elapsed_time(b))
    with mpcheck.debug(report=None) as dbg:
        for _ in range(10):
            src.to("cuda:1")
            dbg.step()
    agg = dbg.ledger.by_pair()[("cuda:0", "cuda:1", "forward")]
    assert agg.count == 10 and agg.bytes == 10 * src.numel() * 4
    per_copy = agg.time_ms / agg.count
    assert per_copy == pytest.approx(statistics.median(hand), rel=0.15)


def test_transfer_timings_reuse_their_events_and_follow_the_current_stream(monkeypatch):
    # real/devices.py's EventTimer: a timing's two events go back to their device's pool once read at
    # a step end, so ten steps of one copy make two events; a copy on a side stream is timed there.
    made = []
    event = torch.cuda.Event

    class Counted(event):
        def __new__(cls, **kwargs):
            made.append(kwargs)
            return super().__new__(cls, **kwargs)

    monkeypatch.setattr(torch.cuda, "Event", Counted)
    src = torch.randn(1 << 20, device="cuda:0")
    side = torch.cuda.Stream(0)
    with mpcheck.debug(report=None) as dbg:
        for _ in range(10):
            src.to("cuda:1")
            torch.cuda.synchronize(0)  # the GPU has passed both events: read at this step's end
            dbg.step()
        assert len(made) == 2
        with torch.cuda.stream(side):
            src.to("cuda:1")
        side.synchronize()
        dbg.step()
        streams = dbg.session.devices._timer._streams
        assert any(key[0] == side.stream_id and key[1] == 0 for key in streams)
    agg = dbg.ledger.by_pair()[("cuda:0", "cuda:1", "forward")]
    assert agg.count == agg.timed == 11 and agg.time_ms > 0


def test_strict_mode_catches_a_backward_gradient_on_the_wrong_device():
    other = torch.ones(8, device="cuda:1")

    class Bad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2  # bad fn

        @staticmethod
        def backward(ctx, g):
            return g * other

    x = torch.ones(8, device="cuda:0", requires_grad=True)
    with mpcheck.debug(report=None, strict=True, on_mismatch="move") as dbg:
        Bad.apply(x).sum().backward()
    f = next(f for f in dbg.findings if "backward" in f.message)
    assert set(f.devices) == {"cuda:0", "cuda:1"}


def test_trace_and_json_report(tmp_path):
    import json

    model = Split()
    trace = tmp_path / "t.json"
    with mpcheck.debug(model, report=None, trace=str(trace)) as dbg:
        for _ in range(2):
            model(torch.randn(4, 64, device="cuda:0")).sum().backward()
            dbg.step()
    events = json.loads(trace.read_text())["traceEvents"]
    copies = [e for e in events if e.get("ph") == "X" and "->" in e["name"]]
    assert len(copies) == 4 and all(e["dur"] > 0 for e in copies)


def test_peak_allocated_is_torch_max_memory_allocated():
    # Read from the nested statistics (not max_memory_allocated's flattened dict): the same number.
    from mpcheck.runtime.real.devices import CudaDevices

    keep = [torch.empty(1 << 20, device=f"cuda:{i}") for i in range(2)]
    devices = CudaDevices()
    for i in range(2):
        assert devices.peak_allocated(f"cuda:{i}") == torch.cuda.max_memory_allocated(i) > 0
    assert devices.peak_allocated("cpu") is None
    del keep
