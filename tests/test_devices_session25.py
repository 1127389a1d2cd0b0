"""Session 25: Python's sum() over the per-parameter items of a split model, recursion that only
renames its unknown argument, and the pre-filter's borrowing limited to modules that could add a word."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze
from mpcheck.devices import calls, statements

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))

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


model = Net()
out = model(torch.randn(2, 4))
"""


def findings(src: str):
    r = analyze("t.py", textwrap.dedent(src), ALL, "m", {})
    return sorted((f.line, f.code, f.message) for f in r.findings)


def test_sum_of_per_parameter_norms_of_a_split_model_is_reported():
    got = findings(SPLIT + "reg = sum(p.norm() for p in model.parameters())\n")
    assert [(line, code) for line, code, _ in got] == [(18, "MP001")]
    message = got[0][2]
    assert "an item of `(p.norm() for p in model.parameters())` is on cuda:1" in message
    assert "`p.norm().to('cuda:0')`" in message


def test_sum_of_a_list_comprehension_over_named_parameters_is_reported():
    src = SPLIT + "reg = sum([w.pow(2).sum() for _, w in model.named_parameters()])\n"
    assert [(line, code) for line, code, _ in findings(src)] == [(18, "MP001")]


def test_sum_of_per_parameter_norms_moved_to_one_device_is_clean():
    assert findings(SPLIT + 'reg = sum(p.norm().to("cuda:0") for p in model.parameters())\n') == []
    assert findings(SPLIT + "reg = sum(p.norm().to(out.device) for p in model.parameters())\n") == []


def test_sum_over_parameters_filtered_by_a_test_says_nothing():
    # A filter may keep one device's parameters only: not known, so not reported.
    src = SPLIT + "reg = sum(p.norm() for p in model.parameters() if p.dim() > 1)\n"
    assert findings(src) == []


def test_sum_of_per_parameter_norms_of_a_model_on_one_device_is_clean():
    src = SPLIT.replace('"cuda:1"', '"cuda:0"') + "reg = sum(p.norm() for p in model.parameters())\n"
    assert findings(src) == []


RECURSIVE = """
import torch


class Builder:
    def __init__(self, sources):
        self.out = [self.manager(s) for s in sources]

    def manager(self, source):
        if source.base is None:
            return self.root(source)
        return self.child(self.manager(source.base), source)

    def root(self, source):
        return source

    def child(self, parent, source):
        return parent
"""


def test_recursion_that_only_renames_an_unknown_argument_runs_one_level(monkeypatch):
    runs: list[str] = []
    run_body = statements.Statements.run_body

    def counting(self, info, st):
        runs.append(info.qual)
        return run_body(self, info, st)

    monkeypatch.setattr(statements.Statements, "run_body", counting)
    findings(RECURSIVE)
    # `manager(source.base)` inside `manager(source)`, both unknown: the inner call is not run again.
    # (Before, it ran three levels deep, and once per use in __init__, where nothing is memoised.)
    assert runs.count("Builder.manager") <= 3


def test_recursion_key_drops_symbolic_names_but_keeps_a_dtype():
    key = (1, 2, (("s", "source"), ("c", "1")), (("device", ("s", "dev")),), "cuda:0", "", None)
    deeper = (1, 2, (("s", "source.base"), ("c", "1")), (("device", ("s", "self.dev")),), "cuda:0", "", None)
    assert calls._recursion_key(key) == calls._recursion_key(deeper)
    cast = (1, 2, (("s", "self.dtype"), ("c", "1")), (("device", ("s", "dev")),), "cuda:0", "", None)
    assert calls._recursion_key(cast) != calls._recursion_key(key)
    other = (1, 2, (("s", "source"), ("c", "2")), (("device", ("s", "dev")),), "cuda:0", "", None)
    assert calls._recursion_key(other) != calls._recursion_key(key)


# (A recursive mover into nested containers is still followed: fixtures A_recursive_mover_skips_tuples_*.)


# (The pre-filter's borrowing for a file other rules let through: tests/test_imported_values.py.)


ACCUMULATE = (
    SPLIT
    + """
params = [p for p in model.parameters() if p.requires_grad]
bufs = [torch.zeros_like(p, device="cuda:0") for p in params]
for buf, p in zip(bufs, params):
    buf.add_(p.grad)
"""
)


