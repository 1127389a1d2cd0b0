"""Session 37: parameters replaced or tied by a method called after the split, layer maps built by a nested
dict comprehension, `x is None` of a tensor every path made, and device-map keys that match nothing (MP023)."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str, code: str | None = None) -> list:
    got = analyze("t.py", textwrap.dedent(src), ALL, "m", {}, (2, 4, 8)).findings
    return [f for f in got if code is None or f.code == code]


# ----------------------------------------------------------------- a parameter replaced after the split

REPLACED = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.pe = nn.Parameter(torch.zeros(1, 4))

    def split(self):
        self.a.to("cuda:0")
        self.pe.data = self.pe.data.to("cuda:0")
        self.b.to("cuda:1")
        return self

    def load_table(self, path):
        state = torch.load(path, map_location="cpu")
        self.pe = nn.Parameter(NEW)

    def forward(self, x):
        x = self.a(x.to("cuda:0"))
        x = x + self.pe
        return self.b(x.to("cuda:1"))


model = Net().split()
model.load_table("table.pt")
model(torch.randn(2, 4))
"""


def test_a_parameter_replaced_by_a_host_tensor_after_the_split_is_reported_where_it_is_used():
    (f,) = findings(REPLACED.replace("NEW", 'state["pe"] * 2'), "MP001")
    assert f.line == 25
    assert "`self.pe` is on cpu" in f.message and "cuda:0" in f.message


def test_a_parameter_replaced_by_one_made_on_its_device_is_silent():
    for new in ('state["pe"].to("cuda:0")', 'torch.zeros(1, 4, device="cuda:0")'):
        assert findings(REPLACED.replace("NEW", new)) == [], new


# ----------------------------------------------------------------- weights tied after the split

TIED = """
import torch
import torch.nn as nn


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(50, 8)
        self.block = nn.Linear(8, 8)
        self.lm_head = nn.Linear(8, 50, bias=False)

    def parallelize(self):
        self.wte.to("cuda:0")
        self.block.to("cuda:1")
        self.lm_head.to(HEAD)

    def tie_weights(self):
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        h = self.wte(idx.to("cuda:0"))
        h = self.block(h.to("cuda:1"))
        return self.lm_head(h)


model = LM()
model.parallelize()
model.tie_weights()
model(torch.randint(0, 50, (2, 5)))
"""


def test_a_head_tied_to_the_embedding_after_the_split_computes_where_the_embedding_is():
    (f,) = findings(TIED.replace("HEAD", '"cuda:1"'), "MP001")
    assert f.line == 24
    assert "`h` is on cuda:1" in f.message and "tied to a Parameter there" in f.message


def test_a_head_tied_on_the_embeddings_device_is_silent():
    assert (
        findings(
            TIED.replace("HEAD", '"cuda:0"').replace("return self.lm_head(h)", 'return self.lm_head(h.to("cuda:0"))')
        )
        == []
    )


# ----------------------------------------------------------------- {layer: device} from a nested comprehension

NESTED = """
import torch

DEVICE_MAP = {0: [0, 1, 2], 1: [3, 4, 5]}
layer_device = {i: f"cuda:{g}" for g, ids in DEVICE_MAP.items() for i in ids}
x = torch.ones(2, device=layer_device[0])
y = torch.ones(2, device=layer_device[K])
x + y
"""


def test_a_layer_map_from_a_nested_dict_comprehension_is_known():
    (f,) = findings(NESTED.replace("K", "4"), "MP001")
    assert f.line == 8 and "cuda:1" in f.message and "cuda:0" in f.message
    assert findings(NESTED.replace("K", "2")) == []


# ----------------------------------------------------------------- `bias is None` of a tensor

SHARED_BIAS = """
import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self, has_bias):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.rel = nn.Embedding(16, 4) if has_bias else None

    def forward(self, x, bias=None):
        if bias is None:
            bias = self.rel(torch.arange(4, device=x.device))
        return self.lin(x) + bias, bias


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer(i == 0) for i in range(4))
        self.devs = ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
        for layer, d in zip(self.layers, self.devs):
            layer.to(d)

    def forward(self, h):
        bias = None
        for i, layer in enumerate(self.layers):
            HOP
            h, bias = layer(h, bias)
        return h


Encoder()(torch.randn(2, 4))
"""


