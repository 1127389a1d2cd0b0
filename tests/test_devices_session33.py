"""Session 33: `torch.cuda.current_device()` as a device (MP004 in an autograd Function run on another GPU),
`isinstance(layer, Cls)` against a class of the file (placement by a block's type), and MP016 for a tensor moved
only to be reduced by a helper (or after steps of its own), but not one that is also used for more."""

from __future__ import annotations

import textwrap

import pytest

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str, code: str) -> list:
    return [f for f in analyze("t.py", textwrap.dedent(src), ALL, "m", {}, (2, 4, 8)).findings if f.code == code]


# A hand-written autograd Function that allocates its workspace on the current device, run by a module on cuda:1.
CURRENT_DEVICE = """
import torch
import torch.nn as nn


class NormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        rstd = torch.empty(x.shape[:-1] + (1,), device=WHERE)
        torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6, out=rstd)
        return x * rstd * weight


class Norm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return NormFn.apply(x, self.weight)


def main():
    a = Norm(8).to("cuda:0")
    b = Norm(8).to("cuda:1")
    h = a(torch.randn(2, 8, device="cuda:0"))
    SETUP
    return b(h.to("cuda:1"))
"""


def test_current_device_is_cuda_0_until_set_device_says_otherwise():
    found = findings(CURRENT_DEVICE.replace("WHERE", "torch.cuda.current_device()").replace("SETUP", "pass"), "MP004")
    assert [f.line for f in found] == [9]
    assert "cuda:1" in found[0].message


def test_current_device_inside_torch_device_is_the_same():
    src = CURRENT_DEVICE.replace("WHERE", 'torch.device("cuda", torch.cuda.current_device())')
    assert [f.line for f in findings(src.replace("SETUP", "pass"), "MP004")] == [9]


def test_current_device_after_set_device_to_that_gpu_is_silent():
    src = CURRENT_DEVICE.replace("WHERE", "torch.cuda.current_device()").replace("SETUP", "torch.cuda.set_device(1)")
    assert findings(src, "MP004") == []
    assert findings(src, "MP001") == []


def test_the_input_device_is_silent():
    src = CURRENT_DEVICE.replace("WHERE", "x.device").replace("SETUP", "pass")
    assert findings(src, "MP004") == [] and findings(src, "MP001") == []


def test_current_device_after_set_device_to_an_unknown_gpu_is_not_known():
    src = """
    import torch

    def run(rank, x):
        torch.cuda.set_device(rank)
        w = torch.zeros(4, device=torch.cuda.current_device())
        return x.to("cuda:1") + w
    """
    assert findings(src, "MP001") == [] and findings(src, "MP004") == []


# Placement by a block's type: attention blocks on the first GPU, feed-forward blocks on the last, interleaved.
BY_TYPE = """
import torch
import torch.nn as nn


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x):
        return self.l(x.to(self.l.weight.device))


class FFN(BASE):
    pass


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(6):
            self.layers.extend([Attn(), FFN()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def place(model, devices):
    for i, layer in enumerate(model.layers):
        layer.to(CHOICE)


def main():
    model = Net()
    place(model, ["cuda:0", "cuda:1"])
    return model(torch.randn(2, 8))
"""


def test_placement_by_a_class_of_the_file_alternating_is_ping_pong():
    src = BY_TYPE.replace("BASE", "Attn").replace("CHOICE", "devices[-1] if isinstance(layer, FFN) else devices[0]")
    found = findings(src, "MP006")
    assert len(found) == 1 and "11 times" in found[0].message


def test_a_tuple_of_classes_and_a_base_class_are_decided_too():
    src = BY_TYPE.replace("BASE", "Attn").replace(
        "CHOICE", "devices[0] if isinstance(layer, (nn.Linear, Attn)) else devices[1]"
    )
    # every FFN derives from Attn: all on cuda:0, no crossing
    assert findings(src, "MP006") == []


