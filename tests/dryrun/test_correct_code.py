"""Correct model-parallel code runs clean on virtual GPUs (no finding, the program's own status)."""

import pytest
from dryrun_helpers import codes_at

PIPELINE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0 = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU()).to("cuda:0")
        self.s1 = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3)).to("cuda:1")
    def forward(self, x):
        return self.s1(self.s0(x.to("cuda:0")).to("cuda:1"))
"""


def test_stages_with_proper_transfers_run_clean(script, dryrun_cli):
    s = script(
        PIPELINE
        + """
model = TwoStage()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    x, y = torch.randn(8, 16), torch.randint(0, 3, (8,))
    loss = F.cross_entropy(model(x), y.to("cuda:1"))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
assert model.s0[1].running_mean.device == torch.device("cuda:0")
assert model.s1[0].weight.device == torch.device("cuda:1")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
    pairs = {(p["src"], p["dst"], p["phase"]) for p in report["transfers"]["by_pair"]}
    assert ("cuda:0", "cuda:1", "forward") in pairs
    assert ("cuda:1", "cuda:0", "backward") in pairs
    assert report["transfers"]["steps"] == 3


def test_accelerate_style_hooks_that_move_inputs_run_clean(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

def move_inputs_to(module, dev):
    def hook(mod, args, kwargs):
        args = tuple(a.to(dev) if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        return args, kwargs
    module.register_forward_pre_hook(hook, with_kwargs=True)

blocks = nn.ModuleList([nn.Linear(16, 16) for _ in range(4)])
device_map = {0: "cuda:0", 1: "cuda:0", 2: "cuda:1", 3: "cuda:1"}
for i, b in enumerate(blocks):
    b.to(device_map[i])
    move_inputs_to(b, device_map[i])
h = torch.randn(2, 16)
for b in blocks:
    h = b(h)
h.sum().backward()
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_accelerate_style_wrapped_forward_runs_clean(script, dryrun_cli):
    s = script("""
import functools
import torch
import torch.nn as nn

def align_devices(module, dev):
    old_forward = module.forward
    @functools.wraps(old_forward)
    def new_forward(*args, **kwargs):
        args = tuple(a.to(dev) for a in args)
        return old_forward(*args, **kwargs)
    module.forward = new_forward

blocks = [nn.Linear(16, 16).to(d) for d in ("cuda:0", "cuda:1", "cuda:1")]
for b, d in zip(blocks, ("cuda:0", "cuda:1", "cuda:1")):
    align_devices(b, d)
h = torch.randn(2, 16)
for b in blocks:
    h = b(h)
bad = blocks[0].weight + blocks[1].weight  # <- bug
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("bug"))]  # the op-level check still applies


def test_ddp_without_device_ids_around_a_split_model(script, dryrun_cli):
    s = script(
        PIPELINE
        + """
import os, tempfile
import torch.distributed as dist
# A file store, not a TCP port: two test runs at once on one machine must not collide.
store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
model = TwoStage()
ddp = nn.parallel.DistributedDataParallel(model, device_ids=None, output_device=None)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for _ in range(2):
    loss = F.cross_entropy(ddp(torch.randn(8, 16)), torch.randint(0, 3, (8,)).to("cuda:1"))
    loss.backward()
    assert model.s0[0].weight.grad.device == torch.device("cuda:0")
    assert model.s1[0].weight.grad.device == torch.device("cuda:1")
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_program_status_is_kept(script, dryrun_cli):
    s = script("""
import sys, torch
x = torch.ones(2, device="cuda:1")
sys.exit(3)
""")
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    assert status == 3
    assert report["findings"] == []


def test_activation_checkpointing_and_custom_function(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return x * w
    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return g * w, None

class Stage(nn.Module):
    def __init__(self, dev):
        super().__init__()
        self.lin = nn.Linear(8, 8).to(dev)
        self.w = torch.full((8,), 2.0, device=dev)
    def forward(self, x):
        return Scale.apply(self.lin(x), self.w)

s0, s1 = Stage("cuda:0"), Stage("cuda:1")
h = checkpoint(s0, torch.randn(2, 8).to("cuda:0"), use_reentrant=False)
out = checkpoint(s1, h.to("cuda:1"), use_reentrant=False)
out.sum().backward()
assert s0.lin.weight.grad.device == torch.device("cuda:0")
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_checkpointed_blocks_whose_ops_save_their_outputs_run_clean(script, dryrun_cli, backing):
    # ReLU saves its result for backward, packed before the dry run labels it: checkpoint's determinism
    # check compared an unlabelled device (the backing's) with the recomputed virtual one and stopped.
    s = script("""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

blocks = [nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)).to(f"cuda:{i}") for i in range(2)]
h = torch.randn(4, 8, device="cuda:0", requires_grad=True)
for i, b in enumerate(blocks):
    h = checkpoint(b, h.to(f"cuda:{i}"), use_reentrant=False)
h.sum().backward()
assert blocks[1][0].weight.grad.device == torch.device("cuda:1")
""")
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", backing)
    assert report["stopped"] is None, report["stopped"]
    assert (status, report["findings"]) == (0, [])


def test_data_parallel_on_a_single_device_model_runs_clean(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn
model = nn.DataParallel(nn.Linear(16, 4).cuda())
out = model(torch.randn(8, 16))   # DataParallel scatters the CPU batch itself
out.sum().backward()
assert out.device == torch.device("cuda:0")
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_grad_scaler_transfers_are_counted_but_not_reported(script, dryrun_cli):
    # GradScaler moves its found_inf flags between the devices itself (cuda:1 -> cuda:0 in
    # step(), back to cuda:1 unchanged in update()): PyTorch's code, not the user's to change.
    s = script("""
import torch
import torch.nn as nn

class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 2).to("cuda:1")
    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))

model = TwoStage()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sc = torch.amp.GradScaler("cuda")
for _ in range(3):
    with torch.autocast("cuda"):
        loss = model(torch.randn(4, 8)).float().pow(2).mean()
    sc.scale(loss).backward()
    sc.step(opt)   # <- step
    sc.update()    # <- update
    opt.zero_grad()
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
    # Still in the ledger, at the user's line that called into the library.
    sites = {(e["site"].rsplit(":", 1)[1], e["src"], e["dst"]) for e in report["transfers"]["by_site"]}
    assert (str(s.line("step")), "cuda:1", "cuda:0") in sites
    assert (str(s.line("update")), "cuda:0", "cuda:1") in sites


PIPELINE_OF_LAYERS = """
import torch
import torch.nn as nn

class Blocked(nn.Module):
    def __init__(self, gpus, depth=8):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16).to(f"cuda:{i * gpus // depth}") for i in range(depth)])
    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x.to(layer.weight.device)))
        return x.to("cuda:0")  # back to the labels: A -> ... -> A is one pass through each stage
"""


def test_grouped_layers_cross_once_per_stage_boundary(script, dryrun_cli):
    for gpus in (2, 4):
        s = script(
            PIPELINE_OF_LAYERS
            + f"""
net = Blocked({gpus})
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(3):
    y = torch.randn(4, 16).to("cuda:0")
    loss = (net(torch.randn(4, 16)) - y).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
""",
            name=f"train{gpus}.py",
        )
        status, report, err = dryrun_cli(s, "--gpus", str(gpus))
        assert status == 0, err
        assert report["findings"] == [], gpus
        forward = sum(
            p["count"] for p in report["transfers"]["by_pair"] if p["phase"] == "forward" and p["src"] != "cpu"
        )
        assert forward == 3 * gpus  # gpus - 1 boundaries and the way back, per step: counted, not reported


def test_one_hop_per_forward_over_many_steps_is_not_ping_pong(script, dryrun_cli):
    # The batch already sits on cuda:0 and the output comes back to it: cuda:0 -> cuda:1 -> cuda:0 in
    # every forward, and no optimizer step separates the forwards (inference).
    s = script(
        PIPELINE_OF_LAYERS
        + """
net = Blocked(2)
batches = [torch.randn(4, 16).to("cuda:0") for _ in range(6)]
with torch.no_grad():
    for x in batches:
        out = net(x)
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_one_input_fanned_out_to_experts_on_alternating_devices_is_not_ping_pong(script, dryrun_cli):
    # Mixture of experts dealt over two GPUs (i % 2): the same input goes to each expert and each
    # result comes back to cuda:0. Every crossing is a branch off the input, not the activation
    # going on from the last result (the dry run once chained them into cuda:0 -> 1 -> 0 -> 1 -> 0).
    s = script("""
import torch
import torch.nn as nn


class MoE(nn.Module):
    def __init__(self, d=8, n_experts=4):
        super().__init__()
        self.gate = nn.Linear(d, n_experts).to("cuda:0")
        self.experts = nn.ModuleList([nn.Linear(d, d).to(torch.device("cuda", i % 2)) for i in range(n_experts)])

    def forward(self, x):
        weights = torch.softmax(self.gate(x), dim=-1)
        out = torch.zeros_like(x)
        for i, e in enumerate(self.experts):
            out = out + weights[:, i : i + 1] * e(x.to(e.weight.device)).to(x.device)
        return out


moe = MoE()
opt = torch.optim.Adam(moe.parameters(), lr=1e-3)
x = torch.randn(5, 8, device="cuda:0")
for _ in range(2):
    loss = moe(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_a_torch_warning_points_at_the_users_line(script, dryrun_cli, recwarn):
    # (Not the "requires_grad=True to a scalar": PyTorch shows that one once per process.)
    s = script("""
import warnings
import torch

warnings.simplefilter("always")
t = torch.ones(2)
u = torch.tensor(t)  # <- warns
""")
    status, _, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    copies = [w for w in recwarn if "copy construct from a tensor" in str(w.message)]
    assert [(w.filename, w.lineno) for w in copies] == [(str(s.path), s.line("warns"))]
