"""Each bug family of notes/domain.md that fails or wastes time at run time, caught by the dry run
with the right rule code at the right line, and the program still runs to its end (on_mismatch=move)."""

import pytest
from dryrun_helpers import codes_at

STAGES = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Stage(nn.Module):
    def __init__(self, dev, d_in=16, d_out=16):
        super().__init__()
        self.lin = nn.Linear(d_in, d_out).to(dev)
    def forward(self, x):
        return torch.relu(self.lin(x))
"""

# Two stages with the right transfer between them.
SPLIT_NET = (
    STAGES
    + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0, self.s1 = Stage("cuda:0"), Stage("cuda:1")
    def forward(self, x):
        return self.s1(self.s0(x.to("cuda:0")).to("cuda:1"))
"""
)


def test_missing_transfer_between_stages(script, dryrun_cli):
    s = script(
        STAGES
        + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0 = Stage("cuda:0")
        self.s1 = Stage("cuda:1")
    def forward(self, x):
        h = self.s0(x.to("cuda:0"))
        return self.s1(h)  # <- bug
net = Net()
for _ in range(2):
    net(torch.randn(4, 16)).sum().backward()
print("finished")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1
    assert codes_at(report) == [("MP001", s.line("bug"))]
    f = report["findings"][0]
    assert f["devices"] == ["cuda:1", "cuda:0"]
    assert f["modules"] == ["net.s1"]
    assert "to('cuda:1')" in f["suggestion"]
    assert f["extra"]["count"] == 2  # both iterations, one finding


def test_cpu_batch_into_first_stage_and_loss_on_wrong_device(script, dryrun_cli):
    s = script(
        STAGES
        + """
s0, s1 = Stage("cuda:0"), Stage("cuda:1", d_out=3)
x, y = torch.randn(4, 16), torch.randint(0, 3, (4,))
h = s0(x)  # <- input
out = s1(h.to("cuda:1"))
loss = F.cross_entropy(out, y.to("cuda:0"))  # <- loss
loss.backward()
"""
    )
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    assert status == 1
    assert codes_at(report) == [("MP001", s.line("input")), ("MP008", s.line("loss"))]
    loss = [f for f in report["findings"] if f["line"] == s.line("loss")][0]
    assert set(loss["devices"]) == {"cuda:0", "cuda:1"}
    # a loss's fix moves the targets to the logits' device, never a module
    assert loss["suggestion"] == "move the targets to the predictions' device with `.to('cuda:1')` before the loss"
    assert "argument 1 (an int64 tensor of shape (4,))" in loss["message"]


# A model over two GPUs whose forward does not move its input: the CPU batch passed by the caller is the
# missing transfer (the validation loop forgot what the training loop does), reported at the call, as the
# linter does; a tensor already on one of the model's GPUs and not carried to the next stage is the
# forward's hop, reported inside it.
SPREAD = (
    STAGES
    + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0, self.s1 = Stage("cuda:0"), Stage("cuda:1")
    def forward(self, x, bias):
        h = self.s0(x)
        return self.s1(h.to("cuda:1")) + bias  # <- bias
net = Net()
"""
)


def test_a_cpu_batch_into_a_spread_model_is_reported_at_the_call(script, dryrun_cli):
    s = script(
        SPREAD
        + """
with torch.no_grad():
    out = net(torch.randn(4, 16), torch.zeros(16, device="cuda:1"))  # <- call
"""
    )
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("call"))]
    f = report["findings"][0]
    assert f["message"].startswith("input of Net 'net': argument 0 (a float32 tensor of shape (4, 16)) is on cpu")
    assert "which needs cuda:0" in f["message"] and "input of Linear 'net.s0.lin'" in f["message"]
    assert f["suggestion"].startswith("move it with `.to('cuda:0')` before this call")


def test_an_input_on_a_gpu_of_the_model_not_carried_to_the_next_stage_is_reported_in_forward(script, dryrun_cli):
    s = script(
        SPREAD
        + """
out = net(torch.randn(4, 16, device="cuda:0"), torch.zeros(16, device="cuda:0"))
"""
    )
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("bias"))]


def test_a_spread_model_whose_inputs_are_moved_by_the_caller_is_silent(script, dryrun_cli):
    s = script(
        SPREAD
        + """
out = net(torch.randn(4, 16).to("cuda:0"), torch.zeros(16).to("cuda:1"))
out.sum().backward()
"""
    )
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"], report["stopped"]) == (0, [], None)


def test_split_model_in_data_parallel_reported_at_the_wrap(script, dryrun_cli):
    s = script(
        SPLIT_NET
        + """
model = nn.DataParallel(Net())  # <- wrap
model(torch.randn(4, 16).to("cuda:0")).sum().backward()
print("went on")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1
    assert ("MP002", s.line("wrap")) in codes_at(report)
    assert "Traceback" not in err


def test_split_model_in_ddp_with_device_ids(script, dryrun_cli):
    s = script(
        SPLIT_NET
        + """
import os, tempfile
import torch.distributed as dist
# A file store, not a TCP port: two test runs at once on one machine must not collide.
store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
ddp = nn.parallel.DistributedDataParallel(Net(), device_ids=[0])  # <- wrap
ddp(torch.randn(4, 16)).sum().backward()
dist.destroy_process_group()
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP002", s.line("wrap"))]


def test_parallel_primitives_outside_a_split_model_run_as_their_copies(script, dryrun_cli):
    """A batch cut for replicas by hand is DataParallel's own use, not a bug: it runs (it used to stop
    the dry run, its collectives being CUDA kernels) and lands where CUDA would put it."""
    s = script("""
import torch
from torch.nn.parallel import scatter
x = torch.randn(8, 4).to("cuda:0")
parts = scatter(x, [0, 1])
assert [str(p.device) for p in parts] == ["cuda:0", "cuda:1"]
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0 and report["findings"] == [] and not report["stopped"], err


def test_set_device_moves_a_bare_cuda_layer(script, dryrun_cli):
    s = script(
        STAGES
        + """
torch.cuda.set_device(1)
enc = nn.Linear(16, 16).cuda()        # <- placed (meant for cuda:0, lands on cuda:1)
torch.cuda.set_device(0)
dec = nn.Linear(16, 4).cuda()
h = enc(torch.randn(2, 16).to("cuda:0"))  # <- use
"""
    )
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    # reported at the placement set_device redirected, not at the call that fails (MP004)
    assert codes_at(report) == [("MP004", s.line("placed"))]
    f = report["findings"][0]
    assert f["devices"] == ["cuda:1", "cuda:0"]
    assert f"train.py:{s.line('use')}" in f["message"]


def test_cuda_on_a_split_model_collapses_it(script, dryrun_cli):
    s = script(
        SPLIT_NET
        + """
net = Net()
net.cuda()  # <- collapse
"""
    )
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP007", s.line("collapse"))]
    # the memory estimate sees the collapse: everything on cuda:0 at the end
    assert report["memory"]["cuda:0"]["params"] > 0


def test_round_trip_and_repeated_transfer(script, dryrun_cli, monkeypatch):
    monkeypatch.setenv("MPCHECK_REPEAT_MIN_BYTES", "0")  # a 256-byte table: below the default threshold
    s = script(
        STAGES
        + """
pos = torch.randn(4, 16)                   # a table on the CPU
s0, s1 = Stage("cuda:0"), Stage("cuda:1")
x = torch.randn(4, 16).to("cuda:0")
h = s0(x)
h1 = h.to("cuda:1")
back = h1.to("cuda:0")  # <- roundtrip
for layer in range(3):
    p = pos.to("cuda:1")  # <- repeat
    h1 = s1(h1 + p)
"""
    )
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    assert status == 0  # wasted time, not a crash: warnings
    assert codes_at(report) == [("MP005", s.line("roundtrip")), ("MP011", s.line("repeat"))]
    assert {f["severity"] for f in report["findings"]} == {"warning"}


def test_eval_only_branch_that_skips_a_transfer(script, dryrun_cli):
    s = script(
        STAGES
        + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0, self.s1 = Stage("cuda:0"), Stage("cuda:1")
    def forward(self, x):
        h = self.s0(x.to("cuda:0"))
        if self.training:
            h = h.to("cuda:1")
            return self.s1(h)
        return self.s1(h)  # <- evalbug
net = Net()
net(torch.randn(2, 16)).sum().backward()
net.eval()
with torch.no_grad():
    net(torch.randn(2, 16))
"""
    )
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    assert status == 1
    assert codes_at(report) == [("MP001", s.line("evalbug"))]


def test_layers_alternating_devices_cross_at_every_layer(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

class RoundRobin(nn.Module):
    def __init__(self, depth=8):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16).to(f"cuda:{i % 2}") for i in range(depth)])
    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x.to(layer.weight.device)))  # <- pingpong
        return x
net = RoundRobin()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(3):
    net(torch.randn(4, 16)).sum().backward()
    opt.step()
    opt.zero_grad()
print("finished")
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err  # a warning: the program ran to its end
    assert codes_at(report) == [("MP006", s.line("pingpong"))]
    (f,) = report["findings"]
    assert f["devices"] == ["cuda:0", "cuda:1"]
    assert f["modules"] == ["net.layers"]
    assert "7 times per forward" in f["message"]
    assert "net.layers 0-3 on cuda:0, 4-7 on cuda:1" in f["suggestion"]
    assert f["extra"]["count"] == 3  # once per forward pass, one finding


def test_unrolled_alternating_stages_reported_at_the_first_transfer_back(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

class Alternating(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = nn.Linear(16, 16).to("cuda:0")
        self.adapt1 = nn.Linear(16, 16).to("cuda:1")
        self.enc2 = nn.Linear(16, 16).to("cuda:0")
        self.adapt2 = nn.Linear(16, 16).to("cuda:1")
    def forward(self, x):
        x = torch.relu(self.enc1(x.to("cuda:0")))
        x = torch.relu(self.adapt1(x.to("cuda:1")))
        x = torch.relu(self.enc2(x.to("cuda:0")))  # <- back
        return torch.relu(self.adapt2(x.to("cuda:1")))
model = Alternating()
with torch.no_grad():
    for _ in range(2):
        model(torch.randn(4, 16))
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP006", s.line("back"))], err
    (f,) = report["findings"]
    assert "3 times per forward" in f["message"]
    assert "model: enc1, adapt1 on cuda:0; enc2, adapt2 on cuda:1" in f["suggestion"]


def test_one_mismatch_line_met_by_several_gpus_is_one_finding_listing_them(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

layers = [nn.Linear(8, 8).to(f"cuda:{i}") for i in range(4)]
mask = torch.ones(8, device="cuda:0")
h = torch.randn(2, 8, device="cuda:0")
for i, layer in enumerate(layers):
    h = layer(h.to(f"cuda:{i}")) * mask  # <- use
""")
    status, report, _ = dryrun_cli(s, "--gpus", "4")
    assert codes_at(report) == [("MP001", s.line("use"))]
    f = report["findings"][0]
    assert set(f["devices"]) == {"cuda:0", "cuda:1", "cuda:2", "cuda:3"} and f["extra"]["count"] == 3


# A custom autograd Function that hops to the next GPU in forward and returns the gradient unmoved:
# PyTorch's engine refuses it in backward ("returned an invalid gradient ... expected device"); the
# finding is at the Function's return, and the fixed backward runs clean.
CUSTOM_HOP = """
import torch
import torch.nn as nn


class Hop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dst):
        ctx.src = x.device
        return x.to(dst)

    @staticmethod
    def backward(ctx, g):
        return GRAD, None  # <- return


a = nn.Linear(8, 8).to("cuda:0")
b = nn.Linear(8, 2).to("cuda:1")
for _ in range(2):
    b(Hop.apply(a(torch.randn(4, 8, device="cuda:0")), torch.device("cuda:1"))).pow(2).mean().backward()
print("finished")
"""


def test_a_custom_function_returning_its_gradient_on_the_wrong_device(script, dryrun_cli):
    s = script(CUSTOM_HOP.replace("GRAD", "g"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("return"))]
    assert report["findings"][0]["devices"] == ["cuda:0", "cuda:1"]
    assert "invalid gradient" in report["stopped"]


def test_a_custom_function_returning_its_gradient_on_the_input_device_is_silent(script, dryrun_cli):
    status, report, err = dryrun_cli(script(CUSTOM_HOP.replace("GRAD", "g.to(ctx.src)")), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


# pack_padded_sequence reads its lengths on the host: moved to a GPU with the batch, PyTorch refuses them.
PACKED = """
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence

emb = nn.Embedding(30, 16).to("cuda:0")
lstm = nn.LSTM(16, 16, batch_first=True).to("cuda:1")
for _ in range(2):
    lengths = torch.tensor([7, 5, 3])
    ids = torch.randint(1, 30, (3, 7)).to("cuda:0")
    lengths = LENGTHS
    packed = pack_padded_sequence(emb(ids).to("cuda:1"), lengths, batch_first=True, enforce_sorted=False)  # <- pack
    out, (h, c) = lstm(packed)
    h[-1].sum().backward()
print("finished")
"""


def test_packed_sequence_lengths_on_a_gpu(script, dryrun_cli):
    s = script(PACKED.replace("LENGTHS", 'lengths.to("cuda:1")'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("pack"))]
    assert report["findings"][0]["devices"] == ["cuda:1", "cpu"]


@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_packed_sequence_lengths_on_the_host_run_clean(script, dryrun_cli, backing):
    status, report, err = dryrun_cli(script(PACKED.replace("LENGTHS", "lengths")), "--gpus", "2", "--backing", backing)
    assert status == 0, err
    assert report["findings"] == []
