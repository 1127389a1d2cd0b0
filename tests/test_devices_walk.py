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


def test_a_file_analysed_leaves_its_tree_to_reference_counting():
    """The analysis keeps nothing of a file's tree once its findings are made: no memo table holds a node
    (devices/memo.py), and the interpreter's helper cycle is emptied (Interp.close), so the tree goes at
    once, not when the garbage collector would next scan it whole."""
    import gc

    import libcst as cst

    from mpcheck import analysis, parsing
    from mpcheck.devices import memo
    from mpcheck.rules import all_rules

    source = (
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a = nn.Linear(4, 4).to('cuda:0')\n"
        "        self.b = nn.Linear(4, 4).to('cuda:1')\n"
        "    def place(self):\n"
        "        for m in [self.a, self.b]:\n"
        "            m.to('cuda:0')\n"
        "    def forward(self, x):\n"
        "        return self.b(self.a(x))\n"
        "y = Net()(torch.randn(2, 4).to('cuda:0'))\n"
    )
    tree = parsing.parse(source)
    was = gc.isenabled()
    gc.disable()
    try:
        result = analysis.analyze("m.py", source, frozenset(r.code for r in all_rules()), "m", {}, parsed=tree)
        summary = analysis.summarize("m.py", source, "m", parsed=tree)
        assert result.findings and summary is not None and summary["classes"]["Net"]["split"]
        assert all(not table for table in memo._TABLES)
        del tree, result
        assert not [o for o in gc.get_objects() if isinstance(o, cst.Module)]
        # Nor a method's subtree: a class and its methods point at each other (released: memo.made).
        assert not [o for o in gc.get_objects() if isinstance(o, cst.FunctionDef)]
    finally:
        if was:
            gc.enable()


@pytest.mark.parametrize(
    "raw",
    [
        "'cuda:1'",
        '"cuda"',
        "''",
        '""',
        "''''''",
        '"""a\r\nb"""',
        "'''it's'''",
        '"\'"',
        "r'cuda:0'",
        "R'\\d'",
        "u'caf\u00e9'",
        "b'cuda'",
        "rb'x'",
        "'a\\tb'",
        "'\\x41'",
        '"""\nmulti\nline\n"""',
    ],
)
def test_a_string_literal_value_is_what_literal_eval_gives(raw):
    import ast

    from mpcheck.devices.expressions import _string_value

    _string_value.cache_clear()
    assert _string_value(raw) == ast.literal_eval(raw)
    assert type(_string_value(raw)) is type(ast.literal_eval(raw))