def test_placement_by_type_that_keeps_stages_whole_is_silent():
    src = BY_TYPE.replace("BASE", "Attn").replace("CHOICE", "devices[i * len(devices) // len(model.layers)]")
    assert findings(src, "MP006") == []


def test_a_class_with_a_base_not_known_here_is_not_decided():
    # FFN derives from a class of another module: whether it is an Attn is not known, so nothing is said
    src = BY_TYPE.replace("BASE", "other.Block").replace(
        "CHOICE", "devices[-1] if isinstance(layer, Attn) else devices[0]"
    )
    src = src.replace("import torch.nn as nn", "import torch.nn as nn\nimport other")
    assert findings(src, "MP006") == []


# A tensor moved only to be reduced there: an attention-entropy regulariser summed on the first GPU.
REDUCED = """
import torch
import torch.nn as nn


def entropy(w):
    BODY


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.devs = ["cuda:0", "cuda:1"]
        self.layers = nn.ModuleList(nn.Linear(8, 8).to(d) for d in self.devs)

    def forward(self, x):
        aux = torch.zeros((), device=self.devs[0])
        for layer, dev in zip(self.layers, self.devs):
            x = layer(x.to(dev))
            w = x.softmax(-1)
            aux = aux + CALL
        return x, aux
"""


def test_a_helper_that_reduces_the_moved_tensor_alone():
    src = REDUCED.replace("BODY", "return -(w * (w + 1e-9).log()).sum(-1).mean()").replace(
        "CALL", "entropy(w.to(aux.device))"
    )
    found = findings(src, "MP016")
    assert [(f.line, f.devices) for f in found] == [(21, ("cuda:1", "cuda:0"))]
    assert "line 7" in found[0].message and "reduce" in found[0].message.lower()


@pytest.mark.parametrize(
    ("body", "call", "lines"),
    [
        # reduced first, then moved: one value crosses
        ("return -(w * (w + 1e-9).log()).sum(-1).mean()", "entropy(w).to(aux.device)", []),
        # steps written around the move count too
        ("return w", "(w.to(aux.device) * 2).sum()", [21]),
        # it meets another tensor of the destination before the reduction: it must cross
        ("return (w * torch.rand(8).to('cuda:0')).sum()", "entropy(w.to(aux.device))", []),
        # but a constant made right there from sizes could be made on the source as well
        ("return (w * torch.ones(8, device='cuda:0')).sum()", "entropy(w.to(aux.device))", [21]),
        # reduced along a dim in the helper, then fully after it: all of it from the moved tensor alone
        ("return w.sum(-1)", "entropy(w.to(aux.device)).mean(0).sum()", [21]),
        # reduced along dims only: no one value
        ("return w.sum(-1)", "entropy(w.to(aux.device)).mean(0)", []),
    ],
)
def test_what_is_computed_from_the_moved_tensor_alone(body, call, lines):
    src = REDUCED.replace("BODY", body).replace("CALL", call)
    assert [f.line for f in findings(src, "MP016")] == lines


def test_a_helper_that_uses_the_tensor_for_more_than_the_reduction_is_silent():
    # the moved mask also weighs the values: it must cross whole anyway
    src = """
    import torch

    def masked(v, mask):
        return (v * mask).sum() / mask.sum()

    def main():
        v = torch.randn(64, device="cuda:1")
        mask = torch.rand(64, device="cuda:0") > 0.5
        return masked(v, mask.to(v.device))
    """
    assert findings(src, "MP016") == []


# A per-layer device formula that reads the layer's index but picks one device for every layer.
PICKED = """
import torch
import torch.nn as nn


def layer_devices(n_layers):
    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [devices[FORMULA] for i in range(n_layers)]


class Net(nn.Module):
    def __init__(self, n_layers=4):
        super().__init__()
        self.devs = layer_devices(n_layers)
        self.blocks = nn.ModuleList(nn.Linear(8, 8).to(d) for d in self.devs)

    def forward(self, x):
        for blk, dev in zip(self.blocks, self.devs):
            x = blk(x.to(dev))
        return x
"""


