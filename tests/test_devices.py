"""Unit tests of the static device model (mpcheck/devices): the lattice, import
resolution, class placement summaries, the flow of values, and the summaries
other files use."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpcheck import codes
from mpcheck.analysis import analyze, summarize
from mpcheck.devices.names import canonical, import_bindings
from mpcheck.devices.values import (
    DeviceV,
    Obj,
    conflict,
    distinct,
    is_split_devs,
    join,
    join_devs,
    one,
)
from mpcheck.rules.context import FileContext

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def model_of(src: str, modname: str = "m", project=None):
    src = textwrap.dedent(src)
    ctx = FileContext("t.py", src, cst.parse_module(src), modname, project or {})
    return ctx.model


def instance(src: str, cls: str):
    m = model_of(src)
    return next(iter(m.classes[cls].instances.values()))


def codes_lines(src: str, project=None, modname="m"):
    src = textwrap.dedent(src)
    r = analyze("t.py", src, ALL, modname, project or {})
    return sorted((f.line, f.code) for f in r.findings)


# ---------------------------------------------------------------- lattice


def test_unknown_never_conflicts():
    assert conflict(None, one("cuda:1")) is None
    assert conflict(one("cuda:0"), None) is None
    assert conflict(frozenset({"cuda:0", "cuda:1"}), one("cuda:1")) is None  # paths disagree: no finding


def test_known_devices_conflict_and_current_device_is_cuda0():
    assert conflict(one("cuda:0"), one("cuda:1")) == ("cuda:0", "cuda:1")
    assert conflict(one("cpu"), one("cuda:0")) == ("cpu", "cuda:0")
    assert conflict(one("cuda"), one("cuda:0")) is None
    assert conflict(one("cuda"), one("cuda:1")) == ("cuda", "cuda:1")


def test_symbolic_devices_differ_only_as_entries_of_one_list():
    assert distinct("sym:self.devices[0]", "sym:self.devices[1]")
    assert not distinct("sym:dev0", "sym:dev1")
    assert not distinct("sym:devices[0]", "cuda:1")
    assert is_split_devs(["sym:devices[0]", "sym:devices[1]"])
    assert not is_split_devs(["cuda:0", "cuda"])


def test_join_keeps_agreement_and_widens_disagreement():
    a, b = Obj("tensor", one("cuda:0")), Obj("tensor", one("cuda:1"))
    assert join(a, a.with_()).devs == one("cuda:0")
    assert join(a, b).devs == frozenset({"cuda:0", "cuda:1"})
    assert join_devs(None, one("cpu")) is None
    assert isinstance(join(DeviceV(one("cpu")), DeviceV(one("cuda:0"))), DeviceV)


# ---------------------------------------------------------------- names


@pytest.mark.parametrize(
    "stmt,expected",
    [
        ("from torch.nn import DataParallel as DP", [("DP", "torch.nn.DataParallel")]),
        ("import torch.nn.parallel as par", [("par", "torch.nn.parallel")]),
        ("import torch.nn", [("torch", "torch")]),
        ("from .split import Net", [("Net", "pkg.split.Net")]),
        ("from ..core import util", [("util", "core.util")]),
    ],
)
def test_import_bindings(stmt, expected):
    node = cst.parse_module(stmt).body[0].body[0]
    assert import_bindings(node, "pkg.train") == expected


def test_module_attribute_targets_name_what_is_read_off_modules_imported_whole():
    from mpcheck.analysis import module_attribute_targets

    src = (
        "import config\nimport pkg.settings as cfg\nimport pkg.sub\n"
        "a = x.to(config.first)\nb = cfg.C.device\nc = pkg.sub.DEV\nconfig.Placement()\nnot_config.other\n"
    )
    assert module_attribute_targets(src) == ["config.first", "pkg.settings.C", "pkg.sub.DEV", "config.Placement"]
    assert module_attribute_targets(src, lambda module: module.startswith("pkg.")) == ["pkg.settings.C", "pkg.sub.DEV"]


def test_top_bindings_give_classes_their_bodies():
    from mpcheck.lint.modules import top_bindings

    src = 'class C:\n    device = "cuda:1"\n\n    hidden = 4\n\n    def f(self):\n        x = "cuda:0"\nfirst = "cuda:0"\n'
    got = top_bindings(src)
    assert got["first"] == ' "cuda:0"'
    # its own constants, then the lines of its methods that place something on a named device
    assert got["C"] == 'device = "cuda:1"\nhidden = 4\nx = "cuda:0"'
    src = 'def f(m):\n    """Moves it with .cuda(1)."""\n    n = 1  # .cuda(1)\n    return m.to(1)\ndef g():\n    return 1\n'
    assert top_bindings(src) == {"f": "return m.to(1)"}  # a function's placing lines; prose and comments are not


def test_canonical_names_merge_reexports():
    assert canonical("torch.nn.DataParallel") == "torch.nn.parallel.DataParallel"
    assert canonical("torch.nn.parallel.data_parallel.DataParallel") == "torch.nn.parallel.DataParallel"
    assert (
        canonical("torch.nn.parallel.distributed.DistributedDataParallel")
        == "torch.nn.parallel.DistributedDataParallel"
    )


# ---------------------------------------------------------------- placement


def test_split_by_strings_ints_and_device_objects():
    inst = instance(
        """
        import torch, torch.nn as nn
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 2).cuda(1)
                self.c = nn.Linear(2, 2, device=torch.device("cuda", 2))
        """,
        "S",
    )
    assert dict(inst.split) == {"a": "cuda:0", "b": "cuda:1", "c": "cuda:2"}


def test_split_through_device_list_fstring_loop_and_dict():
    inst = instance(
        """
        import torch.nn as nn
        class S(nn.Module):
            def __init__(self, n=2):
                super().__init__()
                self.devs = {"first": "cuda:0"}
                self.stem = nn.Linear(2, 2).to(self.devs["first"])
                self.blocks = nn.ModuleList()
                for i in range(n):
                    self.blocks.append(nn.Linear(2, 2).to(f"cuda:{i}"))
        """,
        "S",
    )
    assert sorted({d for _, d in inst.split}) == ["cuda:0", "cuda:1"]


def test_split_through_symbolic_device_list_parameter():
    inst = instance(
        """
        import torch.nn as nn
        class S(nn.Module):
            def __init__(self, devices):
                super().__init__()
                self.a = nn.Linear(2, 2).to(devices[0])
                self.b = nn.Linear(2, 2).to(devices[1])
        """,
        "S",
    )
    assert inst.split == (("a", "sym:devices[0]"), ("b", "sym:devices[1]"))


def test_single_device_and_unplaced_classes_are_not_split():
    src = """
        import torch.nn as nn
        class One(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:1")
                self.b = nn.Linear(2, 2).to("cuda:1")
        class Plain(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2)
                self.register_buffer("m", __import__("torch").ones(3))
    """
    assert instance(src, "One").split is None and instance(src, "One").devs == one("cuda:1")
    plain = instance(src, "Plain")
    assert plain.split is None and plain.devs is None


def test_helper_function_returns_module_on_its_argument_device():
    inst = instance(
        """
        import torch.nn as nn
        def stage(dim, device):
            return nn.Sequential(nn.Linear(dim, dim), nn.ReLU()).to(device)
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.s0 = stage(8, "cuda:0")
                self.s1 = stage(8, "cuda:1")
        """,
        "S",
    )
    assert sorted({d for _, d in inst.split}) == ["cuda:0", "cuda:1"]


# ---------------------------------------------------------------- flow


def test_activation_hop_is_followed_and_missing_hop_found():
    src = """
        import torch.nn as nn
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 2).to("cuda:1")
            def forward(self, x):
                h = self.a(x.to("cuda:0"))
                ok = self.b(h.to("cuda:1"))
                return self.b(h)
    """
    assert codes_lines(src) == [(11, "MP001")]


def test_unknown_inputs_and_joined_paths_stay_silent():
    src = """
        import torch.nn as nn
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 2).to("cuda:1")
            def forward(self, x, flag):
                h = self.b(x)
                if flag:
                    h = h.to("cuda:0")
                return self.a(h)
    """
    assert codes_lines(src) == []


def test_eval_path_is_kept_apart_from_training_path():
    src = """
        import torch.nn as nn
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 2).to("cuda:1")
            def forward(self, x):
                h = self.a(x.to("cuda:0"))
                if not self.training:
                    return self.b(h)
                return self.b(h.to("cuda:1"))
    """
    assert codes_lines(src) == [(11, "MP001")]


def test_forward_output_device_reaches_the_training_script():
    src = """
        import torch.nn as nn
        import torch.nn.functional as F
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 2).to("cuda:1")
            def forward(self, x):
                return self.b(self.a(x.to("cuda:0")).to("cuda:1"))
        def fit(loader):
            model = S()
            for x, y in loader:
                out = model(x)
                bad = F.mse_loss(out, y.to("cuda:0"))
                good = F.mse_loss(out, y.to(out.device))
    """
    assert codes_lines(src) == [(15, "MP008")]


def test_cpu_scalar_tensor_mixes_with_cuda_tensors():
    src = """
        import torch
        import torch.nn as nn
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 2).to("cuda:1")
            def forward(self, x):
                h = self.a(x.to("cuda:0")) * torch.tensor(0.5)
                return self.b(h.to("cuda:1")) + torch.zeros(2)
    """
    assert codes_lines(src) == [(11, "MP001")]  # the CPU zeros(2) is not a scalar


def test_set_default_device_makes_factories_unknown():
    src = """
        import torch
        import torch.nn as nn
        torch.set_default_device("cuda:1")
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 2).to("cuda:1")
            def forward(self, x):
                h = self.b(self.a(x.to("cuda:0")).to("cuda:1"))
                return h + torch.zeros(2)
    """
    assert codes_lines(src) == []


# ---------------------------------------------------------------- summaries


SPLIT_MODULE = """
import torch.nn as nn
def make(device):
    return nn.Linear(4, 4).to(device)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4).to("cuda:0")
        self.b = nn.Linear(4, 4).to("cuda:1")
    def forward(self, x):
        return self.b(self.a(x).to("cuda:1"))
