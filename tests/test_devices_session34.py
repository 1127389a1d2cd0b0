"""Session 34: MP018 for a tensor's own move dropped in a loop over a module's parameters or buffers
(`for p in m.parameters(): p.data.to(d)`): a tensor's `.to()` returns a copy and leaves it where it was."""

from __future__ import annotations

import textwrap

import pytest

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str, code: str) -> list:
    return [f for f in analyze("t.py", textwrap.dedent(src), ALL, "m", {}, (2, 4, 8)).findings if f.code == code]


PLACE = """
import itertools

import torch
import torch.nn as nn


def place(module, device):
    LOOP
        BODY


net = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
place(net, torch.device("cuda:1"))
"""


@pytest.mark.parametrize(
    "loop,body",
    [
        ("for p in module.parameters():", "p.data.to(device)"),
        ("for p in module.parameters():", "p.cuda(device)"),
        ("for _, p in module.named_parameters():", "p.to(device, non_blocking=True)"),
        ("for t in itertools.chain(module.parameters(), module.buffers()):", "t.data.to(device)"),
        ("for b in module.buffers():", "if b is not None:\n            b.data.to(device)"),
        ("for p in module.parameters():", "with torch.no_grad():\n            p.data.to(device)"),
    ],
)
def test_a_tensor_move_dropped_in_a_loop_over_a_modules_tensors_is_mp018(loop, body):
    src = PLACE.replace("LOOP", loop).replace("BODY", body)
    (f,) = findings(src, "MP018")
    line = next(i for i, t in enumerate(textwrap.dedent(src).splitlines(), 1) if ".to(" in t or ".cuda(" in t)
    assert (f.line, f.severity) == (line, "error")
    assert "not in place" in f.message and f.suggestion.startswith("`") and ".data = " in f.suggestion


@pytest.mark.parametrize(
    "loop,body",
    [
        ("for p in module.parameters():", "p.data = p.data.to(device)"),  # assigned back
        ("for p in module.parameters():", "moved.append(p.to(device))"),  # kept
        ("for x in module:", "x.to(device)"),  # the children: a module's .to() is in place
        ("for p in module.parameters():", "p = p.grad\n        p.to(device)"),  # the name holds a gradient now
        ("for p in tensors(module):", "p.to(device)"),  # not known to walk a module's tensors
    ],
)
def test_a_kept_move_a_module_move_or_an_unknown_walk_is_not_mp018(loop, body):
    src = PLACE.replace("LOOP", "moved = []\n    " + loop).replace("BODY", body)
    assert findings(src, "MP018") == []


CACHE = """
import torch


class PerDevice:
    def __init__(self, table):
        self.table = table
        self.copies = {}

    def on(self, device):
        BODY
"""


@pytest.mark.parametrize(
    "body",
    [
        "key = device.type\n        if key not in self.copies:\n            self.copies[key] = self.table.to(device)\n"
        "        return self.copies[key]",
        "if device.type not in self.copies:\n            self.copies[device.type] = self.table.to(device).coalesce()\n"
        "        return self.copies[device.type]",
        "return self.copies.setdefault(device.type, self.table.to(device=device))",
        "k = device.type\n        self.copies[k] = self.table.cuda(device)\n        return self.copies[k]",
    ],
)
def test_copies_moved_to_a_device_but_cached_under_its_type_are_mp017_at_the_key(body):
    src = CACHE.replace("BODY", body)
    (f,) = findings(src, "MP017")
    lines = textwrap.dedent(src).splitlines()
    line = next(i for i, t in enumerate(lines, 1) if "device.type" in t and not t.strip().startswith("if "))
    assert f.line == line and "'cuda' for every GPU" in f.message and "str(device)" in f.suggestion


@pytest.mark.parametrize(
    "body",
    [
        "self.copies[str(device)] = self.table.to(device)\n        return self.copies[str(device)]",
        "self.copies[device] = self.table.to(device)\n        return self.copies[device]",
        "self.copies[device.type] = self.table.to(device.type)  # one per kind, on the current GPU\n"
        "        return self.copies[device.type]",
        "key = device.type\n        key = (key, device.index)\n        self.copies[key] = self.table.to(device)\n"
        "        return self.copies[key]",
        "self.copies[device.type] = self.table.to(other)\n        return self.copies[device.type]",
    ],
)
def test_a_cache_keyed_by_the_device_or_holding_what_its_key_names_is_not_mp017(body):
    src = CACHE.replace("BODY", body).replace("def on(self, device)", "def on(self, device, other=None)")
    assert findings(src, "MP017") == []


ZIPPED = """
import torch
import torch.nn as nn


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(32, 32) for _ in range(6)])


def place(model):
    devices = ["cuda:0", "cuda:1"]
    LOOP
    AFTER
    return model


place(Deep())
"""