def test_a_requires_grad_filter_keeps_every_parameter_where_the_file_freezes_none():
    got = findings(ACCUMULATE)
    assert [(line, code) for line, code, _ in got] == [(22, "MP001")]  # buf.add_(p.grad)
    assert "`p.grad` is on cuda:1" in got[0][2]
    # `requires_grad_()` and `requires_grad_(True)` keep torch's default: nothing frozen.
    for unfreeze in ("model.requires_grad_()\n", "model.requires_grad_(True)\n"):
        src = ACCUMULATE.replace("params = [", unfreeze + "params = [")
        assert [(line, code) for line, code, _ in findings(src)] == [(23, "MP001")], unfreeze


def test_per_parameter_buffers_made_where_each_parameter_is_are_clean():
    assert findings(ACCUMULATE.replace('torch.zeros_like(p, device="cuda:0")', "torch.zeros_like(p)")) == []


def test_a_requires_grad_filter_decides_nothing_where_the_file_freezes_a_part():
    for freeze in (
        "model.a.weight.requires_grad = False\n",
        "model.a.requires_grad_(False)\n",
        "for q in model.a.parameters():\n    q.requires_grad_(False)\n",
        "extra = nn.Parameter(torch.zeros(1), requires_grad=False)\n",
    ):
        src = ACCUMULATE.replace("params = [", freeze + "params = [")
        assert findings(src) == [], freeze


SWA = SPLIT.replace(
    "import torch.nn as nn\n", "import torch.nn as nn\nfrom torch.optim.swa_utils import AveragedModel\n"
) + ("swa = AveragedModel(model, ARGS)\nswa.update_parameters(model)\npred = swa(torch.randn(2, 4))\n")


def test_an_averaged_copy_of_a_split_model_moved_whole_is_followed_into_its_forward():
    got = findings(SWA.replace("ARGS", 'device="cuda:0"'))
    assert [(line, code) for line, code, _ in got] == [(14, "MP001")]  # the hop to cuda:1 meets `b` on cuda:0


def test_an_averaged_copy_left_where_the_model_is_is_clean():
    assert findings(SWA.replace("ARGS", "device=None")) == []
    assert findings(SWA.replace(", ARGS", "")) == []
    one_gpu = SWA.replace('"cuda:1"', '"cuda:0"').replace("ARGS", 'device="cuda:0"')
    assert findings(one_gpu) == []


WIDE_DEEP = """
import torch
import torch.nn as nn


class WideDeep(nn.Module):
    def __init__(self):
        super().__init__()
        self.device = torch.device("cuda:0")
        self.scale = 2.0
        self.wide = nn.Linear(8, 1).to("cuda:0")
        self.deep = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to("cuda:1")

    def forward(self, x):
        return self.wide(x.to("cuda:0")) + self.deep(x.to("cuda:1")).to("cuda:0")


model = WideDeep()
out = model(torch.randn(4, 8))
"""


def test_weights_of_the_linear_layers_of_a_split_model_summed_are_reported():
    src = WIDE_DEEP + (
        "groups = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]\n"
        "penalty = sum(w.norm(dim=0).sum() for w in groups)\n"
    )
    got = findings(src)
    assert [(line, code) for line, code, _ in got] == [(21, "MP001")]
    assert "an item of `(w.norm(dim=0).sum() for w in groups)` is on cuda:1" in got[0][2]
    assert findings(src.replace("w.norm(dim=0).sum() for", 'w.norm(dim=0).sum().to("cuda:0") for')) == []


def test_modules_and_children_list_the_known_submodules_in_registration_order():
    x0 = '\nx0 = torch.randn(4, 8).to("cuda:0")\n'
    linears = "linears = [m for m in model.modules() if isinstance(m, nn.Linear)]"
    assert findings(WIDE_DEEP + linears + x0 + "y = linears[0](x0)\n") == []  # wide, on cuda:0
    assert [(line, code) for line, code, _ in findings(WIDE_DEEP + linears + x0 + "y = linears[1](x0)\n")] == [
        (22, "MP001")  # the deep tower's first Linear, on cuda:1
    ]
    kids = "kids = list(model.children())"
    assert findings(WIDE_DEEP + kids + x0 + "y = kids[0](x0)\n") == []
    assert [(line, code) for line, code, _ in findings(WIDE_DEEP + kids + x0 + "y = kids[1](x0)\n")] == [(22, "MP001")]