"""


def test_summary_is_json_and_describes_placement_and_flow():
    import json

    s = summarize("models/split.py", SPLIT_MODULE, "models.split")
    assert json.loads(json.dumps(s)) == s
    net = s["classes"]["Net"]
    assert net["split"] == [["a", "cuda:0"], ["b", "cuda:1"]]
    assert net["in"] == ["cuda:0"] and net["out"] == ["cuda:1"]
    assert s["functions"]["make"]["returns"]["devs"] == ["sym:device"]


def test_summary_of_unparsable_file_is_none():
    assert summarize("x.py", "def (:\n", "x") is None


def test_analyze_uses_summaries_across_files_and_reports_what_it_used():
    project = {
        "models.split": summarize("models/split.py", SPLIT_MODULE, "models.split"),
        "models": {"classes": {}, "functions": {}, "reexports": {"Net": "models.split.Net"}},
    }
    src = textwrap.dedent(
        """
        import torch.nn as nn
        from models import Net, make
        model = Net()
        dp = nn.DataParallel(model)
        model.cuda()
        stage = make("cuda:1")
        y = stage(model(x).to("cuda:0"))
        """
    )
    r = analyze("train.py", src, ALL, "train", project)
    assert sorted((f.line, f.code) for f in r.findings) == [(5, "MP002"), (6, "MP007")]
    assert r.used_modules == ["models", "models.split"]
    # Without the summaries nothing is known about Net.
    assert analyze("train.py", src, ALL, "train", {}).findings == []


def test_syntax_error_is_one_mp000_with_the_parser_position():
    r = analyze("bad.py", "x = (1,\n", ALL, "bad", {})
    assert [(f.code, f.name) for f in r.findings] == [("MP000", "syntax-error")]
    assert r.findings[0].line >= 1 and "parse" in r.findings[0].message


def test_device_constants_cross_files():
    config = 'import torch\nDEVICES = ["cuda:0", "cuda:1"]\nHEAD = torch.device("cuda", 1)\nN = 2\n'
    s = summarize("config.py", config, "config")
    assert s["constants"]["DEVICES"] == {"list": [{"const": "cuda:0"}, {"const": "cuda:1"}]}
    assert s["constants"]["HEAD"] == {"device": "cuda:1"}
    src = textwrap.dedent(
        """
        import torch.nn as nn
        from config import DEVICES
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to(DEVICES[0])
                self.b = nn.Linear(2, 2).to(DEVICES[1])
            def forward(self, x):
                return self.b(self.a(x.to(DEVICES[0])))
        """
    )
    r = analyze("model.py", src, ALL, "model", {"config": s})
    assert [(f.line, f.code) for f in r.findings] == [(10, "MP001")]
    assert r.used_modules == ["config"]


def test_module_to_in_init_places_container_items_in_place():
    inst = instance(
        """
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self, n=4):
                super().__init__()
                self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(n)])
                for i, layer in enumerate(self.layers):
                    layer.to(f"cuda:{i // 2}")
        """,
        "Net",
    )
    assert [i.devs for i in inst.attrs["layers"].items] == [one("cuda:0")] * 2 + [one("cuda:1")] * 2
    assert inst.split is not None


def test_device_hooks_make_a_module_device_unknown():
    src = """
        import torch.nn as nn
        from accelerate import cpu_offload
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 2).to("cpu")
                cpu_offload(self.b, execution_device="cuda:0")
            def forward(self, x):
                return self.b(self.a(x.to("cuda:0")))
    """
    assert codes_lines(src) == []


def _apply(src: str, fix) -> str:
    lines = src.splitlines(keepends=True)
    start = sum(len(x) for x in lines[: fix.line - 1]) + fix.column - 1
    end = sum(len(x) for x in lines[: fix.end_line - 1]) + fix.end_column - 1
    return src[:start] + fix.replacement + src[end:]


@pytest.mark.parametrize(
    "body,code",
    [
        ("h = self.a(x.to('cuda:0'))\n        return self.b(h)", "MP001"),
        (
            "h = self.b(self.a(x.to('cuda:0')).to('cuda:1'))\n        t = y.to('cuda:0')\n        return F.mse_loss(h, t)",
            "MP008",
        ),
    ],
)
def test_safe_fix_removes_the_finding(body, code):
    src = textwrap.dedent(
        """
        import torch.nn as nn
        import torch.nn.functional as F
        class S(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 2).to("cuda:1")
            def forward(self, x, y):
                BODY
        """
    ).replace("BODY", body)
    (f,) = analyze("t.py", src, ALL, "m", {}).findings
    assert f.code == code and f.fix is not None and f.fix.safe
    fixed = _apply(src, f.fix)
    assert ".to(" in fixed.splitlines()[f.line - 1]
    assert analyze("t.py", fixed, ALL, "m", {}).findings == []


def test_subclass_of_a_split_class_from_another_file_is_split():
    project = {"models.split": summarize("models/split.py", SPLIT_MODULE, "models.split")}
    src = textwrap.dedent(
        """
        import torch.nn as nn
        from models.split import Net
        class Tuned(Net):
            def __init__(self):
                super().__init__()
                self.extra = nn.Linear(4, 4).to("cuda:1")
        m = Tuned().cuda()
        """
    )
    r = analyze("tuned.py", src, ALL, "tuned", project)
    assert [(f.line, f.code) for f in r.findings] == [(8, "MP007")]


def test_symbolic_indexes_of_one_name_with_two_offsets_differ() -> None:
    from mpcheck.devices.values import affine, affine_name, distinct

    assert affine_name("rank", 2, 1) == "2*rank+1"
    assert affine("2*rank+1") == ("rank", 2, 1)
    assert affine("cuda:{rank-1}") == ("rank", 1, -1)
    assert distinct("sym:2*rank", "sym:2*rank+1")
    assert distinct("sym:cuda:{rank}", "sym:rank+1")
    assert not distinct("sym:rank", "sym:2*rank")  # the same when rank is 0
    assert not distinct("sym:rank", "sym:other+1")
    assert not distinct("sym:devices[0]", "sym:devices[0]")


# ---------------------------------------------------------------- functools.partial


def test_partial_factory_makes_what_its_function_makes():
    src = """
    import functools
    import torch
    import torch.nn as nn

    on_first = functools.partial(torch.zeros, device="cuda:0")
    plain = functools.partial(torch.zeros, dtype=torch.float32)

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8).to("cuda:0")
            self.b = nn.Linear(8, 8).to("cuda:1")

        def forward(self, x):
            h = self.b(self.a(x.to("cuda:0")).to("cuda:1"))
            ok = h + plain(2, 8, device=h.device)
            return ok + on_first(2, 8)
    """
    assert codes_lines(src) == [(18, "MP001")]


def test_partial_class_binds_its_arguments_first():
    src = """
    from functools import partial
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, dim, device=None):
            super().__init__()
            self.fc = nn.Linear(dim, dim).to(device)

        def forward(self, x):
            return self.fc(x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            late = partial(Block, device="cuda:1")
            self.first = Block(8, "cuda:0")
            self.second = late(8)

        def forward(self, x):
            return self.second(self.first(x.to("cuda:0")))
    """
    assert codes_lines(src) == [(21, "MP001")]


def test_an_indexless_placement_after_set_device_is_reported_once():
    """`.cuda()` after set_device(1), meeting a stage on cuda:0: one MP004 at it, not a second one that
    says the same of the tensor made on the current device."""
    src = """
        import torch
        import torch.nn as nn

        class Stages(nn.Module):
            def __init__(self):
                super().__init__()
                self.s0 = nn.Linear(256, 256).to("cuda:0")
                self.s1 = nn.Linear(256, 256).to("cuda:1")

            def forward(self, x):
                x = torch.relu(self.s0(x.cuda()))
                return self.s1(x.cuda(1))

        torch.cuda.set_device(1)
        y = Stages()(torch.randn(8, 256))
    """
    assert codes_lines(src) == [(12, "MP004")]
    assert codes_lines(src.replace("x.cuda())", "x.cuda(0))")) == []


_TWO_STAGE_WITH_MASK = """
import torch
import torch.nn as nn

class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 8).to("cuda:1")

    def forward(self, input_ids, attention_mask):
        h = self.a(input_ids)
        return self.b(h.to("cuda:1")) * attention_mask

