"""The module-entry check reports only inputs that reach a computation unmoved (issue 9, run time).

A torch.nn leaf runs PyTorch's own forward on its inputs: inputs off its device are a mismatch.
Any other module may move its inputs (its own forward, a pre-hook) or never use one: only the
tensor that reaches a torch call unmoved is reported, at the module call's line."""

import pytest
from dryrun_helpers import codes_at

RAISE = ("--gpus", "2", "--on-mismatch", "raise")


def test_container_that_moves_its_input_to_each_block_runs_clean(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
    def forward(self, x):
        h = x
        for blk in self.blocks:
            h = blk(h.to(blk.weight.device))
        return h

model = Blocks().to("cuda:0")
model(torch.randn(2, 8)).sum().backward()  # a CPU batch: the container moves it
""")
    status, report, err = dryrun_cli(s, *RAISE)
    assert status == 0, err
    assert report["findings"] == []


def test_module_that_moves_its_input_to_its_own_embedding_runs_clean(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8, device="cuda:1")
        self.proj = nn.Linear(8, 8, device="cuda:1")
    def forward(self, ids, scale):
        dev = self.embed.weight.device
        return self.proj(self.embed(ids.to(dev)) * scale.to(dev))

enc = Encoder()
ids = torch.randint(0, 10, (2, 4), device="cuda:0")
enc(ids, torch.ones(2, 4, 1, device="cuda:0")).sum().backward()
""")
    status, report, err = dryrun_cli(s, *RAISE)
    assert status == 0, err
    assert report["findings"] == []


def test_global_pre_hook_that_aligns_inputs_runs_clean(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn
from torch.nn.modules.module import register_module_forward_pre_hook

def align(module, args):
    w = next(module.parameters(recurse=False), None)
    if w is None:
        return None
    return tuple(a.to(w.device) if isinstance(a, torch.Tensor) else a for a in args)

handle = register_module_forward_pre_hook(align)
layers = [nn.Linear(8, 8, device=d) for d in ("cuda:0", "cuda:1", "cuda:0")]
h = torch.randn(2, 8)
for layer in layers:
    h = layer(h)
h.sum().backward()
handle.remove()
""")
    status, report, err = dryrun_cli(s, *RAISE)
    assert status == 0, err
    assert report["findings"] == []


def test_pre_hook_on_a_user_module_that_aligns_inputs_runs_clean(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

class Block(nn.Module):
    def __init__(self, dev):
        super().__init__()
        self.lin = nn.Linear(8, 8, device=dev)
    def forward(self, x, gate):
        return self.lin(x) * gate

def to_device_of(block):
    def hook(mod, args, kwargs):
        dev = mod.lin.weight.device
        return tuple(a.to(dev) for a in args), {k: v.to(dev) for k, v in kwargs.items()}
    block.register_forward_pre_hook(hook, with_kwargs=True)
    return block

blocks = [to_device_of(Block(d)) for d in ("cuda:0", "cuda:1")]
h, gate = torch.randn(2, 8), torch.ones(2, 8)
for b in blocks:
    h = b(h, gate=gate)
h.sum().backward()
""")
    status, report, err = dryrun_cli(s, *RAISE)
    assert status == 0, err
    assert report["findings"] == []


def test_an_argument_the_module_never_uses_is_not_reported(script, dryrun_cli):
    # T5's blocks all receive the attention mask made on cuda:0; a block on cuda:1 given a
    # position bias never touches it.
    s = script("""
import torch
import torch.nn as nn

class Block(nn.Module):
    def __init__(self, dev):
        super().__init__()
        self.lin = nn.Linear(8, 8, device=dev)
    def forward(self, h, mask, position_bias=None, *, extra=None):
        if position_bias is None:
            position_bias = mask
        if extra is not None:
            h = h + extra
        return self.lin(h) + position_bias

mask = torch.zeros(2, 8, device="cuda:0")
unused = torch.ones(2, 8, device="cuda:0")
b0, b1 = Block("cuda:0"), Block("cuda:1")
h = b0(torch.randn(2, 8, device="cuda:0"), mask, extra=unused)
bias = torch.zeros(2, 8, device="cuda:1")
h1 = h.to("cuda:1")
out = b1(h1, mask, bias)
out2 = b1(h1, mask, position_bias=bias, extra=None)
(out + out2).sum().backward()
""")
    status, report, err = dryrun_cli(s, *RAISE)
    assert status == 0, err
    assert report["findings"] == []


MASKED_BLOCK = """
import torch
import torch.nn as nn

class Block(nn.Module):
    def __init__(self, dev):
        super().__init__()
        self.lin = nn.Linear(8, 8, device=dev)
    def forward(self, h, mask):
        return {use}

b1 = Block("cuda:1")
mask = torch.zeros(2, 8, device="cuda:0")
out = b1(torch.randn(2, 8, device="cuda:1"), mask)  # <- bug
"""


# The mask reaches a torch call unmoved as the odd tensor, or as the call's first tensor.
@pytest.mark.parametrize("use", ["self.lin(h) + mask", "mask + self.lin(h)"])
def test_an_input_used_unmoved_is_reported_at_the_module_call(script, dryrun_cli, use):
    s = script(MASKED_BLOCK.format(use=use))
    status, report, _ = dryrun_cli(s, *RAISE)
    assert status == 1
    assert codes_at(report) == [("MP001", s.line("bug"))]
    (f,) = report["findings"]
    assert "input of Block 'b1': argument 1 (a float32 tensor of shape (2, 8)) is on cuda:0" in f["message"]
    assert f["devices"] == ["cuda:1", "cuda:0"] and ".to('cuda:1')" in f["suggestion"]
