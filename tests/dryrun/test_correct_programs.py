"""Correct programs that once gave a false finding or stopped the dry run, each beside the bug of its
family that must still be reported (found by writing correct model-parallel programs in many styles and
running them under `mpcheck dryrun --gpus 2` and `--gpus 4`)."""

import pytest
from dryrun_helpers import codes_at

GPUS = ["2", "4"]

# Activation checkpointing inside each stage: checkpoint's determinism check compares each saved
# tensor's device in forward and in recompute; a Tanh's result is saved before the dry run labels it.
CHECKPOINTED_STAGES = """
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

devs = [f"cuda:{i}" for i in range(torch.cuda.device_count())]


class Stage(nn.Module):
    def __init__(self, dev):
        super().__init__()
        self.dev = dev
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(3)]).to(dev)

    def forward(self, x):
        return checkpoint(self.layers, x.to(self.dev), use_reentrant=False)


stages = nn.ModuleList([Stage(d) for d in devs])
tail = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)]).to(devs[-1])
opt = torch.optim.SGD([*stages.parameters(), *tail.parameters()], lr=0.01)
for step in range(2):
    x = torch.randn(8, 64, requires_grad=True)
    for s in stages:
        x = s(x)
    checkpoint_sequential(tail, 2, x, use_reentrant=True).sum().backward()
    opt.step()
    opt.zero_grad()
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
def test_activation_checkpointing_in_every_stage_runs_clean(script, dryrun_cli, gpus):
    status, report, err = dryrun_cli(script(CHECKPOINTED_STAGES), "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


# An EMA of a split model's weights with one foreach call: the lists span the GPUs, pairwise on one.
EMA = """
import copy
import torch
import torch.nn as nn

