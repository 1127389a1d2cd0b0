"""Session 35: a tensor on a GPU used to index one in host memory (`self.vocab[torch.multinomial(p, 1)]`):
PyTorch refuses it ("indices should be either on cpu or on the same device as the indexed tensor"), unless the
index has no dimensions (read as a number, `table[logits.argmax()]`), which the linter cannot rule out for a
full reduction, an element or a loop's item."""

from __future__ import annotations

import textwrap

import pytest

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str) -> list:
    return list(analyze("t.py", textwrap.dedent(src), ALL, "m", {}, (2, 4, 8)).findings)


def mp001(template: str, hole: str, text: str) -> list:
    """MP001's findings on `template` with `text` in place of `hole`."""
    return [f for f in findings(template.replace(hole, text)) if f.code == "MP001"]


SAMPLER = """
import torch
import torch.nn as nn


class Sampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(16, 100).to("cuda:1")
        self.vocab = torch.randn(100, 8)

    def forward(self, h):
        probs = self.head(h.to("cuda:1")).softmax(-1)
        idx = IDX
        return self.vocab[idx]


out = Sampler()(torch.randn(4, 16))
"""


@pytest.mark.parametrize(
    "idx",
    [
        "torch.multinomial(probs, 1).squeeze(-1)",
        "probs.argmax(-1)",
        "probs.topk(3).indices",
        "probs > 0.5",
    ],
)
def test_gpu_index_of_host_tensor_is_reported(idx: str) -> None:
    got = mp001(SAMPLER, "IDX", idx)
    assert len(got) == 1
    assert got[0].line == 15
    assert "indexes `self.vocab`, which is in host memory" in got[0].message
    assert got[0].fix is None  # which side moves is the author's call


def test_what_is_computed_from_the_rows_is_the_same_finding() -> None:
    src = """
    import torch


    class Schedule:
        def __init__(self):
            self.abar = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 100), 0)

        def noise(self, x0, t, eps):
            a = self.abar[t].view(-1, 1)
            return a.sqrt() * x0 + (1 - a).sqrt() * eps


    x0 = torch.randn(16, 8, device="cuda:1")
    t = torch.randint(0, 100, (16,), device="cuda:1")
    xt = Schedule().noise(x0, t, torch.randn_like(x0))
    """
    got = findings(src)
    assert [(f.code, f.line) for f in got] == [("MP001", 10)]


@pytest.mark.parametrize(
    "idx",
    [
        "torch.multinomial(probs, 1).squeeze(-1).cpu()",  # moved to the host first
        "probs.argmax()",  # no dimensions: read as a number
        "probs.argmax(-1)[0]",  # an element
        "torch.argmax(probs)",
        "probs.sum().long()",
    ],
)
def test_index_that_runs_is_not_reported(idx: str) -> None:
    assert mp001(SAMPLER, "IDX", idx) == []


def test_items_of_a_gpu_tensor_index_host_memory_silently() -> None:
    src = """
    import torch

    table = torch.randn(100, 8)
    steps = torch.arange(10, device="cuda:1")
    for t in steps:
        row = table[t]
    """
    assert findings(src) == []


def test_host_table_moved_with_its_module_is_not_host_memory() -> None:
    src = """
    import torch
    import torch.nn as nn


    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 100)
            self.register_buffer("vocab", torch.randn(100, 8))

        def forward(self, h):
            idx = self.proj(h).argmax(-1)
            return self.vocab[idx]


    head = Head().to("cuda:1")
    out = head(torch.randn(4, 8, device="cuda:1"))
    """
    assert findings(src) == []


BACKWARD = """
import torch
import torch.nn as nn

s0 = nn.Linear(8, 8).to("cuda:0")
s1 = nn.Linear(8, 1).to("cuda:1")
a = s0(torch.randn(4, 8, device="cuda:0"))
b = a.detach().to("cuda:1").requires_grad_()
s1(b).sum().backward()
a.backward(GRAD)
"""


