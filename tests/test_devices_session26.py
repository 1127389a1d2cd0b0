"""Session 26: a module moved one tensor at a time through `.data` (devices/data_moves.py)."""

from __future__ import annotations

import textwrap

import libcst as cst

from mpcheck import codes
from mpcheck.analysis import analyze
from mpcheck.devices import data_moves

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))

HELPER_IN_INIT = """
import torch
import torch.nn as nn


def move_params_(module, device):
    for t in module.parameters():
        t.data = t.data.to(device)
    return module


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        move_params_(self.a, "cuda:0")
        move_params_(self.b, "cuda:1")

    def forward(self, x):
        x = self.a(x.to("cuda:0"))
        return self.b(BETWEEN)


net = Net()
y = net(torch.randn(2, 4))
"""


# A model split over cuda:0 and cuda:1 by hand; the tests append what they do with it (from line 17 on).
SPLIT = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4).to("cuda:0")
        self.b = nn.Linear(4, 4).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


"""


def findings(src: str):
    r = analyze("t.py", textwrap.dedent(src), ALL, "m", {})
    return sorted((f.line, f.code, f.message) for f in r.findings)


def lines(src: str):
    return [(line, code) for line, code, _ in findings(src)]


def test_stages_placed_through_data_are_placed():
    # Read as a loop over tensors, the stages were "never placed" (on the CPU) and the first call was reported.
    assert findings(HELPER_IN_INIT.replace("BETWEEN", 'x.to("cuda:1")')) == []


def test_stages_placed_through_data_still_need_their_transfers():
    got = findings(HELPER_IN_INIT.replace("BETWEEN", "x"))
    assert [(line, code) for line, code, _ in got] == [(22, "MP001")]
    assert "`self.b` is on cuda:1" in got[0][2]


MAIN = """
import torch
import torch.nn as nn


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(self.c(x))


small = Small()
LOOP
z = small(torch.randn(2, 3, 8, 8).cuda(1))
"""


def test_parameters_only_of_a_module_with_batch_norm_leave_its_buffers_behind():
    got = findings(MAIN.replace("LOOP", "for name, p in small.named_parameters():\n    p.data = p.data.cuda(1)"))
    assert [(line, code) for line, code, _ in got] == [(18, "MP001")]
    message = got[0][2]
    assert "moves the parameters of `small` to cuda:1" in message
    assert "its BatchNorm2d" in message and "stay on cpu" in message
    assert "itertools.chain(m.parameters(), m.buffers())" in message


def test_parameters_and_buffers_move_the_module_whole():
    loop = (
        "import itertools\nfor t in itertools.chain(small.parameters(), small.buffers()):\n    t.data = t.data.cuda(1)"
    )
    assert findings(MAIN.replace("LOOP", loop)) == []
    elsewhere = loop.replace("cuda(1)", "cuda(0)")
    got = findings(MAIN.replace("LOOP", elsewhere))
    assert [code for _, code, _ in got] == ["MP001"] and "`small` is on cuda:0" in got[0][2]


def test_a_module_that_may_register_buffers_is_left_unknown():
    # Its own register_buffer: where its buffers are after a walk of its parameters is not known, so neither
    # is the module: no finding either way.
    src = MAIN.replace("self.bn = nn.BatchNorm2d(8)", 'self.register_buffer("scale", torch.ones(1))')
    src = src.replace("return self.bn(self.c(x))", "return self.c(x) * self.scale")
    assert findings(src.replace("LOOP", "for p in small.parameters():\n    p.data = p.data.cuda(0)")) == []


def test_a_library_module_without_buffers_is_moved_by_its_parameters():
    src = """
    import torch
    import torch.nn as nn

    lin = nn.Linear(4, 4)
    with torch.no_grad():
        for p in lin.parameters():
            p.data = p.to("cuda:1")
    out = lin(torch.randn(2, 4))
    """
    got = findings(src)
    assert [(line, code) for line, code, _ in got] == [(9, "MP001")]
    assert "`lin` is on cuda:1" in got[0][2]


def test_a_split_model_collapsed_through_data_names_the_model():
    src = SPLIT + 'net = Net()\nfor p in net.parameters():\n    p.data = p.data.to("cuda:0")\n'
    got = findings(src)
    assert [(line, code) for line, code, _ in got] == [(18, "MP007")]
    assert "moves every stage of `net`" in got[0][2]


def _loop(code: str) -> cst.For:
    stmt = cst.parse_statement(textwrap.dedent(code))
    assert isinstance(stmt, cst.For)
    return stmt


def test_what_counts_as_a_data_move_loop():
    found = data_moves.data_move_loop(_loop("for p in m.parameters():\n    p.data = p.data.to(d)\n"))
    assert found is not None and found.kinds == {"parameters"} and cst.Module([]).code_for_node(found.owner) == "m"
    both = data_moves.data_move_loop(_loop("for p in chain(m.parameters(), m.buffers()):\n    p.data = p.cuda()\n"))
    assert both is not None and both.kinds == {"parameters", "buffers"}
    for other in (
        "for p in m.parameters():\n    p.data = p.data.to(p.device)\n",  # where to depends on the tensor
        "for p in m.parameters():\n    q.data = p.data.to(d)\n",  # another tensor
        "for p in m.parameters():\n    if p.requires_grad:\n        p.data = p.data.to(d)\n",  # not each one
        "for p in chain(m.parameters(), n.buffers()):\n    p.data = p.data.to(d)\n",  # two modules
        "for p in m.parameters(recurse=False):\n    p.data = p.data.to(d)\n",  # not all of them
        "for p in m.parameters():\n    p.data = p.data.float()\n",  # no move
    ):
        assert data_moves.data_move_loop(_loop(other)) is None, other


# ----------------------------------------------------------------- forward pre-hooks (devices/pre_hooks.py)

HOOKED = """
import torch
import torch.nn as nn

