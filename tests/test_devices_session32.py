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


# A hand-written Adam with a 0-d step counter (probe18's t01): on the CPU it mixes with every GPU's moments; on
# the first parameter's GPU its bias corrections cannot divide the moments of parameters on the other one.
TENSOR_ADAM = """
import torch
import torch.nn as nn


class TensorAdam(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999)):
        super().__init__(params, dict(lr=lr, betas=betas))
        first = self.param_groups[0]["params"][0]
        self.step_t = torch.zeros((), COUNTER)

    @torch.no_grad()
    def step(self):
        self.step_t += 1
        for group in self.param_groups:
            b1, b2 = group["betas"]
            bc1 = 1 - b1 ** self.step_t
            for p in group["params"]:
                st = self.state[p]
                if not st:
                    st["m"] = torch.zeros_like(p)
                st["m"].lerp_(p.grad, 1 - b1)
                p.sub_(st["m"] / bc1, alpha=group["lr"])


model = nn.Sequential(nn.Linear(4, 4).to("cuda:0"), nn.Linear(4, 4).to("cuda:1"))
opt = TensorAdam(model.parameters())
model[1](model[0](torch.randn(2, 4, device="cuda:0")).to("cuda:1")).sum().backward()
opt.step()
"""


def test_a_zero_dim_step_counter_on_the_cpu_mixes_with_moments_on_every_gpu():
    assert findings(TENSOR_ADAM.replace("COUNTER", "dtype=first.dtype"), "MP001") == []
    assert findings("import torch\nc = torch.full((), 2.0)\nx = torch.ones(3, device='cuda:1') * c\n", "MP001") == []


def test_a_zero_dim_step_counter_on_the_first_gpu_is_still_reported():
    assert [f.line for f in findings(TENSOR_ADAM.replace("COUNTER", "device=first.device"), "MP001")] == [23]
    assert [
        f.line for f in findings("import torch\nc = torch.zeros(3)\nx = torch.ones(3, device='cuda:1') * c\n", "MP001")
    ] == [3]


# Hooks made in a loop read the loop's device when they run, after the loop (probe18's t11).
LATE_HOOKS = """
import torch
import torch.nn as nn


def place_blocks(blocks, devices):
    for i, blk in enumerate(blocks):
        dev = devices[i * len(devices) // len(blocks)]
        blk.to(dev)
        blk.register_forward_pre_hook(HOOK)
"""


def test_a_hook_made_in_a_loop_that_reads_the_loops_device_late_is_reported():
    got = findings(LATE_HOOKS.replace("HOOK", "lambda mod, args: tuple(a.to(dev) for a in args)"), "MP017")
    assert [f.line for f in got] == [10]
    assert "reads `dev` when it runs, after the loop" in got[0].message and "dev=dev" in got[0].message
    named = LATE_HOOKS.replace("HOOK", "move").replace(
        "        blk.to(dev)\n",
        "        blk.to(dev)\n\n        def move(mod, args):\n            return args[0].to(device=dev),\n\n",
    )
    assert [f.line for f in findings(named, "MP017")] == [11]


def test_a_hook_that_binds_the_device_or_is_removed_in_its_pass_is_not():
    bound = "lambda mod, args, dev=dev: tuple(a.to(dev) for a in args)"
    assert findings(LATE_HOOKS.replace("HOOK", bound), "MP017") == []
    own = "lambda mod, args: tuple(a.to(mod.weight.device) for a in args)"
    assert findings(LATE_HOOKS.replace("HOOK", own), "MP017") == []
    used_at_once = (
        LATE_HOOKS.replace("HOOK", "lambda mod, args: (args[0].to(dev),)").replace(
            "        blk.register_forward_pre_hook(", "        h = blk.register_forward_pre_hook("
        )
        + "        blk(torch.randn(2, 4))\n        h.remove()\n"
    )
    assert findings(used_at_once, "MP017") == []


INDEXED_THERE = """
import torch

x = torch.randn(64, 8, device="cuda:0")
choice = x.argmax(-1)
for e in range(2):
    idx = (choice == e).nonzero(as_tuple=True)[0]
    xe = PICK
    ye = xe.sum()
"""


def test_a_tensor_moved_whole_with_its_index_moved_beside_it_is_oversized():
    # (probe18's t23: x.to(dev)[idx.to(dev)], where x[idx].to(dev) moves the routed rows only)
    (found,) = findings(INDEXED_THERE.replace("PICK", 'x.to("cuda:1")[idx.to("cuda:1")]'), "MP016")
    assert found.line == 8 and 'move that part: `x[idx].to("cuda:1")`' in found.message
    assert findings(INDEXED_THERE.replace("PICK", 'x[idx].to("cuda:1")'), "MP016") == []
    made_there = 'x.to("cuda:1")[torch.arange(4, device="cuda:1")]'
    assert findings(INDEXED_THERE.replace("PICK", made_there), "MP016") == []
