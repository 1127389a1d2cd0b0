"""Issue 11's waste families on 2 real GPUs under the debug mode, each at the line to change, with the
correct variant silent: a GPU -> host -> GPU detour (MP005), logits moved to the labels' GPU (MP014
warning), a fresh copy of a buffer's data in every forward (MP011 by provenance), a host constant moved
by every layer (MP011), a module shared by all stages on the first GPU and round-robin placement (MP006).
The same programs run on virtual GPUs in tests/dryrun/test_waste.py.

Skipped without 2 CUDA devices (CI has none)."""

import pytest
from gpu_helpers import line_of

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mpcheck  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() != 2, reason="needs exactly 2 CUDA devices"),
]


def _found(dbg):
    return sorted((f.code, f.line) for f in dbg.findings)


# MP005: a detour through the host -------------------------------------------------------------------
def _host_hop(detour: bool):
    a, b = nn.Linear(256, 256).to("cuda:0"), nn.Linear(256, 256).to("cuda:1")
    with mpcheck.debug(report=None) as dbg:
        for _ in range(2):
            h = a(torch.randn(128, 256, device="cuda:0"))
            if detour:
                h = h.cpu()
            b(h.to("cuda:1")).sum().backward()  # hop
    return dbg


def test_a_gpu_to_gpu_copy_through_the_host():
    assert _found(_host_hop(True)) == [("MP005", line_of(_host_hop, "# hop"))]
    assert _host_hop(False).findings == []


# MP014 (warning): logits moved to the labels' GPU -------------------------------------------------------
def _logits(logits_move: bool):
    s0, s1 = nn.Linear(64, 64).to("cuda:0"), nn.Linear(64, 32000).to("cuda:1")
    with mpcheck.debug(report=None) as dbg:
        for _ in range(2):
            y = torch.randint(0, 32000, (16,), device="cuda:0")
            logits = s1(s0(torch.randn(16, 64, device="cuda:0")).to("cuda:1"))
            if logits_move:
                loss = nn.functional.cross_entropy(logits.to(y.device), y)  # logits move
            else:
                loss = nn.functional.cross_entropy(logits, y.to(logits.device))
            loss.backward()
    return dbg


def test_logits_moved_to_the_labels_gpu():
    dbg = _logits(True)
    assert _found(dbg) == [("MP014", line_of(_logits, "# logits move"))]
    (f,) = dbg.findings
    assert f.severity == "warning" and "copies 2.0 MiB less per forward" in f.message
    assert _logits(False).findings == []


# MP011: a fresh copy computed only from a buffer ---------------------------------------------------------
class Cams(nn.Module):
    def __init__(self, where="cpu"):
        super().__init__()
        self.register_buffer("proj", torch.randn(6, 64, 64, device=where))
        self.head = nn.Linear(64, 64).to("cuda:0")

    def forward(self, x, cam):
        p = self.proj[cam].repeat(x.shape[0], 1, 1).float().to("cuda:0")  # fresh copy
        return self.head(torch.bmm(p, x))


def _cams(where):
    model = Cams(where)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with mpcheck.debug(model, report=None) as dbg:
        for _ in range(3):
            model(torch.randn(8, 64, 64, device="cuda:0"), 2).sum().backward()
            opt.step()
    return dbg


def test_a_fresh_copy_of_a_buffers_data_every_forward():
    dbg = _cams("cpu")
    assert _found(dbg) == [("MP011", line_of(Cams.forward, "# fresh copy"))]
    assert "computed only from buffers and constants" in dbg.findings[0].message
    assert _cams("cuda:0").findings == []  # the buffer lives where it is used: no transfer


# MP011: a host constant moved by every layer ------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, dev):
        super().__init__()
        self.lin = nn.Linear(256, 256).to(dev)
        self.dev = dev

    def forward(self, x, mask):
        return self.lin(x) * mask.to(self.dev)  # mask (a no-op when it is already there)