last = f"cuda:{torch.cuda.device_count() - 1}"
model = nn.Sequential(nn.Linear(64, 64).to("cuda:0"), nn.Linear(64, 8).to(last))
ema = copy.deepcopy(model).requires_grad_(False)
shadow = SHADOW
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
for step in range(2):
    model[1](model[0](torch.randn(4, 64, device="cuda:0")).to(last)).sum().backward()
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        torch._foreach_lerp_(shadow, [p.detach() for p in model.parameters()], 0.01)  # <- lerp
        norms = torch._foreach_norm(shadow)
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
def test_a_foreach_call_over_lists_that_span_the_gpus_runs_clean(script, dryrun_cli, gpus):
    s = script(EMA.replace("SHADOW", "list(ema.parameters())"))
    status, report, err = dryrun_cli(s, "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


def test_a_foreach_call_that_pairs_tensors_on_two_gpus_is_reported(script, dryrun_cli):
    # Every shadow weight on cuda:0: the last layer's weights pair a cuda:0 tensor with a cuda:1 one.
    s = script(EMA.replace("SHADOW", '[p.to("cuda:0") for p in ema.parameters()]'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP001", s.line("lerp")) in codes_at(report)
    (f,) = [f for f in report["findings"] if f["line"] == s.line("lerp")]
    assert "cuda:1" in f["message"] and "cuda:0" in f["message"]


# Fused and foreach optimizers over a split model (Adam's max_exp_avg_sqs is an empty list without
# amsgrad: the grouping by virtual device keeps it empty, as PyTorch's C++ does).
OPTIMIZERS = """
import torch
import torch.nn as nn

last = f"cuda:{torch.cuda.device_count() - 1}"
model = nn.Sequential(nn.Linear(64, 64).to("cuda:0"), nn.Linear(64, 64).to(last))
for opt in (
    torch.optim.Adam(model.parameters(), lr=1e-3, fused=True),
    torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, amsgrad=True),
    torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=True),
):
    for step in range(2):
        model[1](model[0](torch.randn(4, 64, device="cuda:0")).to(last)).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad()
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
def test_fused_and_foreach_optimizers_over_a_split_model_run_clean(script, dryrun_cli, gpus):
    status, report, err = dryrun_cli(script(OPTIMIZERS), "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


# `a.type_as(b)` is `a.to(b.options())`: a host tensor goes to b's GPU (as measured on 2x H200).
TYPE_AS = """
import torch

last = f"cuda:{torch.cuda.device_count() - 1}"
h = torch.randn(4, 64, device=last)
g = torch.ones(4, 64).type_as(h)
assert g.device == h.device, g.device
total = (h + g).sum()
half = torch.ones(2).type_as(h.half())
assert half.dtype == torch.float16
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
def test_type_as_converts_to_the_other_tensors_gpu_without_a_finding(script, dryrun_cli, gpus):
    status, report, err = dryrun_cli(script(TYPE_AS), "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


# Tied embeddings across two GPUs with gradient accumulation: each forward pass copies the weight for
# its own graph, which backward frees; the weight does not change between the micro-batches, yet
# the next pass needs a copy of its own (recurrence.py).
TIED_ACCUMULATION = """
import torch
import torch.nn as nn
import torch.nn.functional as F

last = f"cuda:{torch.cuda.device_count() - 1}"
emb = nn.Embedding(2000, 128).to("cuda:0")     # 1 MB of weights
body = nn.Linear(128, 128).to(last)
opt = torch.optim.AdamW([*emb.parameters(), *body.parameters()], lr=1e-3)
for step in range(2):
    for micro in range(4):
        ids = torch.randint(0, 2000, (2, 16))
        h = body(emb(ids.to("cuda:0")).to(last))
        logits = h @ emb.weight.to(last).t()  # <- tied
        TWICE
        F.cross_entropy(logits.flatten(0, 1), ids.flatten().to(last)).backward()
    opt.step()
    opt.zero_grad()
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
def test_a_tied_weight_copied_once_per_forward_with_gradient_accumulation_runs_clean(script, dryrun_cli, gpus):
    status, report, err = dryrun_cli(script(TIED_ACCUMULATION.replace("TWICE", "pass")), "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


def test_a_tied_weight_copied_twice_in_one_forward_is_a_repeat(script, dryrun_cli):
    s = script(TIED_ACCUMULATION.replace("TWICE", "logits = logits + h @ emb.weight.to(last).t()  # <- again"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert codes_at(report) == [("MP011", s.line("again"))]


def test_a_weight_copied_in_every_step_of_an_inference_loop_is_a_repeat(script, dryrun_cli):
    # Under no_grad the copy is no graph's: one copy kept on the last GPU would serve every step. The
    # new token's way back to the first GPU in each step is the loop's, not a ping-pong (MP006): calling
    # `emb` again starts the next pass.
    s = script("""
import torch
import torch.nn as nn

last = f"cuda:{torch.cuda.device_count() - 1}"
emb = nn.Embedding(2000, 128).to("cuda:0")
body = nn.Linear(128, 128).to(last)
with torch.no_grad():
    tok = torch.zeros(1, 1, dtype=torch.long)
    for step in range(3):
        h = body(emb(tok.to("cuda:0")).to(last))
        tok = (h @ emb.weight.to(last).t()).argmax(-1)  # <- tied
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert codes_at(report) == [("MP011", s.line("tied"))]


# A mixture of experts spread over the GPUs: each expert gets its rows of one input and its result is
# gathered back on cuda:0. The chain cuda:0 -> cuda:1 -> cuda:0 -> cuda:1 ... is a star, not a
# ping-pong: no result that came back went into the next expert's rows (pingpong.py asks autograd).
MOE = """
import torch
import torch.nn as nn

n, E, d = torch.cuda.device_count(), 4, 64
devs = [torch.device("cuda", e * n // E) for e in range(E)]
gate = nn.Linear(d, E).to("cuda:0")
proj = nn.Linear(d, d).to("cuda:0")
experts = nn.ModuleList([nn.Sequential(nn.Linear(d, d), nn.GELU()).to(dv) for dv in devs])
opt = torch.optim.Adam([*gate.parameters(), *proj.parameters(), *experts.parameters()])
for step in range(2):
    x = INPUT
    w, idx = gate(x).softmax(-1).topk(2, dim=-1)
    out = torch.zeros_like(x)
    for e, (dev, expert) in enumerate(zip(devs, experts)):
        rows, slot = (idx == e).nonzero(as_tuple=True)
        y = expert(x[rows].to(dev)).to(x.device)
        out.index_add_(0, rows, y * w[rows, slot].unsqueeze(-1))
    out.pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
@pytest.mark.parametrize("data", ["torch.randn(64, d, device='cuda:0')", "proj(torch.randn(64, d, device='cuda:0'))"])
def test_experts_fed_from_one_input_and_gathered_back_are_not_a_ping_pong(script, dryrun_cli, gpus, data):
    status, report, err = dryrun_cli(script(MOE.replace("INPUT", data)), "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


# Layers of experts, each layer's output added to its input on cuda:0 where the tokens stay: every layer
# sends the tokens out to the experts on cuda:1 and sums what comes back, by design. The next layer's
# input depends on the tokens that stayed, not only on what came back: each out-and-back is a branch.
MOE_STACK = """
import torch
import torch.nn as nn

d = 64
embed = nn.Linear(d, d).to("cuda:0")
layers = []
for _ in range(4):
    gate = nn.Linear(d, 2).to("cuda:0")
    experts = [nn.Linear(d, d).to("cuda:0"), nn.Linear(d, d).to("cuda:1")]
    layers.append((gate, experts))
x = embed(torch.randn(8, d, device="cuda:0"))
for gate, experts in layers:
    w = gate(x).softmax(-1)
    out = torch.zeros_like(x)
    for e, expert in enumerate(experts):
        out = out + w[:, e : e + 1] * expert(x.to(expert.weight.device)).to(x.device)
    x = x + out
x.pow(2).mean().backward()
print("finished")
"""


ROUTED = "rows = (w.argmax(-1) == e).nonzero(as_tuple=True)[0]\n        out = out.index_add(0, rows, expert(x[rows].to(expert.weight.device)).to(x.device))"


@pytest.mark.parametrize("routing", ["all tokens", "top-1 rows"])
def test_layers_of_experts_summed_back_where_the_tokens_stay_are_not_a_ping_pong(script, dryrun_cli, routing):
    stack = MOE_STACK
    if routing != "all tokens":  # each expert gets its rows only (x[rows] is what leaves), as in Mixtral
        stack = stack.replace("out = out + w[:, e : e + 1] * expert(x.to(expert.weight.device)).to(x.device)", ROUTED)
        assert ROUTED.split("\n")[0] in stack
    status, report, err = dryrun_cli(script(stack), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_layers_fed_by_the_previous_result_across_two_gpus_are_still_a_ping_pong(script, dryrun_cli):
    # The same loop, each expert now fed only the previous expert's gathered result (nothing of the
    # tokens that stayed on cuda:0 goes on): a ping-pong.
    s = script(
        MOE.replace("INPUT", "proj(torch.randn(64, d, device='cuda:0'))")
        .replace("y = expert(x[rows].to(dev)).to(x.device)", "y = expert(x[rows].to(dev)).to(x.device)  # <- hop")
        .replace(
            "out.index_add_(0, rows, y * w[rows, slot].unsqueeze(-1))", "x = torch.zeros_like(x).index_add(0, rows, y)"
        )
        .replace("out.pow(2)", "x.pow(2)")
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert ("MP006", s.line("hop")) in codes_at(report)


# The same design in inference, under torch.no_grad(): every block sends the tokens to its expert on
# cuda:1 and adds what comes back to the tokens that stayed on cuda:0. No graph to ask: the tokens that
# left are still alive when the result comes back (the residual needs them), or the block still holds them,
# so each out-and-back may be a branch and is not counted (pingpong.py, Chain.stayed).
NO_GRAD_STACK = """
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mix = nn.Linear(d, d).to("cuda:0")
        self.expert = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d)).to("cuda:1")

    def forward(self, x):
        x = x + self.mix(x)
        return x + self.expert(x.to("cuda:1")).to("cuda:0")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block(8) for _ in range(5))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


net = Net()
with torch.no_grad():
    for _ in range(2):
        print(net(torch.randn(2, 8, device="cuda:0")).sum().item())
"""


# Each expert given only its routed rows: `x[rows]` is a copy, gone before the result comes back, but the
# block still holds the tokens on cuda:0 (x, y) to write the result into.
NO_GRAD_ROUTED = (
    "top = (x.sum(-1) > 0)\n        y = torch.zeros_like(x)\n"
    '        y[top] = self.expert(x[top].to("cuda:1")).to("cuda:0")\n        return x + y'
)


@pytest.mark.parametrize("gpus", GPUS)
@pytest.mark.parametrize("routing", ["all tokens", "routed rows"])
def test_expert_blocks_summed_back_under_no_grad_are_not_a_ping_pong(script, dryrun_cli, gpus, routing):
    program = NO_GRAD_STACK
    if routing == "routed rows":
        line = 'return x + self.expert(x.to("cuda:1")).to("cuda:0")'
        assert line in program
        program = program.replace(line, NO_GRAD_ROUTED)
    status, report, err = dryrun_cli(script(program), "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


def test_blocks_fed_only_by_what_came_back_under_no_grad_are_still_a_ping_pong(script, dryrun_cli):
    # Each block's output is the expert's result alone, left on cuda:1; the next block brings it back to
    # cuda:0, where nothing stayed: what left is gone, and the block holds nothing else there.
    first, line = "x = x + self.mix(x)", 'return x + self.expert(x.to("cuda:1")).to("cuda:0")'
    assert first in NO_GRAD_STACK and line in NO_GRAD_STACK
    s = script(
        NO_GRAD_STACK.replace(first, 'x = self.mix(x.to("cuda:0"))  # <- back').replace(
            line, 'return self.expert(x.to("cuda:1"))'
        )
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert codes_at(report) == [("MP006", s.line("back"))]


# A LazyLinear on the last GPU, initialised by a first call: its UninitializedParameter has no storage
# (nor size) until then, which the virtual devices and the report's module sizes must let be.
LAZY = """
import torch
import torch.nn as nn

last = f"cuda:{torch.cuda.device_count() - 1}"
f = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).to("cuda:0")
g = nn.Sequential(nn.Flatten(), nn.LazyLinear(10)).to(last)
unused = nn.LazyLinear(4).to(last)  # never called: still lazy at the end
net = nn.ModuleList([f, g, unused])
with torch.no_grad():
    g(f(torch.randn(1, 3, 16, 16, device="cuda:0")).to(last))
