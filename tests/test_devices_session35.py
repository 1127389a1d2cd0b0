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
