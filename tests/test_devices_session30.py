"""Session 30: MP020 for values computed from a GPU tensor's elements and tested on the host
(`if row.argmax() == y[i]:`), over `enumerate`, `zip` and `range(len(t))` too; MP019 through a size held in a
name, `size=` and a dtype cast before the move; the rows `enumerate` gives of a GPU tensor."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str) -> list:
    return analyze("t.py", textwrap.dedent(src), ALL, "m", {}).findings


def lines(src: str, code: str) -> list[int]:
    return sorted(f.line for f in findings(src) if f.code == code)


EVAL = """
import torch

out = torch.randn(64, 10, device="cuda:1")
y = torch.randint(0, 10, (64,), device="cuda:1")
losses = [torch.zeros((), device="cuda:1") for _ in range(3)]
for epoch in range(3):
    hits = 0
    LOOP
"""


def per_element(loop: str) -> list[int]:
    src = EVAL.replace("    LOOP", textwrap.indent(textwrap.dedent(loop).strip("\n"), "    "))
    return lines(src, "MP020")


def test_a_test_on_a_value_computed_from_each_element_is_reported():
    # (line 9 is the loop's first line, line 10 its body's)
    assert per_element("for idx, row in enumerate(out):\n    if torch.argmax(row) == y[idx]:\n        hits += 1") == [
        10
    ]
    assert per_element("for v in out[:, 0]:\n    if bool(v > 0):\n        hits += 1") == [10]
    assert per_element("for i in range(out.size(0)):\n    if out[i].argmax() == y[i]:\n        hits += 1") == [10]
    assert per_element("for i in range(len(out)):\n    hits += int(out[i].max() > 0.5)") == [10]
    assert per_element("for row, t in zip(out, y):\n    hits += int(row.argmax() == t)") == [10]
    assert per_element("ok = [1 for r in out if r.sum() > 0]") == [9]
    assert per_element("for r in out:\n    while (r > 0).any():\n        r = r - 1") == [10]
    assert per_element("for r in out:\n    if torch.equal(r, y):\n        hits += 1") == [10]


def test_host_values_of_an_element_and_host_loops_are_clean():
    for loop in (
        "for r in out:\n    if r.shape[0] > 3 and r.dim() == 1:\n        hits += 1",
        "for r in out:\n    if r is None or r.requires_grad:\n        hits += 1",
        "for r in out.tolist():\n    if r[0] > 0:\n        hits += 1",
        "for i, l in enumerate(losses):\n    if l > 0:\n        hits += 1",  # a list of tensors: not one tensor
        "for i in range(10):\n    if out[i].argmax() == 3:\n        hits += 1",  # not a loop over out's rows
        "best = (out.argmax(1) == y).sum().item()",
    ):
        assert per_element(loop) == [], loop


def test_a_read_once_outside_any_loop_is_clean():
    src = """
    import torch

    out = torch.randn(64, 10, device="cuda:1")
    y = torch.randint(0, 10, (64,), device="cuda:1")
    hits = sum(1 for i, row in enumerate(out) if row.argmax() == y[i])
    """
    assert lines(src, "MP020") == []


def test_the_fix_for_a_computed_value_is_to_compute_it_for_the_whole_tensor():
    src = EVAL.replace(
        "    LOOP", "    for i, row in enumerate(out):\n        if row.argmax() == y[i]:\n            hits += 1"
    )
    (f,) = [f for f in findings(src) if f.code == "MP020"]
    assert "`row.argmax() == y[i]` is computed from one element of `out` (on cuda:1)" in f.message
    assert "Compute it for all of `out` at once" in f.message
    src = EVAL.replace("    LOOP", "    vals = [v.item() for v in out[:, 0]]")
    (f,) = [f for f in findings(src) if f.code == "MP020"]
    assert "Read them all with one copy, `out[:, 0].tolist()`" in f.message


def test_enumerate_of_a_gpu_tensor_gives_its_rows_there():
    src = """
    import torch

    out = torch.randn(4, 3, device="cuda:1")
    w = torch.randn(3, device="cuda:0")
    for i, row in enumerate(out):
        s = row * w
    """
    assert lines(src, "MP001") == [7]
    assert lines(src.replace('device="cuda:0"', 'device="cuda:1"'), "MP001") == []


MADE = """
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4).cuda()

    def forward(self, x):
        n = x.size(0)
        bsz, t = x.shape[:2]
        k = 7
        m = MAKE
        return self.l(x) + m
"""


def made(expr: str) -> list:
    return [f for f in findings(MADE.replace("MAKE", expr)) if f.code == "MP019"]


def test_a_size_in_a_name_a_size_keyword_and_a_cast_before_the_move_are_reported():
    for expr in (
        "torch.ones(size=(n, 1)).cuda()",
        "torch.zeros(bsz, t).cuda()",
        "torch.zeros(x.size(0), 3).byte().cuda()",
        "torch.arange(x.size(0)).long().float().cuda()",
    ):
        assert [f.line for f in made(expr)] == [15], expr


def test_a_constant_size_is_not_reported():
    for expr in ("torch.zeros(k, 4).cuda()", "torch.zeros(4, 4).cuda()", "torch.zeros(n, 4).long().cuda().long()"):
        assert [f.line for f in made(expr)] == ([15] if "n, 4" in expr else []), expr


def test_made_for_the_current_device_the_fix_names_the_tensor_it_is_shaped_after():
    (f,) = made("torch.zeros(x.size(0), 3).byte().cuda()")
    assert "`torch.zeros(..., device=x.device)`" in f.message
    (f,) = made("torch.zeros(x.size(0), 3).to('cuda:0')")
    assert "`torch.zeros(..., device='cuda:0')`" in f.message
    (f,) = made("torch.ones(size=(n, 1)).cuda()")  # the size through a name: the device cannot be named
    assert "`torch.ones(..., device='cuda')`" in f.message


PICKED = """
import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 8).to("cuda:0")
        self.head = nn.Linear(8, 2).to("cuda:1")

    def forward(self, x):
        BODY