def test_a_bias_made_by_the_first_layer_and_passed_to_layers_on_another_gpu_is_reported():
    (f,) = findings(SHARED_BIAS.replace("HOP", "h = h.to(self.devs[i])"), "MP001")
    assert f.line == 30 and "`bias` is on cuda:0" in f.message and "cuda:1" in f.message


def test_a_bias_that_hops_with_the_activations_is_silent():
    hop = "h, bias = h.to(self.devs[i]), (bias.to(self.devs[i]) if bias is not None else None)"
    assert findings(SHARED_BIAS.replace("HOP", hop)) == []


def test_a_tensor_that_may_be_none_leaves_the_test_undecided():
    src = """
    import torch

    def f(x, training):
        aux = torch.ones(4, device="cuda:1") if training else None
        if aux is None:
            return x
        return x + aux.to(x.device)

    f(torch.ones(4, device="cuda:0"), True)
    """
    assert findings(src) == []


def test_a_gradient_may_be_none():
    src = """
    import torch
    import torch.nn as nn

    a = nn.Linear(4, 4).to("cuda:0")
    b = nn.Linear(4, 4).to("cuda:1")
    a.requires_grad_(False)
    params = [p for p in list(a.parameters()) + list(b.parameters()) if p.grad is not None]
    coef = torch.ones((), device="cuda:1")
    for p in params:
        p.grad.mul_(coef)
    """
    assert findings(src) == []


# ----------------------------------------------------------------- MP023: a device map key that matches nothing

MAP = """
import torch.nn as nn

DEVICE_MAP = {
    "embed": "cuda:0",
    "encoder_layers": "cuda:0",
    KEY: "cuda:1",
    "head": "cuda:1",
}


class Seq2Seq(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.embed = nn.Embedding(10, d)
        self.encoder_layers = nn.ModuleList(nn.Linear(d, d) for _ in range(2))
        self.decoder_layers = nn.ModuleList(nn.Linear(d, d) for _ in range(2))
        self.head = nn.Linear(d, 10)

    def place(self, device_map, default="cuda:0"):
        for name, child in self.named_children():
            LOOKUP


model = Seq2Seq()
model.place(DEVICE_MAP)
"""

GET = "child.to(device_map.get(name, default))"


def test_a_key_spelled_unlike_the_module_is_reported_at_the_key():
    (f,) = findings(MAP.replace("KEY", '"decoder_blocks"').replace("LOOKUP", GET), "MP023")
    assert (f.line, f.column) == (7, 5)
    assert "'decoder_blocks'" in f.message and "'decoder_layers'" in f.message
    assert "line 22" in f.message and "default (cuda:0)" in f.message and "instead of cuda:1" in f.message
    assert f.devices == ("cuda:1", "cuda:0")


def test_a_lookup_by_a_test_in_the_map_is_followed_too():
    lookup = "child.to(device_map[name] if name in device_map else default)"
    (f,) = findings(MAP.replace("KEY", '"decoder_blocks"').replace("LOOKUP", lookup), "MP023")
    assert f.line == 7 and "the code's fallback" in f.message


def test_a_get_without_default_leaves_the_part_where_it_was_built():
    lookup = "d = device_map.get(name)\n            if d is not None:\n                child.to(d)"
    (f,) = findings(MAP.replace("KEY", '"decoder_blocks"').replace("LOOKUP", lookup), "MP023")
    assert "gets None, so it stays where it was built" in f.message


def test_device_maps_that_match_or_cannot_be_told_are_silent():
    cases = {
        "spelled right": ('"decoder_layers"', GET),
        "an optional part, unlike the defaulted one": ('"pooler"', GET),
        "the default is the key's device": ('"decoder_blocks"', "child.to(device_map.get(name, 'cuda:1'))"),
        "the map read whole": (
            '"decoder_blocks"',
            GET + "\n        for key, dev in device_map.items():\n            print(key, dev)",
        ),
    }
    for what, (key, lookup) in cases.items():
        assert findings(MAP.replace("KEY", key).replace("LOOKUP", lookup), "MP023") == [], what


# ----------------------------------------------------------------- MP005: a torch function run on host copies only

APPEND = """
import torch

ids = torch.zeros(1, 4, dtype=torch.long, device="cuda:0")
for _ in range(10):
    tok = torch.randint(0, 9, (1, 1), device="cuda:1")
    ids = torch.cat([ids.cpu(), NEW], dim=1).to("cuda:0")
"""