model = Two()
ids = torch.randn(4, 8, device="cuda:0")
mask = torch.ones(4, 8, device="cuda:0")
"""


@pytest.mark.parametrize(
    "call",
    [
        'model(**{"input_ids": ids, "attention_mask": mask})',  # keys known: bound by name
        "model(ids, **{k: v.to('cuda:0') for k, v in batch.items()})",  # keys not known, values alike
    ],
)
def test_a_double_star_mapping_binds_the_forwards_parameters(call):
    src = _TWO_STAGE_WITH_MASK + "\ndef step(batch):\n    return " + call + "\n"
    found = [(f.code, f.line) for f in analyze("t.py", src, ALL, "t", {}).findings]
    assert found == [("MP001", 13)], found


def test_a_double_star_mapping_of_unknown_keys_leaves_a_parameter_with_a_default_open():
    # `attention_mask=None`: the mapping may or may not hold it; nothing is claimed either way.
    src = _TWO_STAGE_WITH_MASK.replace("attention_mask):", "attention_mask=None):").replace(
        "* attention_mask", "* (attention_mask if attention_mask is not None else 1)"
    )
    src += "\ndef step(batch):\n    return model(ids, **{k: v.to('cuda:0') for k, v in batch.items()})\n"
    assert [f.code for f in analyze("t.py", src, ALL, "t", {}).findings] == []


# ---------------------------------------------------------------- torch.nn arguments after the input

_RNN_STAGE = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 8, batch_first=True).to("cuda:1")
        self.lin = nn.Linear(8, 8).to("cuda:1")

    def forward(self, x, lengths, xs):
        x = x.to("cuda:1")
        h0 = torch.zeros(1, x.size(0), 8)
        {call}
"""