"""


def picked(body: str) -> list:
    src = PICKED.replace("        BODY", textwrap.indent(textwrap.dedent(body).strip("\n"), "        "))
    return [f for f in findings(src) if f.code == "MP016"]


def test_a_whole_tensor_moved_for_one_position_is_reported_at_the_move():
    for body in (
        'return self.head(self.enc(x.to("cuda:0")).to("cuda:1")[:, 0])',
        'return self.head(self.enc(x.to("cuda:0")).to("cuda:1")[..., -1])',
        'h = self.enc(x.to("cuda:0")).to("cuda:1")\ncls = h[:, 0]\nreturn self.head(cls)',
    ):
        (f,) = picked(body)
        assert f.line == 13, body
        assert "only to be indexed there" in f.message
    (f,) = picked('h = self.enc(x.to("cuda:0")).to("cuda:1")\nreturn self.head(h[:, 0])')
    assert '`self.enc(x.to("cuda:0"))[:, 0].to("cuda:1")`' in f.message


def test_a_moved_tensor_used_whole_or_sliced_by_ranges_is_clean():
    for body in (
        'h = self.enc(x.to("cuda:0")).to("cuda:1")\nreturn self.head(h[:, 0]) + h.sum()',
        'h = self.enc(x.to("cuda:0")).to("cuda:1")\nreturn self.head(h[:, 1:3].mean(1))',
        'h = self.enc(x.to("cuda:0")).to("cuda:1")\nh = h * 2\nreturn self.head(h[:, 0])',
        'return self.head(self.enc(x.to("cuda:0"))[:, 0].to("cuda:1"))',
        'h = self.enc(x.to("cuda:0")).to("cuda:1")\nreturn self.head(h)[:, 0]',
    ):
        assert picked(body) == [], body


CLOSURE = """
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


def mask(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x).masked_fill(~MASK, 0.0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block().to("cuda:0" if i < 1 else "cuda:1") for i in range(2))

    def forward(self, h):
        for i, blk in enumerate(self.blocks):
            if i == 1:
                h = h.to("cuda:1")
            CALL
        return h


Net()(torch.randn(8, 8, device="cuda:0"))
"""


def test_a_function_defined_in_a_loop_sees_the_loop_s_names():
    for call in (
        "def run(x):\n    return blk(x)\nh = run(h)",
        "def run(x, blk=blk):\n    return blk(x)\nh = checkpoint(run, h, use_reentrant=False)",
    ):
        body = textwrap.indent(call, "            ").lstrip()
        bad = CLOSURE.replace("CALL", body).replace("MASK", "mask(8)")
        assert lines(bad, "MP001") == [17], call
        good = CLOSURE.replace("CALL", body).replace("MASK", "mask(8).to(x.device)")
        assert lines(good, "MP001") == [], call


SAMPLED = """
import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset, random_split

ds = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
g = GEN
x = USE
"""


def test_a_cuda_generator_handed_to_a_data_loader_or_a_sampler_is_reported():
    for use in (
        "DataLoader(ds, batch_size=8, shuffle=True, generator=g)",
        "RandomSampler(ds, generator=g)",
        "random_split(ds, [16, 16], generator=g)",
    ):
        src = SAMPLED.replace("USE", use)
        (f,) = [f for f in findings(src.replace("GEN", 'torch.Generator(device="cuda:0")')) if f.code == "MP001"]
        assert f.line == 7 and "draws with it for a tensor on cpu" in f.message, use
        assert lines(src.replace("GEN", "torch.Generator().manual_seed(0)"), "MP001") == [], use


WRAPPED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(8, 8).to("cuda:0")
        self.tower = nn.DataParallel(nn.Linear(8, 8)WRAP)
        self.cls = nn.Linear(8, 2).to("cuda:1")

    def forward(self, x):
        h = self.tower(self.emb(x.to("cuda:0")))
        return self.cls(h)


Model()(torch.randn(4, 8))
"""


def test_a_data_parallel_module_gives_its_output_on_its_output_device():
    for wrap, bad in (
        (", device_ids=[1]", False),
        (", device_ids=[1, 0]", False),
        (", device_ids=[0, 1], output_device=1", False),
        (", device_ids=[0, 1]", True),
        ("", True),  # every GPU: gathered on cuda:0
    ):
        got = lines(WRAPPED.replace("WRAP", wrap), "MP001")
        assert got == ([15] if bad else []), wrap


def test_a_test_on_what_a_module_s_method_gives_back_is_not_taken_for_a_tensor_s():
    # (ChatGLM's web demo: `model.stream_chat(...)` yields text; the model takes it for a tensor on the GPU)
    src = """
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained("some/model", trust_remote_code=True).half().cuda()

    def parse_text(text):
        lines = text.split("\\n")
        lines = [line for line in lines if line != ""]
        return [line for line in lines if line.strip()]

    for step in range(3):
        for response, history in model.stream_chat("hi"):
            parse_text(response)
    """
    assert lines(src, "MP020") == []