@pytest.mark.parametrize("grad", ["b.grad", "gradient=b.grad", "torch.ones(4, 8, device='cuda:1')"])
def test_boundary_gradient_on_the_next_stage_is_reported(grad: str) -> None:
    got = mp001(BACKWARD, "GRAD", grad)
    assert len(got) == 1 and got[0].line == 10
    assert ".backward()" in got[0].message


@pytest.mark.parametrize(
    "grad",
    [
        "b.grad.to(a.device)",
        "b.grad.to('cuda:0')",
        "torch.ones_like(a)",
        "b.grad.cuda(0)",
    ],
)
def test_gradient_on_the_tensors_device_is_not_reported(grad: str) -> None:
    assert mp001(BACKWARD, "GRAD", grad) == []


def test_zero_dim_gradient_is_moved_by_autograd() -> None:
    src = """
    import torch
    import torch.nn as nn

    net = nn.Linear(8, 1).to("cuda:0")
    loss = net(torch.randn(4, 8, device="cuda:0")).sum()
    loss.backward(torch.tensor(2.0, device="cuda:1"))
    """
    assert findings(src) == []


# A cache every caller shares, written by layers on two GPUs under a key that names no device (held-out round 20's
# t14 shape: a mutable default dict of masks). MP017 at the write.
DEFAULT_CACHE = """
import torch
import torch.nn as nn

_MASKS = {}


class Attn(nn.Module):
    _tables = {}

    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x, cache={}):
        T = x.shape[1]
        if T not in HOLDER:
            HOLDER[KEY] = torch.triu(torch.ones(T, T, device=x.device), 1).bool()
        mask = HOLDER[KEY]
        q, k, v = self.qkv(x).chunk(3, -1)
        s = (q @ k.transpose(1, 2)).masked_fill(mask, float("-inf"))
        return s.softmax(-1) @ v


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Attn(16).to("cuda:0")
        self.b = Attn(16).to(SECOND)

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to(SECOND))


out = Net()(torch.randn(2, 8, 16))
"""


def cache_findings(holder: str = "cache", key: str = "T", second: str = '"cuda:1"', extra: str = "") -> list:
    src = DEFAULT_CACHE.replace("HOLDER", holder).replace("KEY", key).replace("SECOND", second)
    return [f for f in findings(src.replace("        mask = ", extra + "        mask = ")) if f.code == "MP017"]


@pytest.mark.parametrize(
    "holder,kind", [("cache", "a mutable default"), ("_MASKS", "a module-level dict"), ("self._tables", "a class attr")]
)
def test_a_cache_shared_by_layers_on_two_gpus_is_reported(holder: str, kind: str) -> None:
    got = cache_findings(holder)
    assert [f.line for f in got] == [18]  # at the key: the fix goes there
    assert kind in got[0].message and "cuda:0 and cuda:1" in got[0].message


@pytest.mark.parametrize(
    "change",
    [
        {"key": "(T, x.device)"},  # one entry per device
        {"key": "(T, str(x.device))"},
        {"second": '"cuda:0"'},  # both layers on one GPU
        {"extra": "        HOLDER[KEY] = HOLDER[KEY].to(x.device)\n"},  # each reader moves its copy
    ],
)
def test_a_shared_cache_that_cannot_hand_over_another_gpus_tensor_is_not_reported(change: dict) -> None:
    holder = "cache"
    extra = change.get("extra", "").replace("HOLDER", holder).replace("KEY", change.get("key", "T"))
    kw = {k: v for k, v in change.items() if k != "extra"}
    assert cache_findings(holder, extra=extra, **kw) == []


def test_a_cache_of_each_instance_is_not_shared() -> None:
    src = DEFAULT_CACHE.replace("HOLDER", "self.masks").replace("KEY", "T").replace("SECOND", '"cuda:1"')
    src = src.replace("        self.qkv = ", "        self.masks = {}\n        self.qkv = ")
    assert [f for f in findings(src) if f.code == "MP017"] == []