@pytest.mark.parametrize(
    "call, expected",
    [
        ("return self.rnn(x, h0)", [(14, "MP001")]),  # an RNN's hidden state must be where it is
        ("return self.rnn(x, hx=h0)", [(14, "MP001")]),
        # (moved where it is used: no MP001; made on the host and copied every forward, MP019's)
        ("return self.rnn(x, h0.to('cuda:1'))", [(14, "MP019")]),
        ("return self.rnn(x, None)", []),
        ("return self.rnn(*xs, h0)", []),  # which position h0 takes is not known
        ("return self.lin(x, lengths.cpu())", []),  # any other module's extra argument may be on the CPU
    ],
)
def test_rnn_state_on_the_host_is_reported_only_where_torch_raises(call, expected):
    assert codes_lines(_RNN_STAGE.replace("{call}", call)) == expected


_PLAIN = """
import torch
import torch.nn as nn

class PE(nn.Module):
    def __init__(self):
        super().__init__()
        {init}
    {extra}
    def forward(self, x):
        return x + self.pe

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.pe = PE().to("cuda:0")

    def forward(self, x):
        return self.pe(x.to("cuda:0"))
"""


@pytest.mark.parametrize(
    "init, extra, expected",
    [
        ("self.pe = torch.zeros(4)", "", [(11, "MP001")]),  # Module.to() leaves a plain attribute
        ("self.register_buffer('pe', torch.zeros(4))", "", []),
        ("self.register_buffer('pe', None); self.pe = torch.zeros(4)", "", []),  # assigns the buffer
        ("self.pe = torch.zeros(4); self.register_buffer(name, None)", "name = 'pe'", []),
        ("self.pe = torch.zeros(4)", "def _apply(self, fn, recurse=True):\n        return super()._apply(fn)", []),
        ("self.pe = torch.zeros(4)", "def to(self, *a, **k):\n        return super().to(*a, **k)", []),
        ("self.pe = torch.tensor(2.0)", "", []),  # a 0-dim host tensor may meet a GPU tensor
    ],
)
def test_plain_tensor_attribute_stays_where_it_was_after_the_module_moves(init, extra, expected):
    src = _PLAIN.replace("{init}", init).replace("{extra}", extra)
    assert codes_lines(src) == expected