DEV = torch.device("cuda:1")

HOOK

head = nn.Linear(4, 4).to("cuda:1")
head.register_forward_pre_hook(hook)
out = head(torch.randn(2, 4))
"""


def test_a_pre_hook_that_moves_its_input_hands_it_on_moved():
    assert findings(HOOKED.replace("HOOK", "def hook(mod, args):\n    return args[0].to(DEV)")) == []
    assert findings(HOOKED.replace("HOOK", "def hook(mod, args):\n    return tuple(a.to(DEV) for a in args)")) == []


def test_a_pre_hook_that_returns_none_hands_the_input_on_as_it_came():
    got = findings(HOOKED.replace("HOOK", "def hook(mod, args):\n    print(len(args))"))
    assert [(line, code) for line, code, _ in got] == [(12, "MP001")]
    assert "`head` is on cuda:1" in got[0][2]


def test_a_pre_hook_not_known_leaves_the_input_anywhere():
    # None on one path, a moved input on the other: what forward gets is not known.
    maybe = "def hook(mod, args):\n    if len(args) > 1:\n        return None\n    return args[0].to(DEV)"
    assert findings(HOOKED.replace("HOOK", maybe)) == []
    # A hook of a library: not run, the input may be anywhere.
    src = HOOKED.replace("HOOK", "from somewhere import hook")
    assert findings(src) == []


# ----------------------------------------------------------------- MP005: a copy that passes through a GPU


def test_a_copy_made_by_another_line_and_read_later_is_no_detour():
    # The draft's proposal goes to the target's output GPU, the target's forward sends it to its first stage,
    # and the proposal is compared there afterwards: the copy to cuda:1 was needed.
    src = """
    import torch
    import torch.nn as nn


    class Target(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Embedding(50, 8).to("cuda:0")
            self.b = nn.Linear(8, 50).to("cuda:1")

        def forward(self, ids):
            return self.b(self.a(ids.to("cuda:0")).to("cuda:1"))


    target = Target()
    draft = nn.Embedding(50, 50).to("cuda:2")
    seq = torch.randint(0, 50, (2, 6)).to("cuda:2")
    proposal = draft(seq).argmax(-1).to("cuda:1")
    preds = target(proposal).argmax(-1)
    agree = (preds == proposal).all()
    """
    assert [code for _, code, _ in findings(src)] == []


# ----------------------------------------------------------------- MP011: a constant of the module moved every step

CONSTANT = """
import torch
import torch.nn as nn

TABLE = torch.randn(1024, 1024)
DEVICES = ["cuda:0", "cuda:1"]


def place(dev):
    return TABLE.to(dev)


LOOP
"""


def test_a_module_constant_moved_by_a_helper_on_every_step_is_reported():
    got = findings(CONSTANT.replace("LOOP", 'for step in range(3):\n    t = place("cuda:1")'))
    assert [(line, code) for line, code, _ in got] == [(10, "MP011")]
    assert (
        "`TABLE` (a constant of the module on cpu, made at line 5) is copied to cuda:1 each time `place` runs"
        in (got[0][2])
    )


def test_a_module_constant_taken_once_to_each_device_is_no_repeat():
    assert (
        findings(CONSTANT.replace("LOOP", "tables = [place(d) for d in DEVICES]\nfor d in DEVICES:\n    place(d)"))
        == []
    )
    assert findings(CONSTANT.replace("LOOP", 't = place("cuda:1")')) == []  # once, outside any loop


# ----------------------------------------------------------------- MP001: a BatchNorm's statistics replaced

STATS = """
import torch
import torch.nn as nn

bn = nn.BatchNorm1d(8).to("cuda:0")
RESET
out = bn(torch.randn(4, 8, device="cuda:0"))
"""


def test_running_statistics_replaced_by_host_tensors_are_reported_once_per_line():
    got = findings(STATS.replace("RESET", "bn.running_mean, bn.running_var = torch.zeros(8), torch.ones(8)"))
    assert [(line, code) for line, code, _ in got] == [(6, "MP001")]
    assert "`bn.running_mean` is set to a tensor on cpu" in got[0][2] and "(a BatchNorm1d) is on cuda:0" in got[0][2]
    assert "`bn.reset_running_stats()`" in got[0][2]


def test_running_statistics_reset_in_place_or_made_there_are_silent():
    for reset in (
        "bn.reset_running_stats()",
        'bn.running_mean = torch.zeros(8, device="cuda:0")',
        "bn.running_var = torch.ones(8).to(bn.weight.device)",
        "bn.running_mean.zero_()",
    ):
        assert findings(STATS.replace("RESET", reset)) == [], reset


# ----------------------------------------------------------------- `if p.grad is not None` keeps every parameter

GRADS = (
    SPLIT
    + """model = Net()
FREEZE
checks = [p.grad.detach().to("cuda:0").isfinite().all() for p in model.parameters() if p.grad is not None]
"""
)


def test_a_filter_on_existing_gradients_keeps_the_parameters_of_every_stage():
    got = findings(GRADS.replace("FREEZE", ""))
    assert [(line, code) for line, code, _ in got] == [(18, "MP016")]
    assert "`p.grad.detach()` is moved whole from cuda:1 to cuda:0 only to be reduced" in got[0][2]


def test_a_file_that_freezes_parameters_decides_no_gradient_filter():
    assert findings(GRADS.replace("FREEZE", "model.a.requires_grad_(False)")) == []


# ----------------------------------------------------------------- argparse: a device list split from a string


def test_a_device_list_given_as_one_string_and_split_by_its_type_is_known():
    src = """
    import argparse
    import torch
    import torch.nn as nn

    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=lambda s: s.split(","), default="cuda:0,cuda:1")
    args = p.parse_args()
    a = nn.Linear(4, 4).to(args.devices[0])
    b = nn.Linear(4, 4).to(args.devices[1])
    y = b(a(torch.randn(2, 4).to(args.devices[0])))
    """
    got = findings(src)
    assert [(line, code) for line, code, _ in got] == [(11, "MP001")]
    assert "`b` is on cuda:1" in got[0][2]
    other = src.replace('lambda s: s.split(",")', "lambda s: [x.strip() for x in s.split(',')]")
    assert [line for line, _, _ in findings(other)] == [11]  # another lambda: its body is run on the default too
    function = src.replace('lambda s: s.split(",")', "parse_devices")
    assert findings(function) == []  # a function's conversion is not known


# ----------------------------------------------------------------- MP017: a list of one device, made by a for loop


def test_a_device_list_appended_in_a_loop_that_ignores_its_index():
    src = """
    import os
    import torch

    rank = int(os.environ.get("LOCAL_RANK", 0))
    devices = []
    for i in range(2):
        devices.append(torch.device("cuda", rank))
    """
    got = findings(src)
    assert [(line, code) for line, code, _ in got] == [(8, "MP017")]
    assert '`torch.device("cuda", rank)`, appended in `for i in range(2)`, makes one device per `i`' in got[0][2]
    assert findings(src.replace('torch.device("cuda", rank)', 'torch.device("cuda", rank * 2 + i)')) == []
    assert findings(src.replace("for i in", "for _ in")) == []