# MP016 for a weight (not only a gradient) moved whole to another GPU for one value: wanda's magnitude threshold
# over a split LLaMA (real21's miss_01). A constant moved and reduced on every call stays MP011's; a tensor whose
# size the code spells out small is no finding (one launch).
REDUCED = """
import torch

model = torch.nn.Sequential(torch.nn.Linear(4096, 4096).to("cuda:0"), torch.nn.Linear(4096, 4096).to("cuda:1"))


def stat(params, device="cuda:0"):
    return [EXPR for p in params]


print(stat(model.parameters()))
"""


@pytest.mark.parametrize(
    "expr", ["p.data.to(device).max()", "p.to(device).abs().sum()", "p.detach().to(device).norm()"]
)
def test_a_weight_moved_whole_for_one_value_is_reported(expr: str) -> None:
    got = [f for f in findings(REDUCED.replace("EXPR", expr)) if f.code == "MP016"]
    assert [(f.line, "reduced to one value" in f.message) for f in got] == [(8, True)]


@pytest.mark.parametrize("expr", ["p.data.max().to(device)", "p.data.to(device)", "p.to(device).sum(0)"])
def test_a_weight_reduced_where_it_is_or_kept_whole_is_not(expr: str) -> None:
    assert [f for f in findings(REDUCED.replace("EXPR", expr)) if f.code == "MP016"] == []


def test_a_small_table_of_spelled_out_size_moved_for_its_sum_is_not_reported() -> None:
    src = """
    import torch

    flags = torch.zeros(2, 2, dtype=torch.int8, device="cuda:0")
    big = torch.randn(1024, 1024, device="cuda:0")
    for _ in range(3):
        a = flags.to("cuda:1").sum()
        b = torch.randn(1024, 1024, device="cuda:0").to("cuda:1").sum()
    """
    assert [(f.code, f.line) for f in findings(src)] == [("MP016", 8)]


# Two slices of a list of blocks of unknown length, placed on two GPUs (precision round 21's c19, a ViT whose
# drop-path rates come from `torch.linspace(...).tolist()`): which blocks each slice holds is not known, so they
# are not known to share any. The whole list held by both stages still is.
SLICED = """
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.n = nn.LayerNorm(8)
        self.p = p


class M(nn.Module):
    def __init__(self, rates):
        super().__init__()
        blocks = [Block(p) for p in rates]
        self.s0 = nn.ModuleList(FIRST).to("cuda:0")
        self.s1 = nn.ModuleList(SECOND).to("cuda:1")


m = M(torch.linspace(0, 1, 4).tolist())
"""


def test_slices_of_a_list_of_unknown_length_are_not_known_to_share_blocks() -> None:
    src = SLICED.replace("FIRST", "blocks[: len(blocks) // 2]").replace("SECOND", "blocks[len(blocks) // 2 :]")
    assert findings(src) == []


def test_one_list_of_blocks_held_by_two_stages_is_still_reported() -> None:
    got = findings(SLICED.replace("FIRST", "blocks").replace("SECOND", "blocks"))
    assert [(f.code, f.line) for f in got] == [("MP007", 18)]


def test_a_name_made_only_to_key_the_cache_is_where_the_finding_goes() -> None:
    src = DEFAULT_CACHE.replace("HOLDER", "_MASKS").replace("KEY", "key").replace("SECOND", '"cuda:1"')
    src = src.replace("        T = x.shape[1]\n", "        T = x.shape[1]\n        key = T\n").replace(
        "if T not in", "if key not in"
    )
    got = [f for f in findings(src) if f.code == "MP017"]
    assert [(f.line, f.column) for f in got] == [(17, 15)]
    assert "line 19 stores a tensor" in got[0].message and "(`(T, x.device)`)" in got[0].message