def test_a_sequence_grown_on_the_host_from_gpu_copies_and_sent_back_is_reported():
    (f,) = findings(APPEND.replace("NEW", "tok.cpu()"), "MP005")
    assert f.line == 7
    assert "only from data copied off a GPU (`ids`, which line 7 copied from cuda:0 to the CPU)" in f.message


def test_host_data_joining_the_copies_makes_it_the_hosts_own_work():
    assert findings(APPEND.replace("NEW", "torch.tensor([[5]])"), "MP005") == []


# ----------------------------------------------------------------- MP021: rows sent to the host one by one

HOST_ROWS = """
import torch


def build_index(encoder, loader):
    vecs = []
    for ids in loader:
        emb = ids.to("cuda:0").float() * 2
        LOOP
    return torch.stack(vecs)
"""


def test_rows_of_a_gpu_tensor_sent_to_the_host_one_by_one_are_reported():
    for loop, line in (
        ("for i in range(emb.shape[0]):\n            vecs.append(emb[i].cpu())", 10),
        ("for i in range(len(emb)):\n            vecs.append(emb[i].to('cpu'))", 10),
        ("vecs.extend(e.cpu() for e in emb)", 9),
    ):
        (f,) = findings(HOST_ROWS.replace("LOOP", loop), "MP021")
        assert f.line == line, loop
        assert "moved from cuda:0 to cpu on every pass" in f.message and "a copy the host waits for" in f.message


def test_a_tensor_copied_to_the_host_once_then_walked_is_silent():
    for loop in (
        "emb = emb.cpu()\n        for i in range(emb.shape[0]):\n            vecs.append(emb[i])",
        "for i in range(emb.shape[0]):\n            vecs.append(emb[i] * 2)",
        "for i in range(emb.shape[0]):\n            vecs.append(emb[0].cpu())",
    ):
        assert findings(HOST_ROWS.replace("LOOP", loop), "MP021") == [], loop


# ----------------------------------------------------------------- precision: round probe_dr23


def test_per_row_statistics_exchanged_between_two_vocabulary_shards_are_no_ping_pong():
    # A vocabulary-parallel cross entropy: only per-token maxima and sums cross, back and forth.
    src = """
    import torch

    D0, D1 = torch.device("cuda:0"), torch.device("cuda:1")


    def sharded_lse(logits0, logits1):
        m = torch.maximum(logits0.max(1).values, logits1.max(1).values.to(D0))
        e0 = (logits0 - m[:, None]).exp()
        e1 = (logits1 - m.to(D1)[:, None]).exp()
        return (e0.sum(1) + e1.sum(1).to(D0)).log() + m


    h = torch.randn(6, 8, device=D0)
    w0, w1 = torch.randn(4, 8, device=D0), torch.randn(4, 8, device=D1)
    print(sharded_lse(h @ w0.t(), h.to(D1) @ w1.t()))
    """
    assert findings(src) == []


ROLLOUT = """
import torch
import torch.nn as nn


def train(n_env):
    critic = nn.Linear(4, 1).to("cuda:1")
    obs = torch.randn(n_env, 4)
    for it in range(3):
        values = []
        for t in range(16):
            values.append(critic(obs.to("cuda:1")))
            STEP
        last = critic(obs.to("cuda:1"))


train(64)
"""


def test_a_rollout_that_copies_its_last_observation_again_on_entering_the_next_is_silent():
    assert findings(ROLLOUT.replace("STEP", "obs = torch.randn(n_env, 4)"), "MP011") == []


def test_a_value_the_inner_loop_never_changes_is_still_copied_again():
    found = findings(ROLLOUT.replace("STEP", "pass"), "MP011")
    assert [f.line for f in found] == [12, 14]


# ----------------------------------------------------------------- round probe24: misses read after scoring