def test_a_formula_that_picks_the_first_device_for_every_layer():
    found = findings(PICKED.replace("FORMULA", "i // n_layers"), "MP017")
    assert [f.line for f in found] == [8]
    assert "`i // n_layers` gives the same one, cuda:0" in found[0].message
    assert "With 2 GPUs" in found[0].message


def test_a_formula_that_spreads_the_layers_is_silent():
    assert findings(PICKED.replace("FORMULA", "i * len(devices) // n_layers"), "MP017") == []


def test_a_clamp_that_saturates_on_purpose_is_silent():
    assert findings(PICKED.replace("FORMULA", "min(i + 2, len(devices) - 1)"), "MP017") == []


def test_the_same_formula_in_a_for_loop_body():
    src = """
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self, n_layers=4):
            super().__init__()
            devices = ["cuda:0", "cuda:1"]
            self.blocks = nn.ModuleList()
            for i in range(n_layers):
                self.blocks.append(nn.Linear(8, 8).to(devices[i // n_layers]))
    """
    assert [f.line for f in findings(src, "MP017")] == [11]


def test_a_formula_reading_a_name_the_loop_sets_is_not_judged():
    src = """
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self, n_layers=4):
            super().__init__()
            devices = ["cuda:0", "cuda:1"]
            self.blocks = nn.ModuleList()
            stage = 0
            for i in range(n_layers):
                self.blocks.append(nn.Linear(8, 8).to(devices[stage + i // n_layers]))
                stage = stage
    """
    assert findings(src, "MP017") == []


# (values, indices) pairs: `gate, choice = probs.max(-1)` gives ids, so the expert's rows are picked by an index.
MOE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(8, 4).to("cuda:0")
        self.devs = ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
        self.experts = nn.ModuleList(nn.Linear(8, 8).to(d) for d in self.devs)

    def forward(self, x):
        ROUTE
        out = torch.zeros_like(x)
        for e, (expert, dev) in enumerate(zip(self.experts, self.devs)):
            idx = (choice == e).nonzero(as_tuple=True)[0]
            xe = PICK
            out.index_add_(0, idx, expert(xe).to(x.device) * gate[idx, None])
        return out


def main():
    return MoE()(torch.randn(16, 8, device="cuda:0"))
"""


def test_indices_of_max_along_a_dim_are_ids():
    src = MOE.replace("ROUTE", "gate, choice = F.softmax(self.router(x), -1).max(-1)")
    found = findings(src.replace("PICK", "x.to(dev)[idx.to(dev)]"), "MP016")
    assert [f.line for f in found] == [19]
    assert findings(src.replace("PICK", "x[idx].to(dev)"), "MP016") == []


def test_the_named_fields_and_torch_functions_give_the_same_pair():
    for route in (
        "top = self.router(x).max(dim=-1); gate, choice = top.values, top.indices",
        "gate, choice = torch.topk(self.router(x), 1, dim=-1); gate, choice = gate[:, 0], choice[:, 0]",
        "gate, choice = torch.max(self.router(x), -1)",
    ):
        found = findings(MOE.replace("ROUTE", route).replace("PICK", "x.to(dev)[idx.to(dev)]"), "MP016")
        assert [f.line for f in found] == [19], route


def test_an_elementwise_max_is_one_tensor():
    src = """
    import torch

    def main():
        a = torch.randn(4, device="cuda:0")
        b = torch.randn(4, device="cuda:0")
        m = a.max(b)
        return m + torch.ones(4, device="cuda:1")
    """
    assert [f.line for f in findings(src, "MP001")] == [8]


# Held-out round 19 and precision round 19: the general causes behind their misses and false findings.


def test_an_item_of_a_list_replaced_in_a_loop_is_the_new_value():
    src = """
    import torch
    import torch.nn as nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4).to("cuda:0")
            self.b = nn.Linear(4, 4).to("cuda:1")

        def forward(self, x):
            feats = [self.a(x.to("cuda:0")), self.b(x.to("cuda:1"))]
            for i, f in enumerate(feats):
                STEP
            return torch.cat(feats, dim=1)
    """
    assert findings(src.replace("STEP", 'feats[i] = f.to("cuda:1")'), "MP001") == []
    # rebinding the loop's name moves nothing in the list
    assert [f.line for f in findings(src.replace("STEP", 'f = f.to("cuda:1")'), "MP001")] == [15]


def test_one_block_held_n_times_is_where_its_last_move_put_it():
    src = """
    import torch
    import torch.nn as nn

    class B(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x):
            return self.l(x)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.devs = ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
            self.blocks = nn.ModuleList(BLOCKS)
            for blk, dev in zip(self.blocks, self.devs):
                blk.to(dev)

        def forward(self, x):
            for blk, dev in zip(self.blocks, self.devs):
                x = blk(x.to(dev))
            return x

    def main():
        return M()(torch.randn(2, 4))
    """
    found = findings(src.replace("BLOCKS", "[B()] * 4"), "MP001")
    assert [f.line for f in found] == [23] and "`blk` is on cuda:1" in found[0].message
    assert findings(src.replace("BLOCKS", "[B() for _ in range(4)]"), "MP001") == []


VIT = """
import torch
import torch.nn as nn


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.pos = nn.Parameter(torch.zeros(4))

    def forward(self, x):
        return self.proj(x) + self.pos


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = Embed()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))

    def split(self, devices):
        self.devs = devices
        self.embed.to(devices[0])
        for blk, dev in zip(self.blocks, devices):
            blk.to(dev)
        return self

    def forward(self, x):
        x = self.embed(x.to(self.devs[0]))
        for blk, dev in zip(self.blocks, self.devs):
            x = blk(x.to(dev))
        return x


