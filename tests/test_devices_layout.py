"""The shape of mpcheck/devices: the torch API table has one handler per call,
whatever the order of its entries; the interpreter's modules share no private
names and import nothing lazily; the device model imports no rule."""

from __future__ import annotations

import ast
import pathlib

import pytest

from mpcheck.devices import library, torchapi
from mpcheck.devices.library import EXACT, FAMILIES, families_for, handler_for

DEVICES = pathlib.Path(library.__file__).parent

# Names of every kind the table knows, and a few it does not.
SAMPLE_NAMES = sorted(
    set(EXACT)
    | {f"torch.{n}" for n in ("relu", "cat", "matmul", "Tensor", "Generator")}
    | {f"torch.nn.{n}" for n in torchapi.PARAMETERLESS | torchapi.PARAMETERED | {"MSELoss", "CrossEntropyLoss"}}
    | {f"torch.nn.functional.{n}" for n in torchapi.LOSS_FUNCTIONS | {"relu", "linear"}}
    | {f"torch.linalg.{n}" for n in ("solve", "norm")}
    | set(torchapi.BUILTINS)
    | {f"fairscale.nn.{n}" for n in torchapi.PIPELINE_WRAPPERS}
    | {f"torch.distributed.pipeline.sync.{n}" for n in torchapi.PIPELINE_WRAPPERS}
    | {f"accelerate.{n}" for n in torchapi.DISPATCHERS | {"cpu_offload", "add_hook_to_module", "AlignDevicesHook"}}
    | {"transformers.AutoModel.from_pretrained", "mylib.Block", "mylib.make_block", "torch.cuda.synchronize"}
)
KWARG_SHAPES = [{}, {"device": None}, {"device_map": None}, {"device": None, "device_map": None}]


@pytest.mark.parametrize("kwargs", KWARG_SHAPES, ids=lambda k: "+".join(k) or "no-kwargs")
def test_at_most_one_family_accepts_a_call(kwargs):
    for q in SAMPLE_NAMES:
        got = families_for(q, kwargs)
        assert len(got) <= 1, f"{q}({', '.join(kwargs)}) is accepted by {[f.name for f in got]}"


def test_an_exact_entry_overrides_its_family():
    # torch.zeros is a torch op by its shape, and a factory by its entry: the entry wins.
    assert [f.name for f in families_for("torch.zeros", {})] == ["torch op on tensors"]
    assert handler_for("torch.zeros", "zeros", {}) is EXACT["torch.zeros"]
    assert handler_for("torch.nn.Sequential", "Sequential", {}) is EXACT["torch.nn.Sequential"]


def test_calls_by_shape_reach_the_family_they_name():
    def family(q, **kwargs):
        got = families_for(q, kwargs)
        return got[0].name if got else None

    assert family("fairscale.nn.Pipe") == FAMILIES[0].name
    assert family("transformers.AutoModel.from_pretrained", device_map=None).startswith("dispatched")
    assert family("accelerate.cpu_offload").startswith("device hook")
    assert family("torch.nn.Linear", device=None).startswith("module class")
    assert family("mylib.Block", device=None).startswith("module class")
    assert family("mylib.Block") is None
    assert family("torch.cuda.synchronize") is None


def test_no_reexport_prefix_shadows_another():
    prefixes = [old for old, _ in torchapi.REEXPORT_PREFIXES]
    for a in prefixes:
        for b in prefixes:
            assert a == b or not b.startswith(a), (a, b)


def _mpcheck_imports(path: pathlib.Path):
    """(line, module, names, at module level or under `if TYPE_CHECKING:`) of each import of mpcheck."""
    tree = ast.parse(path.read_text())
    allowed = {id(n) for n in tree.body}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            allowed |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mpcheck"):
            yield node.lineno, node.module, [a.name for a in node.names], id(node) in allowed
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("mpcheck"):
                    yield node.lineno, a.name, [], id(node) in allowed


@pytest.mark.parametrize("path", sorted(DEVICES.glob("*.py")), ids=lambda p: p.name)
def test_devices_modules_share_no_private_names_and_import_no_rule(path):
    for line, module, names, at_top in _mpcheck_imports(path):
        assert at_top, f"{path.name}:{line} imports {module} inside a function"
        assert not module.startswith("mpcheck.rules"), f"{path.name}:{line} imports a rule module ({module})"
        private = [n for n in names if n.startswith("_")]
        assert not private, f"{path.name}:{line} imports private names {private} from {module}"