def _per_layer(on_host: bool):
    blocks = nn.ModuleList([Block(f"cuda:{i * 2 // 8}") for i in range(8)])
    opt = torch.optim.SGD(blocks.parameters(), lr=0.1)
    mask = torch.ones(256, 256).tril()
    kept = {d: mask.to(d) for d in ("cuda:0", "cuda:1")}  # one copy per GPU, made once
    with mpcheck.debug(blocks, report=None) as dbg:
        for _ in range(2):
            x = torch.randn(256, 256, device="cuda:0")
            for b in blocks:
                x = b(x.to(b.dev), mask if on_host else kept[b.dev])
            x.sum().backward()
            opt.step()
    return dbg


def test_a_host_constant_moved_by_every_layer():
    dbg = _per_layer(True)
    assert _found(dbg) == [("MP011", line_of(Block.forward, "# mask"))] * 2  # one per destination GPU
    assert _per_layer(False).findings == []


# MP006: a module shared by all stages, round robin --------------------------------------------------
class Net(nn.Module):
    def __init__(self, place, shared):
        super().__init__()
        self.devs = [place(i) for i in range(8)]
        self.blocks = nn.ModuleList([nn.Linear(256, 256).to(d) for d in self.devs])
        self.shared = shared
        self.norm = nn.LayerNorm(256).to("cuda:0")

    def forward(self, x):
        for b, dev in zip(self.blocks, self.devs):
            h = self.norm(x.to("cuda:0")) if self.shared else x  # back to the shared norm
            x = b(h.to(dev))  # layer
        return x


def _net(place, shared):
    model = Net(place, shared)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with mpcheck.debug(model, report=None) as dbg:
        for _ in range(2):
            model(torch.randn(256, 256, device="cuda:0")).sum().backward()
            opt.step()
    return dbg


def test_a_module_shared_by_all_stages_on_the_first_gpu():
    dbg = _net(lambda i: f"cuda:{i * 2 // 8}", shared=True)
    assert _found(dbg) == [("MP006", line_of(Net.forward, "# back to the shared norm"))]
    assert "model.norm on cuda:0 is shared by every stage" in dbg.findings[0].message
    assert _net(lambda i: f"cuda:{i * 2 // 8}", shared=False).findings == []


def test_round_robin_placement_gets_the_blocked_grouping():
    dbg = _net(lambda i: f"cuda:{i % 2}", shared=False)
    assert _found(dbg) == [("MP006", line_of(Net.forward, "# layer"))]
    assert "(model.blocks 0-3 on cuda:0, 4-7 on cuda:1)" in dbg.findings[0].suggestion


# MP006 under torch.no_grad(): expert blocks summed back where the tokens stay, against blocks fed only by
# the previous result (no autograd graph to ask: pingpong.py's Chain.stayed) ------------------------------
class _ExpertBlock(nn.Module):
    def __init__(self, residual: bool):
        super().__init__()
        self.residual = residual
        self.mix = nn.Linear(64, 64).to("cuda:0")
        self.expert = nn.Linear(64, 64).to("cuda:1")

    def forward(self, x):
        if self.residual:
            x = x + self.mix(x)
            top = x.sum(-1) > 0
            y = torch.zeros_like(x)
            y[top] = self.expert(x[top].to("cuda:1")).to("cuda:0")
            return x + y
        x = self.mix(x.to("cuda:0"))  # back
        return self.expert(x.to("cuda:1"))


def _expert_stack(residual: bool):
    blocks = nn.Sequential(*[_ExpertBlock(residual) for _ in range(5)])
    with mpcheck.debug(report=None) as dbg, torch.no_grad():
        for _ in range(2):
            blocks(torch.randn(32, 64, device="cuda:0"))
    return dbg


def test_expert_blocks_under_no_grad_are_not_a_ping_pong_but_a_chain_of_results_is():
    assert _expert_stack(True).findings == []
    assert _found(_expert_stack(False)) == [("MP006", line_of(_ExpertBlock.forward, "# back"))]