def main():
    model = Net().split(["cuda:0", "cuda:1"])
    model.embed.pos = nn.Parameter(NEW)
    return model(torch.randn(2, 4))
"""


def test_a_parameter_of_a_part_replaced_from_outside_is_where_the_new_one_is():
    found = findings(VIT.replace("NEW", "torch.randn(4)"), "MP001")
    assert [f.line for f in found] == [13] and "`self.pos` is on cpu" in found[0].message
    assert findings(VIT.replace("NEW", 'torch.randn(4, device="cuda:0")'), "MP001") == []


def test_a_placing_method_may_loop_over_zip_of_its_parts():
    # (`split` places the blocks through `zip(self.blocks, devices)`: the forward sees them placed)
    src = VIT.replace("NEW", 'torch.randn(4, device="cuda:0")').replace("x.to(dev)", "x")
    found = findings(src, "MP001")
    assert [f.line for f in found] == [32] and "cuda:1" in found[0].message


DISPATCHED = """
import torch
import torch.nn as nn

MAP = {"a": "cuda:0", "b": "cuda:1"}


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        # 4 x 10 modules more: 44 in all, more than a loop unrolls
        self.extra = nn.ModuleList(nn.Sequential(*[nn.Linear(4, 4) for _ in range(9)]) for _ in range(4))

    def forward(self, x, scale=None):
        return self.b(self.a(x)) * scale


def make_hook(dev):
    def hook(module, args):
        return tuple(a.to(dev) if torch.is_tensor(a) else a for a in args)
    return hook


def dispatch(model, device_map):
    for name, module in model.named_modules():
        if name in device_map:
            module.to(device_map[name])
            HOOK
    return model


def main():
    model = dispatch(M(), MAP)
    x = torch.randn(2, 4, device="cuda:0")
    return model(x, scale=x)