def test_plain_tensor_attribute_of_a_class_with_a_base_of_another_file_is_unknown():
    src = _PLAIN.replace("class PE(nn.Module):", "from base import Base\n\nclass PE(Base):")
    assert codes_lines(src.replace("{init}", "self.pe = torch.zeros(4)").replace("{extra}", "")) == []


# ---------------------------------------------------------------- builtins that reorder


_REORDERED = """
import torch
DEVS = {"b": "cuda:1", "a": "cuda:0"}
def f():
    got = {k: torch.zeros(2, device=DEVS[k]) for k in DEVS}
    keys = EXPR
    return got[keys[0]] + torch.zeros(2, device="cuda:1")
"""


@pytest.mark.parametrize(
    ("expr", "finds"),
    [
        ("sorted(got)", True),  # keys in sorted order: "a" first, on cuda:0
        ("list(got)", False),  # insertion order: "b" first, on cuda:1
        ("sorted(got, reverse=True)", False),
        ("list(reversed(sorted(got)))", False),
        ("sorted(got, key=len)", False),  # an order Python decides by a key: not known, so no finding
    ],
)
def test_sorted_and_list_of_a_dict_give_its_keys_in_their_order(expr, finds):
    assert codes_lines(_REORDERED.replace("EXPR", expr)) == ([(7, "MP001")] if finds else [])