opt = torch.optim.SGD(g.parameters(), lr=0.1)
g(f(torch.randn(4, 3, 16, 16, device="cuda:0")).to(last)).sum().backward()
opt.step()
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
def test_a_lazy_module_on_a_gpu_runs_clean(script, dryrun_cli, gpus, tmp_path):
    s = script(LAZY)
    status, report, err = dryrun_cli(s, "--gpus", gpus, "--html", str(tmp_path / "report.html"))
    assert status == 0, err
    assert report["findings"] == []


def test_a_checkpoint_saved_under_meta_backing_stops_with_the_limit_message(script, dryrun_cli, tmp_path):
    s = script(f"""
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(32, 32).to("cuda:0"), nn.Linear(32, 32).to("cuda:1"))
model[1](model[0](torch.randn(2, 32, device="cuda:0")).to("cuda:1")).sum().backward()
torch.save(model.state_dict(), {str(tmp_path / "ckpt.pt")!r})  # <- save
""")
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", "meta")
    assert status == 1
    assert f"train.py:{s.line('save')}: torch.save() needs tensor values" in report["stopped"]
    assert "--backing cpu" in report["stopped"]
    assert "Traceback" not in err
    status, report, err = dryrun_cli(s, "--gpus", "2")  # with values, the checkpoint is written
    assert status == 0, err
    assert (tmp_path / "ckpt.pt").exists()


# Activations offloaded to the host while the forward runs (saved-tensor hooks): the hooks run inside the
# ops, and with pin_memory their staging buffer asked for a page-locked allocator a CPU build lacks.
SAVE_ON_CPU = """
import torch
import torch.nn as nn

last = f"cuda:{torch.cuda.device_count() - 1}"
a = nn.Sequential(nn.Linear(128, 128), nn.GELU()).to("cuda:0")
b = nn.Sequential(nn.Linear(128, 128), nn.GELU()).to(last)
opt = torch.optim.SGD([*a.parameters(), *b.parameters()], lr=0.1)
for step in range(2):
    with torch.autograd.graph.save_on_cpu(pin_memory=PIN):
        out = b(a(torch.randn(16, 128, device="cuda:0")).to(last))
    out.square().mean().backward()
    assert a[0].weight.grad.device == torch.device("cuda:0")
    opt.step()
    opt.zero_grad()
print("finished")
"""