HEAD_HOP = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(10, 8))

    def forward(self, emb, labels):
        cos = F.linear(emb, self.weight)
        return torch.zeros_like(cos).scatter_(1, labels.view(-1, 1), 1.0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(4, 8).to("cuda:0")
        self.head = Head().to("cuda:1")

    def forward(self, x, labels):
        emb = self.backbone(x)
        return self.head(emb.to("cuda:1"), LABELS)


model = Net()
model(torch.randn(2, 4).to("cuda:0"), torch.randint(0, 10, (2,)).to("cuda:0"))
"""


def test_an_input_a_split_forward_passes_on_unmoved_beside_its_hop_is_reported_at_that_hop():
    (f,) = findings(HEAD_HOP.replace("LABELS", "labels"), "MP001")
    assert f.line == 25 and "`labels` is on cuda:0" in f.message and "`self.head` is on cuda:1" in f.message
    assert findings(HEAD_HOP.replace("LABELS", 'labels.to("cuda:1")')) == []


def test_comparison_methods_check_their_operands_device():
    src = """
    import torch

    output = torch.randn(16, 100, device="cuda:1")
    target = torch.randint(0, 100, (16,)).to(TARGET)
    _, pred = output.topk(5, 1, True, True)
    correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
    """
    (f,) = findings(src.replace("TARGET", '"cuda:0"'))
    assert f.line == 7 and f.code == "MP001"
    assert findings(src.replace("TARGET", "output.device")) == []


def test_gradients_of_the_parameters_of_two_parts_on_two_gpus_are_on_both():
    src = """
    import torch
    import torch.nn as nn

    a = nn.Linear(4, 4).to("cuda:0")
    b = nn.Linear(4, 4).to("cuda:1")
    shared = list(a.parameters()) + list(b.parameters())
    loss = b(a(torch.randn(2, 4, device="cuda:0")).to("cuda:1")).sum()
    grads = torch.autograd.grad(loss, shared)
    flat = torch.cat([g.flatten()MOVE for g in grads])
    """
    (f,) = findings(src.replace("MOVE", ""), "MP001")
    assert f.line == 10
    assert findings(src.replace("MOVE", '.to("cuda:0")')) == []


def test_gpu_settings_read_as_int_of_an_environment_default_are_known():
    src = """
    import os
    import torch

    ENC_GPU = int(os.environ.get("ENC_GPU", "0"))
    DEC_GPU = int(os.environ.get("DEC_GPU", "1"))
    a = torch.ones(2, device=torch.device("cuda", ENC_GPU))
    b = torch.ones(2, device=torch.device("cuda", DEC_GPU))
    a + b
    """
    (f,) = findings(src, "MP001")
    assert f.line == 9 and "cuda:1" in f.message and "cuda:0" in f.message


QUANT = """
import torch
import torch.nn as nn


class FakeQuant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        s = scale.to(x.device)
        ctx.save_for_backward(x, SAVED)
        return torch.round(x / s) * s

    @staticmethod
    def backward(ctx, grad_out):
        x, scale = ctx.saved_tensors
        return grad_out * ((x / scale).abs() <= 127), None


class Quant(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x):
        return FakeQuant.apply(x, self.scale)


quant = Quant().to("cuda:0")
out = quant(torch.randn(2, 8, device="cuda:1"))
"""


def test_what_a_custom_functions_backward_reads_on_another_gpu_is_reported_in_backward():
    (f,) = findings(QUANT.replace("SAVED", "scale"), "MP001")
    assert f.line == 16 and "`x` is on cuda:1" in f.message and "`scale`, which is on cuda:0" in f.message
    assert findings(QUANT.replace("SAVED", "s")) == []


# ----------------------------------------------------------------- MP018: a hook that returns nothing

HOOK = """
from functools import partial

import torch
import torch.nn as nn


def _move_inputs(device, module, args):
    BODY


model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
for i, layer in enumerate(model):
    layer.to(f"cuda:{i}")
    layer.register_forward_pre_hook(partial(_move_inputs, torch.device("cuda", i)))
"""


def test_a_pre_hook_that_moves_its_inputs_into_a_local_and_returns_nothing_is_reported():
    (f,) = findings(HOOK.replace("BODY", "args = tuple(a.to(device) for a in args)"), "MP018")
    assert f.line == 9 and "`_move_inputs` is registered with `register_forward_pre_hook` (line 15)" in f.message
    assert "`return tuple(a.to(device) for a in args)`" in f.message


def test_a_pre_hook_that_returns_what_it_moved_is_silent():
    for body in (
        "return tuple(a.to(device) for a in args)",
        "args = tuple(a.to(device) for a in args)\n    return args",
        "print(device)",
    ):
        assert findings(HOOK.replace("BODY", body), "MP018") == [], body


# ----------------------------------------------------------------- MP004: modules built under torch.cuda.device

CUDA_DEVICE = """
import torch
import torch.nn as nn


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Conv1d(8, 8, 3, padding=1) for _ in range(2))