def test_sorted_of_tensors_of_unknown_order_is_no_crash_and_no_finding():
    src = """
    import torch
    def f():
        ts = [torch.zeros(2, device="cuda:0"), torch.zeros(2, device="cuda:1")]
        first = sorted(ts, key=lambda t: t.sum().item())[0]
        return first + torch.zeros(2, device="cuda:1")
    """
    assert codes_lines(src) == []


# ---------------------------------------------------------------- device arguments torch refuses (MP015)

# What torch 2.13's torch.device() answers for each string (checked against torch itself when this was
# written), except a negative index, which mpcheck leaves alone as a placeholder.
_TORCH_READS = {
    "cuda": True,
    "cuda:0": True,
    "cuda:12": True,
    "cuda:01": False,
    "cuda: 0": False,
    "CUDA:0": False,
    "cuda1": False,
    "gpu": False,
    "gpu:0": False,
    "cuda:-1": True,  # torch refuses it, but it is a rank's placeholder (-1 until set): left alone
    "cuda:": False,
    "cuda:[1, 5]": False,
    "cuda:0,1": False,
    " cuda:0": False,
    "cuda:1 ": False,
}


@pytest.mark.parametrize(("text", "reads"), sorted(_TORCH_READS.items()))
def test_cuda_strings_are_refused_exactly_where_torch_refuses_them(text, reads):
    from mpcheck.devices.not_a_device import refused
    from mpcheck.devices.values import Const

    assert (refused(Const(text)) is None) is reads


@pytest.mark.parametrize("text", ["cpu", "cpu:1", "mps", "meta", "npu:0", "hpu", "xla", "auto"])
def test_other_device_types_are_left_alone(text):
    from mpcheck.devices.not_a_device import refused
    from mpcheck.devices.values import Const

    assert refused(Const(text)) is None


@pytest.mark.parametrize(
    ("text", "meant"),
    [
        ("gpu", "cuda"),
        ("cuda1", "cuda:1"),
        ("cuda: 1", "cuda:1"),
        ("GPU:2", "cuda:2"),
        ("cuda:01", "cuda:1"),
        ("cuda:[1, 5]", None),
        ("cuda:0,1", None),
    ],
)
def test_the_device_a_refused_string_meant(text, meant):
    from mpcheck.devices.not_a_device import meant as guess

    assert guess(text) == meant


def test_a_cuda_device_context_is_refused_where_a_device_goes_but_not_in_a_with():
    src = """
    import torch
    import torch.nn as nn
    dev = torch.cuda.device(1)
    a = nn.Linear(2, 2).to(dev)
    b = torch.zeros(2, device=torch.cuda.device(0))
    with torch.cuda.device(1):
        c = torch.zeros(2, device="cuda")
    with dev:
        d = torch.zeros(2).cuda()
    """
    assert codes_lines(src) == [(5, "MP015"), (6, "MP015")]


# ---------------------------------------------------------------- a command line's defaults (argparse)

_CLI = """
import argparse
import torch
import torch.nn as nn
p = argparse.ArgumentParser()
ARGUMENT
args = p.parse_args(PARSED)
ASSIGN
head = nn.Linear(4, 4).to("cuda:1")
head(torch.randn(2, 4).to(args.dev))
"""


@pytest.mark.parametrize(
    ("argument", "parsed", "assign", "finds"),
    [
        ('p.add_argument("--dev", default="cuda:0")', "", "", True),
        ('p.add_argument("--dev", default="cuda:1")', "", "", False),
        ('p.add_argument("-d", "--dev", default="cuda:0")', "[]", "", True),
        ('p.add_argument("--device", dest="dev", default="cuda:0")', "None", "", True),
        ('g = p.add_argument_group("devices"); g.add_argument("--dev", default="cuda:0")', "", "", True),
        ('p.add_argument("--dev", type=int, default="0")', "", "", True),  # argparse converts a string default
        ('p.add_argument("--dev", type=lambda s: "cuda:" + s, default="0")', "", "", True),  # the lambda run on it
        ('p.add_argument("--dev", type=to_device, default="0")', "", "", False),  # a type not known
        ('p.add_argument("--dev", default="cuda:0")', '["--dev", "cuda:1"]', "", False),  # flags given
        ('p.add_argument("--dev", default="cuda:0")', "", 'args.dev = "cuda:1"', False),  # assigned by the file
        ('p.add_argument("--dev", default="cuda:0"); p.set_defaults(dev="cuda:1")', "", "", False),
    ],
)
def test_a_command_line_is_read_as_its_defaults(argument, parsed, assign, finds):
    src = _CLI.replace("ARGUMENT", argument).replace("PARSED", parsed).replace("ASSIGN", assign)
    assert bool(codes_lines(src)) is finds, codes_lines(src)