@pytest.mark.parametrize("pin", ["True", "False"])
def test_activations_saved_on_the_host_run_clean(script, dryrun_cli, pin):
    status, report, err = dryrun_cli(script(SAVE_ON_CPU.replace("PIN", pin)), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
    pairs = {(p["src"], p["dst"]) for p in report["transfers"]["by_pair"]}
    assert ("cuda:0", "cpu") in pairs and ("cuda:1", "cpu") in pairs  # the offload's copies are counted


# torch.autograd.grad of a loss on the last GPU with respect to weights on every GPU (torch.func's
# functional_call, a hand-written optimizer): autograd takes outputs and inputs from anywhere in the
# graph, and each gradient comes back on its input's device.
AUTOGRAD_GRAD = """
import torch
import torch.nn as nn
from torch.func import functional_call

last = f"cuda:{torch.cuda.device_count() - 1}"
model = nn.ModuleDict({"a": nn.Linear(32, 32).to("cuda:0"), "b": nn.Linear(32, 1).to(last)})


def forward(params, x):
    h = torch.tanh(functional_call(model["a"], {k[2:]: v for k, v in params.items() if k[0] == "a"}, (x,)))
    return functional_call(model["b"], {k[2:]: v for k, v in params.items() if k[0] == "b"}, (h.to(last),))


params = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
for step in range(2):
    out = forward(params, torch.randn(4, 32, device="cuda:0"))
    grads = torch.autograd.grad(out.sum(), list(params.values()))
    assert [g.device for g in grads] == [p.device for p in params.values()]
    with torch.no_grad():
        for p, g in zip(params.values(), grads):
            p -= 0.1 * g
out = forward(params, torch.randn(4, 32, device="cuda:0"))
torch.autograd.backward([out.sum(), params["a.weight"].sum()])  # outputs on two GPUs
assert params["a.weight"].grad.device == torch.device("cuda:0")
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
def test_autograd_grad_over_weights_on_every_gpu_runs_clean(script, dryrun_cli, gpus):
    status, report, err = dryrun_cli(script(AUTOGRAD_GRAD), "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


# A pipeline schedule written by hand: each stage's input detached, and the gradients sent back stage
# by stage with `h.backward(grad.to(h.device))`. The backward call ends the forward pass, so the
# gradients' way back (cuda:3 -> cuda:2 -> ...) is not read as the activation coming back.
MANUAL_SCHEDULE = """
import torch
import torch.nn as nn

devs = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
stages = [nn.Sequential(nn.Linear(128, 128), nn.ReLU()).to(d) for d in devs]
opt = torch.optim.SGD([p for s in stages for p in s.parameters()], lr=0.01)
for step in range(2):
    for mb in torch.randn(16, 128).chunk(2):
        acts, h = [], mb
        for d, s in zip(devs, stages):
            x = h.detach().to(d).requires_grad_()
            h = s(x)
            acts.append((x, h))
        grad = None
        for x, h in reversed(acts):
            if grad is None:
                h.pow(2).mean().backward()
            else:
                h.backward(grad.to(h.device))
            grad = x.grad
    opt.step()
    opt.zero_grad()
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
def test_a_hand_written_pipeline_schedule_runs_clean(script, dryrun_cli, gpus):
    status, report, err = dryrun_cli(script(MANUAL_SCHEDULE), "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


# Packed sequences over a split model: the lengths and batch sizes live on the CPU by PyTorch's rule
# (pack_padded_sequence refuses lengths on a GPU), next to data on the LSTM's GPU.
PACKED = """
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

last = f"cuda:{torch.cuda.device_count() - 1}"
emb = nn.Embedding(100, 32).to("cuda:0")
lstm = nn.LSTM(32, 64, batch_first=True).to(last)
for step in range(2):
    x = emb(torch.randint(1, 100, (4, 12), device="cuda:0")).to(last)
    packed = pack_padded_sequence(x, torch.tensor([12, 9, 7, 3]), batch_first=True)
    out, (h, c) = lstm(packed, HIDDEN)  # <- lstm
    padded, lens = pad_packed_sequence(out, batch_first=True)
    assert lens.device == torch.device("cpu")
    (padded.sum(1) / lens.to(last).unsqueeze(-1)).sum().backward()
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
def test_packed_sequences_with_their_sizes_on_the_cpu_run_clean(script, dryrun_cli, gpus):
    s = script(PACKED.replace("HIDDEN", "None"))
    status, report, err = dryrun_cli(s, "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


def test_a_hidden_state_left_on_the_cpu_is_still_reported(script, dryrun_cli):
    s = script(PACKED.replace("HIDDEN", "(torch.zeros(1, 4, 64), torch.zeros(1, 4, 64))"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP001", s.line("lstm")) in codes_at(report)


# Advanced indexing with a slice between two index tensors (`x[rows, :, cols]`): its backward's
# index_put takes the indices as a list holding None for the slice, which autograd's C++ calls
# outside any Python-level op (a Longformer classification head's backward does this).
INDEX_WITH_SLICE_BETWEEN = """
import torch
import torch.nn as nn

last = f"cuda:{torch.cuda.device_count() - 1}"
lin = nn.Linear(8, 8).to(last)
x = lin(torch.randn(2, 4, 8, device=last))
rows = torch.tensor([0, 1], device=last)
cols = torch.tensor([2, 3], device=last)
x[rows, :, cols].sum().backward()
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
def test_backward_of_indexing_with_a_slice_between_index_tensors_runs_clean(script, dryrun_cli, gpus):
    status, report, err = dryrun_cli(script(INDEX_WITH_SLICE_BETWEEN), "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []
    assert not report.get("stopped")


# Micro-batches pipelined over two stages without autograd (inference, ParlAI's PipelineHelper under
# generation): each chunk goes cuda:0 -> cuda:1 and back to cuda:0, where the tied output head is. The
# chunks are independent: chunk A, back on cuda:0, waits unread for the final torch.cat while chunk B
# leaves cuda:0, so B's departure cannot continue A's chain (pingpong.py: without a graph, a chain goes on
# only from an arrival an op read). Found by the ParlAI driver of bench/real_bugs.py, where it was MP006.
MICRO_BATCHES_NO_GRAD = """
import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = nn.Embedding(64, 32).to("cuda:0")
        self.layers = nn.ModuleList([nn.Linear(32, 32).to("cuda:0" if i < 2 else "cuda:1") for i in range(4)])

    def forward(self, ids):
        chunks = list(torch.split(self.embeddings(ids), 2))
        groups = [("cuda:0", [0, 1]), ("cuda:1", [2, 3])]
        for t in range(len(groups) + len(chunks)):
            for c in range(len(chunks)):
                g = t - c
                if 0 <= g < len(groups):
                    s = chunks[c]
                    for n in groups[g][1]:
                        s = torch.relu(self.layers[n](s))
                    chunks[c] = s.to(groups[(g + 1) % len(groups)][0])
        return torch.cat(chunks)


enc = Encoder()
with torch.no_grad():
    for step in range(2):
        out = enc(torch.randint(0, 64, (8, 5), device="cuda:0"))
        torch.nn.functional.linear(out, enc.embeddings.weight).argmax(-1)
print("finished")
"""


def test_micro_batches_pipelined_without_autograd_run_clean(script, dryrun_cli):
    status, report, err = dryrun_cli(script(MICRO_BATCHES_NO_GRAD), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


# The bad twins under no_grad: each micro-batch's own layers alternate between the GPUs (stages
# cuda:0, cuda:1, cuda:0, cuda:1), or one batch runs layers chained across the GPUs with
# `x = layer(x.to(dev))`. Each arrival is read by the next layer: one activation crossing per layer.
# (The chunks come in split already: a batch of token ids still held on cuda:0 by the forward would be data
# that stayed to meet each chunk coming back, a possible branch: pingpong.py's Chain.stayed.)
def _alternating(program: str) -> str:
    edits = [
        ('"cuda:0" if i < 2 else "cuda:1"', 'f"cuda:{i % 2}"'),
        (
            'groups = [("cuda:0", [0, 1]), ("cuda:1", [2, 3])]',
            'groups = [("cuda:0", [0]), ("cuda:1", [1]), ("cuda:0", [2]), ("cuda:1", [3])]',
        ),
        (
            "def forward(self, ids):\n        chunks = list(torch.split(self.embeddings(ids), 2))",
            "def forward(self, chunks):",
        ),
        (
            'enc(torch.randint(0, 64, (8, 5), device="cuda:0"))',
            'enc(list(enc.embeddings(torch.randint(0, 64, (8, 5), device="cuda:0")).split(2)))',
        ),
        (
            "chunks[c] = s.to(groups[(g + 1) % len(groups)][0])",
            "chunks[c] = s.to(groups[(g + 1) % len(groups)][0])  # <- hop",
        ),
    ]
    for old, new in edits:
        assert old in program, old
        program = program.replace(old, new)
    return program


MICRO_BATCHES_ALTERNATING = _alternating(MICRO_BATCHES_NO_GRAD)

LAYERS_CHAINED_NO_GRAD = """
import torch
import torch.nn as nn

layers = nn.ModuleList(nn.Linear(16, 16).to(f"cuda:{i % 2}") for i in range(6))
with torch.no_grad():
    for step in range(2):
        x = torch.randn(4, 16, device="cuda:0")
        for i, layer in enumerate(layers):
            x = torch.relu(layer(x.to(f"cuda:{i % 2}")))  # <- hop
        print(x.sum().item())
"""


@pytest.mark.parametrize("program", [MICRO_BATCHES_ALTERNATING, LAYERS_CHAINED_NO_GRAD], ids=["micro", "chained"])
def test_layers_alternating_gpus_under_no_grad_are_a_ping_pong(script, dryrun_cli, program):
    assert "# <- hop" in program
    s = script(program)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert ("MP006", s.line("hop")) in codes_at(report)


# A CUDA build of torch (PyPI's default, on machines with no GPU too) says a tensor labelled cuda:k
# suits cuDNN, and nn.LSTM's flatten_parameters (run by .to()) calls the CUDA-only
# torch._cudnn_rnn_flatten_weight: the dry run stopped on any recurrent model there.
RNN_ON_A_CUDA_BUILD = """
import torch
import torch.nn as nn

lstm = nn.LSTM(16, 32, batch_first=True).to("cuda:1")
gru = nn.GRU(16, 32).to("cuda:0")
x = torch.randn(4, 7, 16, device="cuda:1")
out, _ = lstm(x)
y, _ = gru(torch.randn(7, 4, 16, device="cuda:0"))
(out.sum() + y.sum().to("cuda:1")).backward()
print("finished")
"""


def test_recurrent_layers_run_on_virtual_gpus_under_a_cuda_build_of_torch(script, dryrun_cli, monkeypatch):
    import torch

    acceptable = lambda tensor: tensor.is_cuda  # noqa: E731  (what a CUDA build with cuDNN answers)
    monkeypatch.setattr(torch.backends.cudnn, "is_acceptable", acceptable)
    monkeypatch.setattr(torch, "_use_cudnn_rnn_flatten_weight", lambda: True)
    status, report, err = dryrun_cli(script(RNN_ON_A_CUDA_BUILD), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
    assert torch.backends.cudnn.is_acceptable is acceptable  # the dry run's answer is undone on exit


# An encoder and a decoder each split over the two GPUs (ParlAI's PipelineHelper, transformers' T5
# parallelize): micro-batches through the encoder come back to cuda:0 and are joined; the decoder's
# state, made from its own embeddings, crosses once per boundary, and the encoder output that its
# cross-attention reads is needed on both GPUs, so its chunks cross again with the state. Neither is an
# activation crossing at every layer (a false MP006 once: the decoder's state was read as the encoder's
# activation going on, and the encoder output, only joined and split on cuda:0, as a third crossing).
ENCODER_DECODER = """
import torch
import torch.nn as nn

d = 32


class Cross(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.kv, self.o = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)

    def forward(self, x, mem):
        k, v = self.kv(mem).chunk(2, dim=-1)
        return x + self.o(torch.softmax(self.q(x) @ k.transpose(1, 2), dim=-1) @ v)


class EncDec(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, d).to("cuda:0")
        self.devs = ENCODER_DEVICES
        self.enc = nn.ModuleList([nn.Linear(d, d).to(dev) for dev in self.devs])
        self.dec = nn.ModuleList([Cross().to("cuda:0"), Cross().to("cuda:1")])

    def forward(self, src, tgt):
        chunks = []
        for c in self.embed(src).split(2):
            for layer, dev in zip(self.enc, self.devs):
                c = torch.relu(layer(c.to(dev)))  # <- layer
            chunks.append(c.to("cuda:0"))
        mem = torch.cat(chunks) * 2.0
        outs = []
        for x, m in zip(self.embed(tgt).split(2), mem.split(2)):
            for layer, dev in zip(self.dec, ["cuda:0", "cuda:1"]):
                x, m = x.to(dev), m.to(dev)
                x = layer(x, m)
            outs.append(x.to("cuda:0"))
        return torch.cat(outs)


model = EncDec()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(2):
    src = torch.randint(0, 50, (4, 6), device="cuda:0")
    tgt = torch.randint(0, 50, (4, 5), device="cuda:0")
    model(src, tgt).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
print("finished")
"""


@pytest.mark.parametrize("gpus", GPUS)
@pytest.mark.parametrize(
    "order", ["x, m = x.to(dev), m.to(dev)", "m, x = m.to(dev), x.to(dev)"], ids=["state", "memory"]
)
def test_an_encoder_and_a_decoder_each_split_over_the_gpus_are_not_a_ping_pong(script, dryrun_cli, gpus, order):
    # Either copy may be made first: the encoder output sent before the state that read it is a fan-out too.
    program = ENCODER_DECODER.replace("ENCODER_DEVICES", '["cuda:0", "cuda:1"]')
    status, report, err = dryrun_cli(script(program.replace("x, m = x.to(dev), m.to(dev)", order)), "--gpus", gpus)
    assert status == 0, err
    assert report["findings"] == []


def test_encoder_layers_alternating_gpus_before_a_split_decoder_are_a_ping_pong(script, dryrun_cli):
    # The decoder's state read the encoder output that arrived; the encoder's own chain still alternates.
    s = script(ENCODER_DECODER.replace("ENCODER_DEVICES", '["cuda:0", "cuda:1"] * 2'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert ("MP006", s.line("layer")) in codes_at(report)


# A host copy of a GPU tensor made with `*_like(..., device="cpu")`: on the CPU as asked (it once kept the
# GPU tensor's label, so adding CPU tensors to it was a false MP001 and adding the GPU tensor was missed).
HOST_SHADOW = """
import torch
import torch.nn as nn

layer = nn.Linear(16, 16).to("cuda:1")
shadow = torch.zeros_like(layer.weight, device="cpu")
scratch = layer.weight.new_zeros((16, 16), device=torch.device("cpu"))
for step in range(2):
    layer(torch.randn(4, 16, device="cuda:1")).sum().backward()
    with torch.no_grad():
        shadow.mul_(0.9).add_(layer.weight.detach().cpu(), alpha=0.1)
        scratch.add_(torch.ones(16, 16))
        SHADOW_UPDATE  # <- update
print("finished")
"""


def test_a_host_copy_made_like_a_gpu_tensor_is_on_the_cpu(script, dryrun_cli):
    status, report, err = dryrun_cli(
        script(HOST_SHADOW.replace("SHADOW_UPDATE", "shadow.add_(torch.ones(16, 16))")), "--gpus", "2"
    )
    assert status == 0, err
    assert report["findings"] == []


def test_a_gpu_tensor_added_to_a_host_copy_made_like_it_is_reported(script, dryrun_cli):
    s = script(HOST_SHADOW.replace("SHADOW_UPDATE", "shadow.add_(layer.weight)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP001", s.line("update")) in codes_at(report)


# CTC: the lengths stay on the CPU next to log-probabilities on a GPU (PyTorch reads them on the host).
CTC = """
import torch
import torch.nn as nn
import torch.nn.functional as F

T, B, C = 20, 3, 12
rnn = nn.GRU(32, 32).to("cuda:1")
proj = nn.Linear(32, C).to("cuda:1")
for step in range(2):
    out, _ = rnn(torch.randn(T, B, 32, device="cuda:1"))
    log_probs = proj(out).log_softmax(-1)
    targets = torch.randint(1, C, (B, 6), device="cuda:1")
    input_lengths = torch.full((B,), T, dtype=torch.long)
    target_lengths = torch.tensor([6, 4, 5])
    loss = nn.CTCLoss(zero_infinity=True)(log_probs, targets, input_lengths, target_lengths)
    loss = loss + F.ctc_loss(log_probs, targets, input_lengths, target_lengths, zero_infinity=True)
    loss.backward()
print("finished")
"""


def test_ctc_lengths_on_the_cpu_run_clean(script, dryrun_cli):
    status, report, err = dryrun_cli(script(CTC), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


# torch.func: vmap's batched and grad's / jacrev's grad-tracking tensors have no storage of their own;
# read as unlabelled, they were on the backing device (a false MP001 on a stage under jacrev, and
# `.device` said "cpu").
TORCH_FUNC = """
import torch
import torch.nn as nn
from torch.func import functional_call, grad, jacrev, vmap

trunk = nn.Linear(10, 16).to("cuda:0")
head = nn.Linear(16, 1).to("cuda:1")
params = {k: v.detach() for k, v in head.named_parameters()}


def loss_fn(p, h, y):
    out = functional_call(head, p, (h.unsqueeze(0),))  # <- head
    return (out.squeeze() - y) ** 2


x = torch.randn(5, 10, device="cuda:0")
y = torch.randn(5, device="cuda:1")
with torch.no_grad():
    h = HOP
per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0))(params, h, y)
J = jacrev(lambda inp: torch.tanh(trunk(inp)))(x[0])
assert J.device == torch.device("cuda:0"), J.device
print("finished")
"""


def test_per_sample_gradients_and_jacobians_of_stages_run_clean(script, dryrun_cli):
    status, report, err = dryrun_cli(
        script(TORCH_FUNC.replace("HOP", 'torch.relu(trunk(x)).to("cuda:1")')), "--gpus", "2"
    )
    assert status == 0, err
    assert report["findings"] == []


def test_a_missing_hop_under_vmap_is_reported(script, dryrun_cli):
    s = script(TORCH_FUNC.replace("HOP", "torch.relu(trunk(x))"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP001", s.line("head")) in codes_at(report), report["findings"]


# Meta backing: tensors made from data stay real CPU tensors (their values may be needed), those built
# as shapes are meta. PyTorch's meta kernels refused mixes that its CUDA and CPU kernels accept: a 0-dim
# CPU value in `masked_fill`, a real CPU tensor times a shape-only CPU one (stopped as "needs values").
LEGAL_MIXES = """
import torch
import torch.nn as nn

lin = nn.Linear(8, 8).to("cuda:1")
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
for _ in range(2):
    h = lin(torch.randn(6, 8, device="cuda:1"))
    d = h.masked_fill(h < -0.5, torch.tensor(-0.5))
    e = torch.where(d > 0, d, torch.tensor(0.0)) * torch.tensor(1.5)
    bias = (slopes[:, None] * torch.arange(8)[None, :].float()).to("cuda:1")
    rows = e[torch.tensor([0, 2, 4])] + bias[0]
    loss = rows.mean() + OTHER  # <- other
    opt.zero_grad()
    loss.backward()
    opt.step()
print("finished")
"""


def test_real_host_tensors_mixed_with_shape_only_ones_run_on_meta_backing(script, dryrun_cli):
    status, report, err = dryrun_cli(
        script(LEGAL_MIXES.replace("OTHER", "e.mean()")), "--gpus", "2", "--backing", "meta"
    )
    assert status == 0, err
    assert report["findings"] == []
    assert "stopped" not in report or not report["stopped"], report.get("stopped")


def test_a_host_tensor_from_data_on_the_wrong_device_is_still_reported_on_meta_backing(script, dryrun_cli):
    s = script(LEGAL_MIXES.replace("OTHER", "(e * slopes[:1])[0].sum()"))
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", "meta")
    assert ("MP001", s.line("other")) in codes_at(report), report["findings"]


# A module's weights replaced after it ran: by attribute assignment, or swapped in for one call by
# torch.func.functional_call. Where it lives is read again (capture/hooks.py, _patch_member_swaps);
# the placement remembered from the first call once judged the second by the old weights.
REPLACED_WEIGHTS = """
import torch
import torch.nn as nn
from torch.func import functional_call

lin = nn.Linear(8, 4).to("cuda:0")
lin(torch.randn(2, 8, device="cuda:0"))
for dev in ("cuda:0", "cuda:1"):
    swapped = {k: v.detach().to(dev) for k, v in lin.named_parameters()}
    functional_call(lin, swapped, (torch.randn(2, 8, device=FUNCTIONAL),))  # <- functional
lin.weight = nn.Parameter(lin.weight.detach().to("cuda:1"))
lin.bias = nn.Parameter(lin.bias.detach().to("cuda:1"))
print(lin(torch.randn(2, 8, device=INPUT)).device)  # <- call
"""


@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_weights_replaced_after_a_call_are_where_the_next_call_looks(script, dryrun_cli, backing):
    clean = REPLACED_WEIGHTS.replace("FUNCTIONAL", "dev").replace("INPUT", '"cuda:1"')
    status, report, err = dryrun_cli(script(clean), "--gpus", "2", "--backing", backing)
    assert status == 0, err
    assert report["findings"] == []
    s = script(REPLACED_WEIGHTS.replace("FUNCTIONAL", "dev").replace("INPUT", '"cuda:0"'))
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", backing)
    assert ("MP001", s.line("call")) in codes_at(report), report["findings"]
    s = script(REPLACED_WEIGHTS.replace("FUNCTIONAL", '"cuda:0"').replace("INPUT", '"cuda:1"'))
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", backing)
    assert ("MP001", s.line("functional")) in codes_at(report), report["findings"]


# A slice of a tensor on one GPU assigned from another GPU: PyTorch's set_item copies into the view
# (copy_, which crosses devices); with a tensor index it is index_put_, whose values must be there.
SLICE_ASSIGNED = """
import torch

buf = torch.zeros(3, 8, device="cuda:0")
h1 = torch.ones(3, 4, device="cuda:1")
buf[:, 4:] = h1
buf[..., :2] = torch.full((3, 2), 2.0)
buf[0] = h1[0].repeat(2)
buf[INDEX] = VALUE  # <- index
print(buf.sum().item())
"""


@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_a_slice_assigned_from_another_gpu_is_a_copy_and_an_index_put_is_checked(script, dryrun_cli, backing):
    clean = script(SLICE_ASSIGNED.replace("INDEX", "1, :6").replace("VALUE", "h1[:, :2].reshape(-1)"))
    status, report, err = dryrun_cli(clean, "--gpus", "2", "--backing", backing)
    assert report["findings"] == [], err
    s = script(SLICE_ASSIGNED.replace("INDEX", "torch.tensor([0, 2]), :3").replace("VALUE", "h1[:2, :3]"))
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", backing)
    assert ("MP001", s.line("index")) in codes_at(report), (report["findings"], err)


# A sparse tensor has no storage of its own: its values' label stands for its device (a sparse
# adjacency matrix moved to a GPU was read as still on the CPU: a false MP001 at torch.sparse.mm).
SPARSE_GRAPH = """
import torch
import torch.nn as nn

adj = torch.eye(6).to_sparse().to("cuda:0")
csr = torch.eye(6).to_sparse_csr().to("cuda:0")
gcn = nn.Linear(4, 4).to("cuda:0")
head = nn.Linear(4, 2).to("cuda:1")
h = gcn(torch.randn(6, 4, device="cuda:0"))
h = torch.sparse.mm(adj, h) + torch.sparse.mm(csr, h)
out = head(torch.sparse.mm(adj, HOP))  # <- mm
loss = nn.functional.cross_entropy(out, torch.randint(0, 2, (6,), device="cuda:1"))
loss.backward()
print(adj.device, out.device)
"""


def test_a_sparse_matrix_on_a_gpu_is_where_its_values_are(script, dryrun_cli):
    status, report, err = dryrun_cli(script(SPARSE_GRAPH.replace("HOP", "h).to('cuda:1'")), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
    s = script(SPARSE_GRAPH.replace("HOP", "h.to('cuda:1')"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP001", s.line("mm")) in codes_at(report), (report["findings"], err)


# An embedding table split by rows over two GPUs: the ids go to the shard on cuda:1 and its rows come back to
# meet the rows looked up on cuda:0, where the ids stayed. The ids carry no gradient, so the graph cannot say
# what left; what leaves cuda:0 next also comes from the lookup done there before the rows came back: the trip
# to cuda:1 was a branch (pingpong.py, Chain.drop_branch), not the activation going back and forth.
ROW_SHARDED = """
import torch
import torch.nn as nn
import torch.nn.functional as F

V, V0, D = 100, 60, 16


class ShardedEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.shard0 = nn.Embedding(V0, D).to("cuda:0")
        self.shard1 = nn.Embedding(V - V0, D).to("cuda:1")

    def forward(self, ids):
        in1 = ids >= V0
        LOOKUP
        ids1 = (ids - V0).clamp(min=0).to(self.shard1.weight.device)
        e1 = self.shard1(ids1).to(ids.device)  # <- back
        return COMBINE


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = ShardedEmbedding()
        self.enc = nn.Sequential(nn.Linear(D, D), nn.ReLU()).to("cuda:0")
        self.cls = nn.Linear(D, 2).to("cuda:1")

    def forward(self, ids):
        h = self.enc(self.emb(ids.to("cuda:0"))).mean(1)
        return self.cls(h.to("cuda:1"))


model = Model()
for step in range(2):
    ids = torch.randint(0, V, (8, 6))
    F.cross_entropy(model(ids), (ids >= V0).any(1).long().to("cuda:1")).backward()
"""


def test_an_embedding_split_by_rows_over_two_gpus_is_not_a_ping_pong(script, dryrun_cli):
    program = ROW_SHARDED.replace("LOOKUP", "e0 = self.shard0(ids.clamp(max=V0 - 1))").replace(
        "COMBINE", "torch.where(in1.unsqueeze(-1), e1, e0)"
    )
    status, report, err = dryrun_cli(script(program), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_ids_sent_to_a_table_whose_rows_come_back_alone_are_still_a_ping_pong(script, dryrun_cli):
    # Only the rows from cuda:1 go on (nothing was looked up where the ids stayed): cuda:0 -> cuda:1 -> cuda:0
    # -> cuda:1, where putting `enc` on cuda:1 would cross once.
    program = ROW_SHARDED.replace("LOOKUP", "pass").replace("COMBINE", "e1")
    s = script(program)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert "MP006" in {c for c, _ in codes_at(report)}


# A sparse adjacency matrix (a GCN's) cached once per GPU: a sparse tensor's stand-in on the virtual GPUs answers
# strides of 0, which read as a broadcast view moved at its full size (a false MP016; held-out round 19's t02).
SPARSE_ADJACENCY = '''
"""(held-out round 19, t02) Deep GCN for node classification on a synthetic citation graph, layers spread over
the visible GPUs. The normalised adjacency is cached per device so that every layer
multiplies with a local copy."""
import torch
import torch.nn as nn
import torch.nn.functional as F

N_NODES, N_FEAT, N_CLASS, HIDDEN = 500, 64, 7, 128


def normalized_adjacency(edge_index, n):
    loops = torch.arange(n)
    src = torch.cat([edge_index[0], edge_index[1], loops])
    dst = torch.cat([edge_index[1], edge_index[0], loops])
    deg = torch.zeros(n).index_add_(0, dst, torch.ones(dst.numel()))
    w = deg[src].rsqrt() * deg[dst].rsqrt()
    return torch.sparse_coo_tensor(torch.stack([dst, src]), w, (n, n)).coalesce()


class AdjacencyCache:
    def __init__(self, adj):
        self.adj = adj
        self.copies = {}

    def on(self, device):
        key = str(device)
        if key not in self.copies:
            self.copies[key] = self.adj.to(device)
        return self.copies[key]


class GCNLayer(nn.Module):
    def __init__(self, d_in, d_out, act=True):
        super().__init__()
        self.lin = nn.Linear(d_in, d_out)
        self.act = act

    def forward(self, x, adj_cache):
        adj = adj_cache.on(x.device)
        h = torch.sparse.mm(adj, self.lin(x))
        return F.relu(h) if self.act else h


class DeepGCN(nn.Module):
    def __init__(self, devices, depth=4):
        super().__init__()
        dims = [N_FEAT] + [HIDDEN] * (depth - 1) + [N_CLASS]
        self.devices = [devices[i * len(devices) // depth] for i in range(depth)]
        self.layers = nn.ModuleList(GCNLayer(dims[i], dims[i + 1], act=i < depth - 1).to(self.devices[i])
                                    for i in range(depth))

    def forward(self, x, adj_cache):
        for layer, dev in zip(self.layers, self.devices):
            x = layer(F.dropout(x.to(dev), 0.5, self.training), adj_cache)
        return x


def main():
    torch.manual_seed(0)
    devices = [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]
    edge_index = torch.randint(0, N_NODES, (2, 3000))
    cache = AdjacencyCache(normalized_adjacency(edge_index, N_NODES))
    labels = torch.randint(0, N_CLASS, (N_NODES,))
    train_mask = torch.rand(N_NODES) < 0.3
    model = DeepGCN(devices)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    x = torch.randn(N_NODES, N_FEAT).to(devices[0])
    y, m = labels.to(model.devices[-1]), train_mask.to(model.devices[-1])
    for epoch in range(2):
        model.train()
        loss = F.cross_entropy(model(x, cache)[m], y[m])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(x, cache).argmax(1) == y)[~m].float().mean()
    print(f"loss {loss.item():.3f} test acc {acc.item():.3f}")


if __name__ == "__main__":
    main()
'''


def test_a_sparse_matrix_moved_to_each_gpu_is_no_broadcast_view(script, dryrun_cli):
    status, report, err = dryrun_cli(script(SPARSE_ADJACENCY), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


# nn.DataParallel gathering its output on another GPU than device_ids[0] (output_device=1), where a head lives
# alone: the virtual DataParallel ran the module on device_ids[0] and left the output there (a false MP001).
GATHERED_ON_THE_HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F

front = nn.DataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU()).to("cuda:0"), device_ids=[0, 1], output_device=1)
head = nn.Linear(64, 10).to("cuda:1")
opt = torch.optim.SGD([*front.parameters(), *head.parameters()], lr=0.1)
for step in range(2):
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    loss = F.cross_entropy(head(front(x)), y.to("cuda:1"))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("finished")
"""


def test_data_parallel_gathers_on_its_output_device(script, dryrun_cli):
    status, report, err = dryrun_cli(script(GATHERED_ON_THE_HEAD), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
    # and with the default output device the head's input is on cuda:0: reported
    status, report, err = dryrun_cli(script(GATHERED_ON_THE_HEAD.replace(", output_device=1", "")), "--gpus", "2")
    assert [f["code"] for f in report["findings"]] == ["MP001"]


# SAM's first step: a gradient norm combined from per-GPU partial norms, its 0-dim scale sent to each GPU in turn.
# One number per GPU is no activation crossing at every layer (a false MP006 at run time; precision round 19's c07).
SCALE_SENT_TO_EACH_GPU = """
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(32, 32).to("cuda:0"), nn.Linear(32, 32).to("cuda:1"))
groups = {"cuda:0": list(model[0].parameters()), "cuda:1": list(model[1].parameters())}
for step in range(2):
    y = model[1](model[0](torch.randn(8, 32, device="cuda:0")).to("cuda:1"))
    y.square().mean().backward()
    with torch.no_grad():
        partial = [torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in ps])) for ps in groups.values()]
        norm = torch.linalg.vector_norm(torch.stack([n.to("cuda:1") for n in partial]))
        scale = 0.05 / (norm + 1e-12)
        for dev, ps in groups.items():
            s = scale.to(dev)
            for p in ps:
                p.add_(p.grad * s)
    model.zero_grad()
print("finished")
"""


def test_a_scale_sent_to_each_gpu_is_no_ping_pong(script, dryrun_cli):
    status, report, err = dryrun_cli(script(SCALE_SENT_TO_EACH_GPU), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


# `loss.backward(scale)` with a 0-dim gradient made on another device: autograd copies a 0-dim gradient to the
# output's device (its engine's validate_outputs); a gradient with dimensions there is refused, and reported.
GRADIENT_GIVEN = """
import torch
import torch.nn as nn

s0 = nn.Linear(8, 8).to("cuda:0")
s1 = nn.Linear(8, 1).to("cuda:1")
a = s0(torch.randn(4, 8, device="cuda:0"))
b = a.detach().to("cuda:1").requires_grad_()
s1(b).sum().backward(torch.tensor(2.0))
a.backward(GRAD)
print("finished")
"""


@pytest.mark.parametrize("grad", ["b.grad.to(a.device)", "gradient=b.grad.to(a.device)"])
def test_a_zero_dim_gradient_from_another_device_runs_clean(script, dryrun_cli, grad):
    status, report, err = dryrun_cli(script(GRADIENT_GIVEN.replace("GRAD", grad)), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_a_boundary_gradient_left_on_the_next_stage_is_reported(script, dryrun_cli):
    status, report, err = dryrun_cli(script(GRADIENT_GIVEN.replace("GRAD", "b.grad")), "--gpus", "2")
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP001", 9)]