def test_modules_of_a_model_holding_a_part_of_unknown_kind_decide_nothing():
    src = WIDE_DEEP.replace("    def __init__(self):", "    def __init__(self, head=None):").replace(
        "        self.scale = 2.0", "        self.head = head"
    ) + (
        "groups = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]\n"
        "penalty = sum(w.norm(dim=0).sum() for w in groups)\n"
    )
    # `head` may be a module: the list of modules is not known, nor is what the sum adds.
    assert findings(src.replace("model = WideDeep()", "model = WideDeep(make_head())")) == []


def test_isinstance_against_torch_nn_classes_is_decided_only_where_certain():
    from mpcheck.devices import module_tree
    from mpcheck.devices.values import UNK, Obj, SeqV

    linear = Obj("module", None, nn_class="Linear")
    relu = Obj("passthrough", None)
    assert module_tree.is_instance(linear, "Linear") is True
    assert module_tree.is_instance(linear, "Conv2d") is False
    assert module_tree.is_instance(linear, "Module") is True
    assert module_tree.is_instance(relu, "Linear") is False
    assert module_tree.is_instance(relu, "ReLU") is None  # which parameterless layer it is is not kept
    assert module_tree.is_instance(Obj("tensor", None), "Linear") is False
    assert module_tree.is_instance(UNK, "Linear") is None
    seq = SeqV((linear, relu), module=True)
    assert module_tree.is_instance(seq, "Linear") is False and module_tree.is_instance(seq, "Sequential") is None
    assert module_tree.modules(seq) == [seq, linear, relu]
    assert module_tree.modules(SeqV((linear, UNK), module=True)) is None
    assert module_tree.modules(Obj("module", None, nn_class="MultiheadAttention")) is None  # it holds out_proj


OWN_TO = """
import torch
import torch.nn as nn


class Rotary(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.cos = torch.ones(16, 8)

    def to(self, *args, **kwargs):
        self.cos = self.cos.to(*args, **kwargs)
        BODY

    def forward(self, x):
        return self.proj(x) * self.cos[: x.shape[0]]


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Rotary(), Rotary()])
        self.where = ["cuda:0", "cuda:1"]
        for blk, dev in zip(self.blocks, self.where):
            blk.to(dev)

    def forward(self, h):
        for blk, dev in zip(self.blocks, self.where):
            h = blk(h.to(dev))
        return h


out = Encoder()(torch.randn(2, 8))
"""


def test_a_to_override_that_never_calls_module_to_leaves_the_weights_on_the_cpu():
    got = findings(OWN_TO.replace("BODY", "return self"))
    assert [(line, code) for line, code, _ in got] == [(30, "MP001")]
    assert "its class's own `to()` (line 12) moves only the tensors it names" in got[0][2]
    assert "`return super().to(*args, **kwargs)`" in got[0][2]


def test_a_to_override_that_hands_on_to_module_to_moves_the_weights():
    assert findings(OWN_TO.replace("BODY", "return super().to(*args, **kwargs)")) == []
    assert findings(OWN_TO.replace("BODY", "return nn.Module.to(self, *args, **kwargs)")) == []
    # Moves of its own parameters in the body: what they do is not decided here; Module.to's meaning is kept.
    loop = "for p in self.parameters():\n            p.data = p.data.to(*args, **kwargs)\n        return self"
    assert findings(OWN_TO.replace("BODY", loop)) == []


def test_a_batch_class_with_its_own_to_is_not_a_module_whose_weights_stay():
    src = """
    import torch
    import torch.nn as nn


    class Batch:
        def __init__(self, x, y):
            self.x = x
            self.y = y

        def to(self, device):
            self.x = self.x.to(device)
            self.y = self.y.to(device)
            return self


    model = nn.Linear(4, 2).to("cuda:0")
    b = Batch(torch.randn(3, 4), torch.randint(0, 2, (3,))).to("cuda:0")
    loss = nn.functional.cross_entropy(model(b.x), b.y)
    """
    assert findings(src) == []


def test_a_module_without_weights_whose_own_to_moves_its_tensors_is_clean():
    src = """
    import torch
    import torch.nn as nn


    class RotaryCache(nn.Module):
        def __init__(self):
            super().__init__()
            self.cos = torch.ones(16, 8)

        def to(self, *args, **kwargs):
            self.cos = self.cos.to(*args, **kwargs)
            return self

        def forward(self, x):
            return x * self.cos[: x.shape[0]]


    rope = RotaryCache().to("cuda:1")
    y = rope(nn.Linear(8, 8).to("cuda:1")(torch.randn(4, 8, device="cuda:1")))
    """
    assert findings(src) == []