@pytest.mark.parametrize("name", ["--gpu", "--local_rank", "--device-id", "--rank"])
def test_a_gpu_or_rank_index_from_the_command_line_stays_unknown(name):
    src = f"""
    import argparse
    import torch
    import torch.nn as nn
    p = argparse.ArgumentParser()
    p.add_argument("{name}", type=int, default=0)
    args = p.parse_args()
    torch.cuda.set_device(1)
    dest = vars(args)
    head = nn.Linear(4, 4).to("cuda:1")
    head(torch.randn(2, 4).cuda(getattr(args, "{name.lstrip("-").replace("-", "_")}")))
    """
    assert codes_lines(src) == []


def test_split_of_a_default_string_gives_the_devices():
    src = """
    import argparse
    import torch
    import torch.nn as nn
    p = argparse.ArgumentParser()
    p.add_argument("--devices", default="cuda:0,cuda:1")
    devices = p.parse_args().devices.split(",")
    a = nn.Linear(4, 4).to(devices[0])
    b = nn.Linear(4, 4).to(devices[1])
    b(a(torch.randn(2, 4, device=devices[0])))
    """
    assert codes_lines(src) == [(10, "MP001")]


# ---------------------------------------------------------------- containers, slices and device comparisons


def test_a_module_dict_moved_moves_its_entries():
    src = """
    import torch
    import torch.nn as nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.parts = nn.ModuleDict({"stem": nn.ModuleDict({"a": nn.Linear(4, 4)}), "head": nn.Linear(4, 4)})
            self.parts["stem"].to("cuda:0")
            self.parts["head"].to("cuda:1")
        def forward(self, x):
            h = self.parts["stem"]["a"](x.to("cuda:0"))
            return self.parts["head"](h)
    """
    assert codes_lines(src) == [(12, "MP001")]


@pytest.mark.parametrize(
    ("sliced", "line"), [("self.blocks[2:]", 14), ("self.blocks[:2]", 13), ("self.blocks[::2]", 13)]
)
def test_a_slice_of_a_module_list_holds_the_same_blocks(sliced, line):
    src = f"""
    import torch
    import torch.nn as nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(4)])
            for b in self.blocks:
                b.to("cuda:0")
            for b in {sliced}:
                b.to("cuda:1")
        def forward(self, x):
            x = self.blocks[0](x.to("cuda:0"))
            return self.blocks[3](x)
    """
    assert codes_lines(src) == [(line, "MP001")]


@pytest.mark.parametrize(
    ("test", "finds"),
    [
        ("x.device != self.device", False),  # moved where it differs: correct
        ("x.device.type != self.device.type", True),  # "cuda" == "cuda": never moved between GPUs
        ("x.device == self.device", True),
    ],
)
def test_device_comparisons_are_decided_where_both_devices_are_known(test, finds):
    src = f"""
    import torch
    import torch.nn as nn
    class Stage(nn.Module):
        def __init__(self, dev):
            super().__init__()
            self.device = torch.device(dev)
            self.net = nn.Linear(4, 4).to(self.device)
        def forward(self, x):
            if {test}:
                x = x.to(self.device)
            return self.net(x)
    a, b = Stage("cuda:0"), Stage("cuda:1")
    b(a(torch.randn(2, 4, device="cuda:0")))
    """
    assert bool(codes_lines(src)) is finds


@pytest.mark.parametrize(
    ("load", "assign", "finds"),
    [
        ('torch.load("w.pt", map_location="cpu")', "assign=True", True),
        ('torch.load("w.pt", map_location="cpu")', "", False),  # values copied into the placed parameters
        ('torch.load("w.pt")', "assign=True", False),  # where it was saved: not known
        ('torch.load("w.pt", map_location="cuda:0")', "assign=True", False),
    ],
)
def test_load_state_dict_with_assign_puts_the_module_where_the_checkpoint_was_loaded(load, assign, finds):
    src = f"""
    import torch
    import torch.nn as nn
    net = nn.Linear(4, 4).to("cuda:0")
    net.load_state_dict({load}, {assign})
    x = torch.randn(2, 4, device="cuda:0")
    net(x)
    """.replace(", )", ")")
    # The module is a plain torch.nn layer here: not split, so no MP007; its call meets a CPU weight.
    got = codes_lines(src)
    assert got == ([(7, "MP001")] if finds else [])


