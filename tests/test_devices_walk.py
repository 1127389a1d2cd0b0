"""devices/walk.py reads a node's children off its fields and never follows layout (whitespace,
commas, brackets, operator tokens): it must reach every other node libcst's own `children`
reaches, the same objects, over the fixture corpus and over torch's own sources."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import libcst as cst
import pytest

from mpcheck.devices.walk import LAYOUT, children, code_fields, walk

FIXTURES = sorted((Path(__file__).parent / "fixtures").rglob("*.py"))


def _torch_files() -> list[Path]:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(list(spec.submodule_search_locations)[0])
    # Big files of many shapes (classes, comprehensions, match, decorators, type hints).
    names = ["_inductor/ir.py", "nn/modules/module.py", "_tensor.py", "fx/graph.py", "_dynamo/utils.py"]
    return [root / n for n in names if (root / n).is_file()]


def _reference(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Every node under `node` by libcst's own `children`, layout left out."""
    out, todo = [], [node]
    while todo:
        n = todo.pop()
        if not isinstance(n, LAYOUT):
            out.append(n)
        todo.extend(n.children)
    return out


@pytest.mark.parametrize("path", FIXTURES + _torch_files(), ids=lambda p: "/".join(Path(p).parts[-2:]))
def test_the_walk_reaches_every_node_but_the_layout(path: Path) -> None:
    try:
        module = cst.parse_module(path.read_text(encoding="utf-8"))
    except cst.ParserSyntaxError:
        pytest.skip("a fixture that does not parse on purpose")
    fast = list(walk(module))
    assert len(fast) == len({id(n) for n in fast})  # each node once
    assert {id(n) for n in fast} == {id(n) for n in _reference(module)}


def test_layout_fields_are_skipped_and_code_fields_kept() -> None:
    call = cst.parse_expression("f(a, b=1)")
    assert isinstance(call, cst.Call)
    assert code_fields(cst.Call) == ("func", "args")
    assert [type(c).__name__ for c in children(call)] == ["Name", "Arg", "Arg"]
    # An `import a as b`: the alias's name is code (a binding), not layout.
    assert "name" in code_fields(cst.AsName)
    assert not any(issubclass(t, LAYOUT) for t in (cst.Name, cst.AsName, cst.Param, cst.Arg))