def test_a_placing_loop_over_a_zip_with_fewer_devices_than_modules_is_mp017_at_the_zip():
    src = ZIPPED.replace("LOOP", "for blk, dev in zip(model.blocks, devices):\n        blk.to(dev)").replace(
        "AFTER", "pass"
    )
    (f,) = findings(src, "MP017")
    assert f.line == next(i for i, t in enumerate(textwrap.dedent(src).splitlines(), 1) if "zip(" in t)
    assert "pairs 6 modules with 2 devices" in f.message and "other 4 stay" in f.message


@pytest.mark.parametrize(
    "loop,after",
    [
        ("for blk, dev in zip(model.blocks, devices * 3):\n        blk.to(dev)", "pass"),  # one each
        (
            "for blk, dev in zip(model.blocks, devices):\n        blk.to(dev)",
            "for blk in model.blocks[2:]:\n        blk.to(devices[-1])",
        ),  # the rest placed next
        ("for blk, dev in zip(model.blocks, devices):\n        print(blk, dev)", "pass"),  # places nothing
    ],
)
def test_a_zip_as_long_as_its_modules_the_rest_placed_after_or_a_loop_that_places_nothing_is_not_mp017(loop, after):
    assert findings(ZIPPED.replace("LOOP", loop).replace("AFTER", after), "MP017") == []


BULK = """
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence


def to_device(batch, device):
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 8, batch_first=True).to("cuda:0")

    def forward(self, feats, lengths):
        return self.rnn(pack_padded_sequence(feats, LENGTHS, batch_first=True, enforce_sorted=False))


batch = to_device({"feats": torch.randn(4, 10, 8), "lengths": torch.tensor([10, 9, 8, 7])}, "cuda:0")
Enc()(batch["feats"], batch["lengths"])
"""


def test_a_batch_moved_whole_whose_lengths_go_back_to_the_host_for_packing_is_no_round_trip():
    assert findings(BULK.replace("LENGTHS", "lengths.cpu()"), "MP005") == []
    (f,) = findings(BULK.replace("LENGTHS", "lengths"), "MP001")  # on the GPU, PyTorch refuses them
    assert "pack_padded_sequence" in f.message


WRAPPED = """
import torch
import torch.nn as nn


class Head(nn.Module):
    def __init__(self, device, other):
        super().__init__()
        self.w = EXPR

    def forward(self, x):
        return x @ self.w.to(x.device)


Head("cuda:1", OTHER)
"""


@pytest.mark.parametrize(
    "expr",
    [
        "nn.Parameter(torch.randn(4, 4)).to(device)",
        "torch.nn.Parameter(torch.zeros(4)).cuda(0)",
        "nn.Parameter(torch.randn(4, 4, device='cuda:0')).to('cuda:1')",
    ],
)
def test_a_parameter_made_then_moved_to_another_known_device_is_mp022(expr):
    (f,) = findings(WRAPPED.replace("EXPR", expr).replace("OTHER", "None"), "MP022")
    assert f.severity == "error" and "can't optimize a non-leaf Tensor" in f.message
    assert f.suggestion.startswith("`nn.Parameter(") and ".to(" in f.suggestion or ".cuda(" in f.suggestion


@pytest.mark.parametrize(
    "expr,other",
    [
        ("nn.Parameter(torch.randn(4, 4).to(device))", "None"),  # the data moved, then wrapped
        ("nn.Parameter(torch.randn(4, 4)).to(other)", "get_device()"),  # where to: not known
        ("nn.Parameter(torch.randn(4, 4)).to('cpu')", "None"),  # already there: the parameter itself
        ("nn.Parameter(torch.randn(4, 4, device=device)).to(device)", "None"),
    ],
)
def test_a_parameter_wrapped_after_its_move_unknown_or_unmoved_is_not_mp022(expr, other):
    src = WRAPPED.replace("EXPR", expr).replace("OTHER", other)
    assert findings(src, "MP022") == []


GLOBAL_HOOK = """
import torch
import torch.nn as nn
from torch.nn.modules.module import register_module_forward_pre_hook


def to_params(module, args):
    p = next(module.parameters(recurse=False), None)
    return args if p is None else tuple(a.to(p.device) for a in args)


encoder = nn.Linear(8, 8).to("cuda:0")
HOOK
encoder(torch.randn(2, 8))
"""


def test_module_inputs_are_not_judged_where_a_global_forward_pre_hook_may_move_them():
    assert findings(GLOBAL_HOOK.replace("HOOK", "handle = register_module_forward_pre_hook(to_params)"), "MP001") == []
    assert len(findings(GLOBAL_HOOK.replace("HOOK", "pass"), "MP001")) == 1  # without the hook: the CPU input


def test_a_deep_copy_of_a_split_model_moved_to_meta_is_no_collapse():
    src = """
    import copy
    import torch.nn as nn

    model = nn.Sequential(nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 8).to("cuda:1"))
    skeleton = copy.deepcopy(model).to("meta")
    whole = model.to("cuda:0")  # <- the collapse
    """
    assert [f.line for f in findings(src, "MP007")] == [7]