def test_a_comprehension_of_two_fors_is_unrolled_in_order():
    src = """
    import torch
    import torch.nn as nn
    devices = ["cuda:0", "cuda:1"]
    blocks = nn.Sequential(*[nn.Linear(4, 4).to(d) for d in devices for _ in range(2)])
    x = blocks[1](torch.randn(2, 4, device="cuda:0"))
    y = blocks[2](x)
    """
    assert codes_lines(src) == [(7, "MP001")]


def test_a_second_copy_in_a_later_stage_of_a_sequential_is_reported():
    # The first stage's run moves nothing (its input is already there); the third stage's copies its input
    # twice. One fact per move is kept from the first run, except such a second copy.
    src = """
    import torch
    import torch.nn as nn
    class Res(nn.Module):
        def __init__(self, device):
            super().__init__()
            self.device = device
            self.f = nn.Linear(4096, 4096).to(device)
        def forward(self, x):
            h = x.to(self.device)
            return self.f(h) + x.to(self.device)
    class Net(nn.Module):
        def __init__(self, devices=("cuda:0", "cuda:1")):
            super().__init__()
            self.blocks = nn.Sequential(*[Res(d) for d in devices for _ in range(2)])
        def forward(self, x):
            return self.blocks(x.to("cuda:0"))
    """
    assert codes_lines(src) == [(11, "MP011")]


def test_a_list_default_of_the_command_line_gives_its_devices():
    src = """
    import argparse
    import torch
    import torch.nn as nn
    p = argparse.ArgumentParser()
    p.add_argument("--devices", nargs="+", default=["cuda:0", "cuda:1"])
    args = p.parse_args()
    a = nn.Linear(4, 4).to(args.devices[0])
    b = nn.Linear(4, 4).to(args.devices[1])
    b(a(torch.randn(2, 4, device=args.devices[0])))
    """
    assert codes_lines(src) == [(10, "MP001")]


def test_expand_as_view_as_and_reshape_as_read_only_the_other_tensors_shape_from_any_device():
    src = textwrap.dedent(
        """\
        import torch
        real = torch.randn(8, 3, device="cuda:0")
        mix = torch.rand(8, 1).expand_as(real)
        flat = torch.rand(24).view_as(real)
        again = torch.rand(3, 8).reshape_as(real)
        out = mix.cuda(0) * real + flat.cuda(0) + again.cuda(0)
        """
    )
    assert codes_lines(src) == []


def test_isinstance_and_is_tensor_are_decided_only_where_the_type_is_certain():
    # a tuple, a dict and a tensor take their branches as Python would; a list the model holds may be a
    # range or a zip, so `isinstance(x, list)` stays undecided and both branches run
    src = textwrap.dedent(
        """\
        import torch
        head = torch.nn.Linear(4, 4).to("cuda:1")

        def pick(obj):
            if torch.is_tensor(obj):
                return obj
            if isinstance(obj, (dict, list)):
                return torch.zeros(2, 4, device="cuda:1")
            return obj[0]

        head(pick(torch.ones(2, 4, device="cuda:1")))
        head(pick((torch.ones(2, 4, device="cuda:1"),)))
        head(pick({"a": 1}))
        head(pick((torch.ones(2, 4),)))  # a tuple: neither branch, its item on the CPU
        """
    )
    assert codes_lines(src) == [(14, "MP001")]


def test_enumerate_counts_from_its_start_and_parameters_to_vector_needs_one_device():
    src = textwrap.dedent(
        """\
        import torch
        import torch.nn as nn
        from torch.nn.utils import parameters_to_vector

        class Two(nn.Module):
            def __init__(self):
                super().__init__()
                self.stages = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
                for i, stage in enumerate(self.stages, start=1):
                    stage.to(f"cuda:{i}")

            def forward(self, x):
                return self.stages[1](self.stages[0](x.to("cuda:0")).to("cuda:1"))

        model = Two()
        model(torch.randn(2, 4))
        flat = parameters_to_vector(p for p in model.parameters())
        """
    )
    assert codes_lines(src) == [(13, "MP001"), (13, "MP001"), (17, "MP001")]


def test_a_model_only_loaded_into_is_never_moved_but_one_loaded_with_assign_may_be():
    src = textwrap.dedent(
        """\
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(4, 4)

            def forward(self, x):
                return self.body(x.to("cuda:0"))

        def evaluate(state):
            model = Net()
            model.load_state_dict(state{assign})
            model.eval()
            return model(torch.randn(2, 4))
        """
    )
    assert codes_lines(src.replace("{assign}", "")) == [(10, "MP001")]  # copied into CPU parameters
    assert codes_lines(src.replace("{assign}", ", assign=True")) == []  # the state's tensors, wherever they are