def build_stack(gpu):
    with torch.cuda.device(gpu):
        BODY


stacks = nn.ModuleList(build_stack(g) for g in (0, 1))
"""


def test_a_module_built_under_torch_cuda_device_stays_on_the_cpu():
    for body in ("return Stack()", "s = Stack()\n        return s", "return nn.Linear(4, 4)"):
        (f,) = findings(CUDA_DEVICE.replace("BODY", body), "MP004")
        assert f.line == 13 and "only sets the current CUDA device" in f.message, body
        assert "built inside it at line 14" in f.message


def test_a_module_built_under_torch_cuda_device_and_moved_there_is_silent():
    for body in (
        "return Stack().cuda()",
        "s = Stack()\n        s.cuda()\n        return s",
        "return nn.Linear(4, 4, device='cuda')",
    ):
        assert findings(CUDA_DEVICE.replace("BODY", body), "MP004") == [], body
    placed = CUDA_DEVICE.replace("BODY", "return Stack()").replace(
        "super().__init__()", "super().__init__()\n        self.cuda()"
    )
    assert findings(placed.replace("self.layers = ", "self.layers = "), "MP004") == []


# ----------------------------------------------------------------- MP001: optimizer steps loaded onto one GPU

RESUME = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4).to("cuda:0")
        self.b = nn.Linear(4, 4).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


ckpt = torch.load("ckpt.pt", map_location=WHERE)
model = Net()
model.load_state_dict(ckpt["model"])
opt = torch.optim.OPT(model.parameters(), lr=1e-3KW)
opt.load_state_dict(ckpt["optimizer"])
"""


def _resume(where='"cuda:0"', opt="Adam", kw=""):
    return RESUME.replace("WHERE", where).replace("OPT", opt).replace("KW", kw)


def test_adam_state_loaded_onto_one_gpu_for_a_split_model_is_reported_at_the_load():
    (f,) = findings(_resume(), "MP001")
    assert f.line == 20 and "mapped to cuda:0 (line 16)" in f.message
    assert "steps of the parameters on cuda:1 stay on cuda:0" in f.message and "map_location=" in f.message


def test_optimizer_state_loaded_to_the_host_or_without_steps_is_silent():
    for case in (_resume('"cpu"'), _resume(opt="SGD"), _resume(kw=", fused=True"), _resume(kw=", foreach=False")):
        assert findings(case, "MP001") == [], case


def test_one_environment_variable_listing_the_gpus_is_a_placement():
    src = """
    import os
    import torch

    GPUS = [torch.device(d) for d in os.environ.get("WRN_DEVICES", "cuda:0,cuda:1").split(",")]
    for step in range(3):
        pseudo = torch.randn(8, 10, device=GPUS[1]).argmax(-1)
        hist = [label.item() for label in pseudo]
    """
    (f,) = findings(src, "MP020")
    assert f.line == 8 and "(on cuda:1)" in f.message
    assert findings(src.replace('"cuda:0,cuda:1"', '"cuda:0"')) == []


CHUNKS = """
import torch


def bags(feats, sizes):
    feats = feats.to("cuda:0") * 2
    return ELEMENT
"""


def test_chunks_that_a_comprehension_only_moves_are_one_copy_per_chunk():
    (f,) = findings(CHUNKS.replace("ELEMENT", '[f.to("cuda:1") for f in feats.split(sizes)]'), "MP021")
    assert f.line == 7 and "`f` is a chunk of `feats`" in f.message and "one copy of `feats`" in f.message


def test_chunks_worked_on_where_they_arrive_or_moved_once_are_silent():
    for element in (
        '[f.to("cuda:1") * 2 for f in feats.split(sizes)]',
        'feats.to("cuda:1").split(sizes)',
        '[torch.relu(f.to("cuda:1")) for f in feats.split(sizes)]',
    ):
        assert findings(CHUNKS.replace("ELEMENT", element), "MP021") == [], element


BANK = """
import torch


def update(memory, idx, f):
    f = f.to("cuda:0") * 2
    memory = memory.to("cuda:1")
    for j, i in enumerate(idx.tolist()):
        memory[i] = 0.5 * memory[i] + 0.5 * ROW
"""


def test_rows_picked_by_an_enumerate_counter_and_moved_one_by_one_are_reported():
    (f,) = findings(BANK.replace("ROW", 'f[j].to("cuda:1")'), "MP021")
    assert f.line == 9 and "`f[j]` is a row of `f`" in f.message


