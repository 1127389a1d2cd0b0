"""On 2 real GPUs under the debug mode: copies made by a module's hooks (a forward pre-hook moving the
inputs to the module's device, as accelerate's AlignDevicesHook does) are the placement's, not the user's
ping-pong (no MP006), the same moves written in forward are reported, and a collapse's consequences are
counted on its MP007. The same programs run on virtual GPUs in tests/dryrun/test_hook_moves.py and
tests/dryrun/test_collapse_consequences.py.

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

DEVS = ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0", "cuda:1"]


def _align(module, args):
    return tuple(a.to(next(module.parameters()).device) for a in args)


def _round_robin(hooks: bool):
    layers = nn.ModuleList([nn.Linear(256, 256).to(d) for d in DEVS])
    if hooks:
        for layer in layers:
            layer.register_forward_pre_hook(_align)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = layers

        def forward(self, x):
            for layer, dev in zip(self.layers, DEVS):
                x = layer(x if hooks else x.to(dev))  # layer
            return x

    model = Net()
    with mpcheck.debug(report=None) as dbg:
        for _ in range(2):
            model(torch.randn(64, 256, device="cuda:0")).sum().backward()
    return dbg


def test_inputs_moved_by_pre_hooks_are_not_the_users_ping_pong():
    assert _round_robin(hooks=True).findings == []
    assert [(f.code, f.line) for f in _round_robin(hooks=False).findings] == [
        ("MP006", line_of(_round_robin, "# layer"))
    ]


def _collapsed():
    class TwoStages(nn.Module):  # the PyTorch tutorial's shape: a hop to the second stage in forward
        def __init__(self):
            super().__init__()
            self.net1, self.net2 = nn.Linear(10, 10).to("cuda:0"), nn.Linear(10, 5).to("cuda:1")

        def forward(self, x):
            return self.net2(torch.relu(self.net1(x.to("cuda:0"))).to("cuda:1"))

    model = TwoStages()
    with mpcheck.debug(report=None, on_mismatch="move") as dbg:
        model.to("cuda:0")  # collapse
        model(torch.randn(4, 10))  # net2's input moved back to cuda:0 by mpcheck: the run goes on
    return dbg


def test_the_mismatch_after_a_collapse_is_counted_on_the_collapse():
    dbg = _collapsed()
    assert [(f.code, f.line) for f in dbg.findings] == [("MP007", line_of(_collapsed, "# collapse"))]