# Held-out round 21's t24: a MoCo-style memory bank on cuda:0, refreshed in place by `enqueue`, its negatives read
# by a query encoder on cuda:1 with indices drawn on the host every step.
BANK = """
import torch
import torch.nn as nn


class Moco(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8).to("cuda:1")
        self.register_buffer("bank", torch.randn(4096, 8, device="cuda:0"))

    @torch.no_grad()
    def enqueue(self, keys):
        idx = torch.arange(keys.size(0), device=self.bank.device)
        self.bank.index_copy_(0, idx, keys.to(self.bank.device))

    def forward(self, x, neg_idx):
        q = self.q(x.to("cuda:1"))
        negatives = NEGATIVES
        return q @ negatives.T


def main():
    m = Moco()
    for step in range(3):
        out = m(torch.randn(4, 8), torch.randint(0, 4096, (64,)))
        m.enqueue(torch.randn(4, 8))


main()
"""


def test_a_bank_moved_whole_for_rows_a_host_index_picks_is_mp016_not_mp011() -> None:
    got = findings(BANK.replace("NEGATIVES", 'self.bank.to("cuda:1")[neg_idx.to("cuda:1")]'))
    assert [(f.code, f.line) for f in got] == [("MP016", 19)]  # refreshed by enqueue: not the same data each call
    assert '`self.bank[neg_idx].to("cuda:1")`' in got[0].message


def test_rows_picked_by_a_fresh_index_are_no_unchanging_tensor() -> None:
    assert findings(BANK.replace("NEGATIVES", 'self.bank[neg_idx.to(self.bank.device)].to("cuda:1")')) == []


def test_labels_copied_twice_to_one_gpu_cost_a_launch_and_are_not_reported() -> None:
    src = """
    import torch
    import torch.nn.functional as F

    head = torch.nn.Linear(8, 5).to("cuda:1")


    def step(n):
        labels = torch.randint(0, 5, (n,))
        logits = head(torch.randn(n, 8, device="cuda:1"))
        loss = F.cross_entropy(logits, labels.to(logits.device))
        acc = (logits.argmax(1) == labels.to(logits.device)).float().mean()
        return loss, acc


    step(16)
    """
    assert findings(src) == []


# Held-out round 21's t07: `build()` calls set_device for each stage and returns; set_device is global, so the
# caller's index-less `.cuda()` lands on the last one (MP004). The GPU indices come from two argparse flags.
SET_IN_HELPER = """
import argparse

import torch
import torch.nn as nn


def build(args):
    torch.cuda.set_device(args.encoder_gpu)
    enc = nn.Linear(4, 4).cuda()
    torch.cuda.set_device(args.decoder_gpu)
    dec = nn.Linear(4, 4).cuda()
    return enc, dec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--encoder-gpu", type=int, default=0)
    ap.add_argument(SECOND, type=int, default=1)
    args = ap.parse_args()
    enc, dec = build(args)
    for step in range(2):
        x = torch.randn(2, 4).cuda(non_blocking=True)
        y = dec(enc(x).cuda(args.decoder_gpu))


main()
"""


def test_set_device_in_a_helper_leaves_the_caller_on_that_device() -> None:
    got = findings(SET_IN_HELPER.replace("SECOND", '"--decoder-gpu"'))
    assert [(f.code, f.line) for f in got] == [("MP004", 23)]
    assert "cuda:1" in got[0].message and "'cuda:0'" in got[0].message


@pytest.mark.parametrize(
    "second,default",
    [
        ('"--local-rank"', "1"),  # a rank: a launcher's, per process
    ],
)
def test_gpu_flags_that_may_be_a_launchers_stay_unknown(second: str, default: str) -> None:
    src = SET_IN_HELPER.replace("SECOND, type=int, default=1", f"{second}, type=int, default={default}")
    if "rank" in second:
        src = src.replace("args.decoder_gpu", "args.local_rank")
    assert findings(src) == []