"""


def test_a_device_map_by_module_name_over_more_modules_than_a_loop_unrolls():
    found = findings(DISPATCHED.replace("HOOK", "pass"), "MP001")
    assert [f.line for f in found] == [17] and "`self.b` is on cuda:1" in found[0].message


def test_an_input_mover_pre_hook_that_forgets_the_keywords():
    src = DISPATCHED.replace("HOOK", "module.register_forward_pre_hook(make_hook(torch.device(device_map[name])))")
    src = src.replace("return self.b(self.a(x)) * scale", "return self.b(self.a(x) * scale)")
    src = src.replace('MAP = {"a": "cuda:0", "b": "cuda:1"}', 'MAP = {"": "cuda:1", "a": "cuda:1", "b": "cuda:1"}')
    # the root's pre-hook moves x to cuda:1, not the `scale=` keyword, which stays on cuda:0
    found = findings(src, "MP001")
    assert [f.line for f in found] == [17] and "`scale`" in found[0].message


HOOKED = """
import torch
import torch.nn as nn


class Obs:
    def __init__(self, n, device):
        self.mn = torch.zeros(n, device=device)

    def __call__(self, module, inputs, output):
        self.mn = torch.minimum(self.mn, output.amin(0))


def main():
    layers = [nn.Linear(4, 4).to("cuda:0"), nn.Linear(4, 4).to("cuda:1")]
    for layer in layers:
        HOOK
    x = torch.randn(2, 4, device="cuda:0")
    return layers[1](layers[0](x).to("cuda:1"))
"""


def test_a_forward_hook_object_of_the_file_runs_with_the_output():
    found = findings(HOOKED.replace("HOOK", 'layer.register_forward_hook(Obs(4, "cuda:0"))'), "MP001")
    assert [f.line for f in found] == [11]
    good = HOOKED.replace("HOOK", "layer.register_forward_hook(Obs(4, layer.weight.device))")
    assert findings(good, "MP001") == []


def test_a_lambda_hook_keeps_the_default_it_was_made_with():
    src = HOOKED.replace(
        "HOOK",
        "bias = torch.zeros(4, device=layer.weight.device)\n"
        "        layer.register_forward_hook(lambda m, i, o, bias=bias: o + bias)",
    )
    assert findings(src, "MP001") == []
    late = src.replace("lambda m, i, o, bias=bias: o + bias", "lambda m, i, o: o + bias")
    # read when it runs: every hook adds the last pass's bias (on cuda:1), and the first layer's output is on cuda:0
    assert [f.line for f in findings(late, "MP001")] == [18]


def test_a_module_wrapped_in_data_parallel_on_one_path_only_takes_its_input_anywhere():
    src = """
    import torch
    import torch.nn as nn

    def build(n_gpu):
        front = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).to("cuda:0")
        if n_gpu >= 2:
            front = nn.DataParallel(front, device_ids=[0, 1], output_device=1)
        return front

    def main():
        front = build(torch.cuda.device_count())
        head = nn.Linear(4, 4).to("cuda:1")
        return head(front(torch.randn(8, 4)))
    """
    assert findings(src, "MP001") == []


def test_a_moved_argument_indexed_by_a_callee_that_also_uses_it_whole_is_not_oversized():
    src = """
    import torch
    import torch.nn as nn

    class Bottom(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("edges", torch.tensor([0.0, 1.0]))
            self.mlp = nn.Linear(4, 4)

        def forward(self, dense):
            buckets = torch.bucketize(dense[:, 0].contiguous(), self.edges)
            return self.mlp(dense), buckets

    def main():
        bottom = Bottom().to("cuda:0")
        return bottom(torch.randn(8, 4, device="cuda:1").to("cuda:0"))
    """
    assert findings(src, "MP016") == []


def test_blocks_built_alike_outside_an_init_are_not_one_object():
    # `[B() for _ in range(4)]` in a script: four blocks, one memoised value; moving one moves no other
    src = """
    import torch
    import torch.nn as nn

    class B(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x):
            return self.l(x)

    class M(nn.Module):
        def __init__(self, blocks):
            super().__init__()
            self.blocks = nn.ModuleList(blocks)

    def main():
        model = M([B() for _ in range(4)])
        for i, b in enumerate(model.blocks):
            b.to("cuda:0" if i < 2 else "cuda:1")
        return model.blocks[3](torch.randn(2, 4, device="cuda:1"))
    """
    assert findings(src, "MP001") == []
