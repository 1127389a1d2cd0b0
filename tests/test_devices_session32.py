"""Session 32: a helper that builds a new module on every call, called in one class's `__init__` (which splits its
copy) and again elsewhere (whose copy is moved whole), gives each caller its own modules; parts of a model moved
after its `__init__` placed it (`model.get_submodule(name).to(dev)`, a part moved through another name) are moved
where the model holds them, and the class is then checked where its instances are called."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str, code: str) -> list:
    """The findings of `code`, with the GPU counts the linter assumes by default."""
    return [f for f in analyze("t.py", textwrap.dedent(src), ALL, "m", {}, (2, 4, 8)).findings if f.code == code]


BUILT_TWICE = """
import torch
import torch.nn as nn


def build():
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))


class SplitRunner(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = build()
        for i, layer in enumerate(self.net):
            layer.to("cuda:0" if i < 2 else "cuda:1")


def main():
    model = build().to("cuda:0")
    for _ in range(3):
        model(torch.randn(4, 8, device="cuda:0"))
    runner = SplitRunner()
    LAST


if __name__ == "__main__":
    main()
"""


def test_a_helper_copy_split_in_an_init_is_not_the_copy_moved_whole_elsewhere():
    assert findings(BUILT_TWICE.replace("LAST", "pass"), "MP007") == []


def test_moving_the_split_copy_itself_is_still_reported():
    found = findings(BUILT_TWICE.replace("LAST", "runner.net.to('cuda:0')"), "MP007")
    assert [f.line for f in found] == [23]


# A model placed whole in its __init__, then part of it moved by a helper that reads a device map: the
# instance as __init__ built it is not the one that runs.
REPLACED = """
import torch
import torch.nn as nn

MAP = {"b.1": "cuda:1", "c": "cuda:1"}


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.c = nn.Linear(4, 4)
        self.to("cuda:0")

    def forward(self, x):
        x = self.b[0](self.a(x))
        x = self.b[1](x.to("cuda:1"))
        return self.c(x)


def dispatch(model, device_map):
    for name, dev in device_map.items():
        MOVE
    return model


model = dispatch(M(), MAP)
model(torch.randn(2, 4, device="cuda:0"))
"""


def test_parts_moved_by_a_device_map_after_the_init_placed_them_are_where_the_map_says():
    assert findings(REPLACED.replace("MOVE", "model.get_submodule(name).to(dev)"), "MP001") == []


def test_a_part_the_device_map_leaves_out_is_still_where_the_init_placed_it():
    src = REPLACED.replace("MOVE", "model.get_submodule(name).to(dev)").replace(', "c": "cuda:1"', "")
    assert [f.line for f in findings(src, "MP001")] == [19]


def test_a_part_moved_through_another_name_is_moved_where_the_model_holds_it():
    src = REPLACED.replace("MOVE", "pass").replace(
        "model = dispatch(M(), MAP)", "model = M()\nhead = model.c\nhead.to('cuda:1')\nmodel.b[1].to('cuda:1')"
    )
    assert findings(src, "MP001") == []
    assert [f.line for f in findings(src.replace("head.to('cuda:1')\n", ""), "MP001")] == [19]


def test_a_device_list_appended_with_a_name_the_loop_body_advances_is_not_one_device():
    # A greedy placement by parameter count: `dev` moves on when a device's budget fills (probe_dr18's c39).
    src = """
    import torch

    def placement(sizes, n_devices):
        budget = sum(sizes) / n_devices
        place, dev, acc = [], 0, 0
        for s in sizes:
            STEP
            place.append(torch.device(f"cuda:{dev}"))
            acc += s
        return place
    """
    step = "if acc + s / 2 > budget * (dev + 1) and dev < n_devices - 1:\n                dev += 1"
    assert findings(src.replace("STEP", step), "MP017") == []
    assert findings(src.replace("STEP", "dev, acc = dev + (acc > budget), acc"), "MP017") == []
    assert [f.line for f in findings(src.replace("STEP", "pass"), "MP017")] == [9]