def test_an_argument_a_split_model_needs_elsewhere_names_the_part_not_the_first_parameter() -> None:
    """Held-out round 21's t02: a seq2seq model (encoder on cuda:0, decoder on cuda:1) whose decoder makes its
    positions on the device of the target tokens it was given; the fix was `next(model.parameters()).device`,
    the encoder's GPU, which would not have mended it."""
    src = """
    import torch
    import torch.nn as nn


    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(50, 16)
            self.pos = nn.Embedding(32, 16)

        def forward(self, tgt):
            positions = torch.arange(tgt.size(1), device=tgt.device)
            return self.tok(tgt.to(self.pos.weight.device)) + self.pos(positions)


    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Linear(16, 16).to("cuda:0")
            self.decoder = Decoder().to("cuda:1")

        def forward(self, src, tgt):
            return self.encoder(src.to("cuda:0")), self.decoder(tgt)


    model = Seq2Seq()
    out = model(torch.randn(4, 16), torch.randint(0, 50, (4, 8)).to("cuda:0"))
    """
    got = [f for f in findings(src) if f.code == "MP001"]
    assert len(got) == 1
    assert "(split over GPUs) needs this argument on cuda:1" in got[0].message
    assert "parameters()" not in got[0].message


# Held-out round 21's t05: an EMA whose shadows go to `torch.device(device) if device else next(model.parameters())
# .device`, with device=None: Python's truth of None, a number or a string decides a test, as a bool does.
EMA_OF_SPLIT = """
import torch
import torch.nn as nn


class EMA:
    def __init__(self, model, decay=0.995, device=None):
        self.decay = decay
        DEVICE
        self.shadow = {n: p.detach().to(self.device, copy=True) for n, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model):
        for n, p in model.named_parameters():
            self.shadow[n].mul_(self.decay).add_(p.detach(), alpha=1.0 - self.decay)


model = nn.Sequential(nn.Linear(4, 4).to("cuda:0"), nn.Linear(4, 4).to("cuda:1"))
ema = EMA(model)
for step in range(2):
    ema.update(model)
"""


@pytest.mark.parametrize(
    "device",
    [
        "self.device = torch.device(device) if device else next(model.parameters()).device",
        "if device:\n            self.device = torch.device(device)\n        else:\n"
        "            self.device = next(model.parameters()).device",
    ],
)
def test_a_test_of_a_none_default_takes_its_false_branch(device: str) -> None:
    src = EMA_OF_SPLIT.replace("DEVICE", device)
    got = [f for f in findings(src) if f.code == "MP001"]
    update = next(i for i, line in enumerate(textwrap.dedent(src).splitlines(), 1) if ".add_(p.detach()" in line)
    assert [f.line for f in got] == [update]
    assert "split model span several devices" in got[0].message


# Held-out round 21's t10: statistics saved from the backbone's GPU and loaded without map_location come back on it.
SAVED_STATS = """
import os
import tempfile

import torch
import torch.nn as nn


def main():
    backbone = nn.Linear(8, 8).to("cuda:0")
    head = nn.Linear(8, 2).to("cuda:1")
    path = os.path.join(tempfile.mkdtemp(), "stats.pt")
    feats = backbone(torch.randn(16, 8, device="cuda:0"))
    torch.save({"mean": feats.mean(0), "std": feats.std(0)}, path)
    stats = LOAD
    f = backbone(torch.randn(4, 8, device="cuda:0")).to("cuda:1")
    return head((f - stats["mean"]) / stats["std"])


main()
"""


def test_a_tensor_loaded_without_map_location_is_where_the_file_saved_it() -> None:
    got = [(f.code, f.line) for f in findings(SAVED_STATS.replace("LOAD", "torch.load(path)"))]
    assert got == [("MP001", 17)]


@pytest.mark.parametrize("load", ['torch.load(path, map_location="cuda:1")', 'torch.load("other.pt")'])
def test_a_load_mapped_or_of_another_file_is_not_the_saved_tensor(load: str) -> None:
    assert findings(SAVED_STATS.replace("LOAD", load)) == []
