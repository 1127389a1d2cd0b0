"""Transfers made by a module's hooks (accelerate's dispatch_model / AlignDevicesHook, a forward pre-hook
moving a module's inputs to its device) are the placement's, not the user's waste: no MP006 through them,
while the same moves written in `forward` are still reported and the user's own code around a hooked
model is still checked."""

import pytest
from dryrun_helpers import codes_at

# Layers placed round-robin: the data crosses at every layer whoever moves it.
# The user's training loop around the model; the labels' device varies.
TRAIN = """
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    out = model(torch.randn(64, 256, device="cuda:0"))
    labels = torch.randint(0, 256, (64,), device={labels})
    F.cross_entropy(out, labels).backward()  # <- loss
    opt.step()
"""

MODEL = (
    """
import torch
import torch.nn as nn
import torch.nn.functional as F

DEVS = ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0", "cuda:1"]

class Net(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(d, d).to(dev) for dev in DEVS])

    def forward(self, x):
        for layer, dev in zip(self.layers, DEVS):
            x = layer({move})  # <- layer
        return x

def device_of(module):
    return next(module.parameters()).device

def align_inputs(module, args):
    return tuple(a.to(device_of(module)) for a in args)  # <- hook

def wrap_forward(module):
    old = module.forward
    def new_forward(*args):
        return old(*align_inputs(module, args))
    module.forward = new_forward

model = Net()
{install}
"""
    + TRAIN
)

PRE_HOOKS = "for layer in model.layers: layer.register_forward_pre_hook(align_inputs)"
WRAPPERS = "for layer in model.layers: wrap_forward(layer)"


def run(script, dryrun_cli, **fields):
    s = script(MODEL.format(**{"move": "x", "install": "", "labels": '"cuda:1"', **fields}))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    return s, status, report


@pytest.mark.parametrize("install", [PRE_HOOKS, WRAPPERS])
def test_inputs_moved_by_module_hooks_are_not_the_users_ping_pong(script, dryrun_cli, install):
    s, status, report = run(script, dryrun_cli, install=install)
    assert status == 0
    assert report["findings"] == []
    pairs = {(p["src"], p["dst"]) for p in report["transfers"]["by_pair"] if p["phase"] == "forward"}
    assert {("cuda:0", "cuda:1"), ("cuda:1", "cuda:0")} <= pairs  # the hooks' copies are still counted


def test_the_same_moves_written_in_forward_are_reported(script, dryrun_cli):
    s, status, report = run(script, dryrun_cli, move="x.to(dev)")
    assert codes_at(report) == [("MP006", s.line("layer"))]


@pytest.mark.parametrize("install", [PRE_HOOKS, WRAPPERS])
def test_the_users_code_around_a_hooked_model_is_still_checked(script, dryrun_cli, install):
    s, status, report = run(script, dryrun_cli, install=install, labels='"cuda:0"')
    assert [c for c, _ in codes_at(report)] and {line for _, line in codes_at(report)} == {s.line("loss")}


ACCELERATE = (
    """
import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import dispatch_model

model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(6)])
device_map = {{str(i): i % 2 for i in range(6)}}
model = dispatch_model(model, device_map=device_map)
"""
    + TRAIN
)


@pytest.mark.parametrize("labels", ['"cuda:1"', '"cuda:0"'])
def test_accelerate_dispatch_model_moves_are_silent_and_the_users_loss_checked(script, dryrun_cli, labels):
    pytest.importorskip(
        "accelerate", reason="accelerate is not installed (optional: the pure-torch cases cover the rule)"
    )
    s = script(ACCELERATE.format(labels=labels))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report is not None, err
    lines = {line for _, line in codes_at(report)}
    # dispatch_model returns the output on the input's device (cuda:0): the labels belong there
    assert lines == (set() if labels == '"cuda:0"' else {s.line("loss")})


OFFLOADED = """
import functools
import torch
import torch.nn as nn

def offload(module, device):
    # accelerate's cpu offload, as add_hook_to_module and AlignDevicesHook do it: the weights stay on the CPU,
    # a wrapper put in place of `module.forward` brings them to the GPU before each call
    store = {{n: p.detach().cpu() for n, p in module.named_parameters()}}
    old = module.forward
    def new_forward(module, *args):
        for n, v in store.items():
            module._parameters[n] = nn.Parameter(v.to(device), requires_grad=False)  # <- load
        return old(*args)
    module.forward = functools.partial(new_forward, module)

class Loader(nn.Module):  # the same load written as model code
    def __init__(self, inner, device):
        super().__init__()
        self.inner, self.device = inner, device
        self.store = {{n: p.detach().cpu() for n, p in inner.named_parameters()}}
    def forward(self, x):
        for n, v in self.store.items():
            self.inner._parameters[n] = nn.Parameter(v.to(self.device), requires_grad=False)  # <- own
        return self.inner(x)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(256, 256), nn.Linear(256, 256), nn.Linear(256, 256)
    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))

model = Net()
model.a.to("cuda:0"); model.c.to("cuda:0")
{place_b}
head = nn.Linear(256, 1).to("cuda:0")
opt = torch.optim.SGD(head.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(4, 256, device="cuda:0")
    with torch.no_grad():
        for t in range(4):  # a generate loop: the model runs again and again
            x = model(x)
    head(x).sum().backward()
    opt.step()
"""


def test_offloaded_weights_brought_in_by_a_forward_wrapper_are_not_a_repeated_transfer(script, dryrun_cli):
    """From the second call on a module call runs by mpcheck's fast path, which calls `forward` itself: the
    wrapper's loads are still the placement's (accelerate's offload gave MP011 on every generate() before)."""
    s = script(OFFLOADED.format(place_b='offload(model.b, "cuda:0")'))
    status, report, err = dryrun_cli(s, "--gpus", "1")
    assert report["findings"] == [] and not report["stopped"], err


def test_the_same_loads_written_in_forward_are_a_repeated_transfer(script, dryrun_cli):
    s = script(OFFLOADED.format(place_b='model.b = Loader(model.b, "cuda:0")'))
    status, report, err = dryrun_cli(s, "--gpus", "1")
    assert ("MP011", s.line("own")) in codes_at(report), err