def test_rows_of_a_tensor_moved_once_before_the_enumerated_loop_are_silent():
    src = BANK.replace("ROW", "f[j]").replace('f = f.to("cuda:0") * 2', 'f = f.to("cuda:1") * 2')
    assert findings(src, "MP021") == []


def test_parameters_placed_through_a_loop_over_them_by_data_are_where_they_were_moved():
    src = """
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 8))
            self.b = nn.Parameter(torch.zeros(4, 8))
            for p in (self.w, self.b):
                p.data = p.data.to("cuda:0")
            self.head = nn.Linear(8, 2).to("cuda:1")

        def forward(self, x):
            h = x.to("cuda:0").unsqueeze(-1) * self.w + self.b
            return self.head(h.to("cuda:1"))


    Net()(torch.randn(3, 4))
    """
    assert findings(src) == []
    (f,) = findings(src.replace('p.data = p.data.to("cuda:0")', 'p.data = p.data.to("cuda:1")'), "MP001")
    assert f.line == 16


# ----------------------------------------------------------------- precision round dr24


def test_a_loss_module_moved_by_a_statement_of_its_own_takes_its_weights_along():
    src = """
    import torch
    import torch.nn as nn

    counts = torch.tensor([400, 200, 60, 20])
    criterion = nn.CrossEntropyLoss(weight=counts.sum() / (4.0 * counts.float()))
    criterion.to(WHERE)
    logits = torch.randn(8, 4, device="cuda:1")
    loss = criterion(logits, torch.randint(0, 4, (8,), device="cuda:1"))
    """
    assert findings(src.replace("WHERE", '"cuda:1"')) == []
    (f,) = findings(src.replace("WHERE", '"cuda:0"'), "MP008")
    assert f.line == 9 and "on cuda:0" in f.message


def test_factories_inside_a_torch_device_block_use_its_device():
    src = """
    import torch


    def mask(x, p):
        with torch.device(x.device):
            keep = torch.rand(x.shape) >= p
        return x * keep


    mask(torch.randn(4, 8, device="cuda:0"), 0.1)
    with torch.device("cuda:1"):
        z = torch.zeros(4)
    y = torch.ones(4, device="cuda:0") + z
    """
    (f,) = findings(src)
    assert f.line == 14 and "`z` is on cuda:1" in f.message


def test_a_placing_method_that_moves_the_whole_model_first_then_its_towers():
    src = """
    import math

    import torch
    import torch.nn as nn


    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.image_tower, self.text_tower = nn.Linear(8, 4), nn.Linear(8, 4)
            self.t_prime = nn.Parameter(torch.tensor(math.log(10.0)))

        def parallelize(self, placement):
            self.to(placement["default"])
            self.image_tower.to(placement["image_tower"])
            self.text_tower.to(placement["text_tower"])
            self.img_dev, self.txt_dev = torch.device(placement["image_tower"]), torch.device(placement["text_tower"])
            return self

        def forward(self, images, ids):
            zimg = self.image_tower(images.to(self.img_dev))
            ztxt = self.text_tower(ids.to(self.txt_dev))
            return zimg.to(self.txt_dev) @ ztxt.T * self.t_prime.exp()


    model = Pair().parallelize({"default": DEFAULT, "image_tower": "cuda:0", "text_tower": "cuda:1"})
    model(torch.randn(2, 8), torch.randn(2, 8))
    """
    (f,) = findings(src.replace("DEFAULT", '"cuda:0"'), "MP001")
    assert f.line == 24 and "`self.t_prime.exp()` is on cuda:0" in f.message
    assert findings(src.replace("DEFAULT", '"cuda:1"')) == []


def test_sampled_token_ids_copied_twice_to_one_gpu_cost_a_launch():
    src = """
    import torch
    import torch.nn.functional as F


    def step(logits, scale, ids):
        nxt = torch.multinomial(F.softmax(logits, dim=-1), 1)
        a = nxt.to(scale.device)
        return torch.cat([ids, nxt.to(ids.device)], dim=1), a


    for _ in range(3):
        step(torch.randn(4, 9, device="cuda:1"), torch.ones(4, device="cuda:0"), torch.zeros(4, 2, device="cuda:0"))
    """
    assert findings(src, "MP011") == []
