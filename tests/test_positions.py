"""FileContext's positions (rules/context.py positions) are libcst's PositionProvider's, node for node."""

from __future__ import annotations

import textwrap

from libcst.metadata import MetadataWrapper, PositionProvider

from mpcheck import parsing
from mpcheck.rules.context import positions


def test_positions_are_those_of_the_metadata_wrapper():
    text = textwrap.dedent(
        """\
        # a comment
        import torch

        @decorated
        class Net(torch.nn.Module):
            def forward(self, x):
                y = (x +
                     1); z = y.to(
                    "cuda:1")
                return z  # done
        """
    )
    module = parsing.parse(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    got = positions(module)
    assert dict(expected) == dict(got) and len(got) > 40


def _files() -> list[str]:
    """Real files with every kind of node: mpcheck's own, the fixtures, and a few of torch's when installed."""
    import glob
    import os

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = [os.path.join(here, "mpcheck", p) for p in ("analysis.py", "devices/interp.py", "rules/spans.py")]
    found += sorted(glob.glob(os.path.join(here, "tests", "fixtures", "cases", "*.py")))[::4]  # a quarter: time
    try:
        import torch

        base = os.path.dirname(torch.__file__)
        found += [os.path.join(base, p) for p in ("nn/modules/module.py", "_tensor.py", "nn/parallel/comm.py")]
    except ImportError:
        pass
    return [p for p in found if os.path.isfile(p)]


def test_positions_of_a_few_nodes_are_those_of_every_node():
    """rules/spans.py places any set of nodes as PositionProvider does: every node of each file,
    asked for in small groups (a group's nodes hoist their ranges from nodes not asked for)."""
    from mpcheck.rules.spans import positions_of

    files = _files()
    assert len(files) > 20
    for path in files:
        with open(path, encoding="utf-8") as fh:
            module = parsing.parse(fh.read())
        expected = positions(module)
        nodes = list(expected)
        for group in (nodes[i::7] for i in range(7)):
            got = positions_of(module, group)
            assert got == {n: expected[n] for n in group}, path


def test_positions_of_nodes_of_another_tree_are_left_out():
    from mpcheck.rules.spans import positions_of

    one, other = parsing.parse("x = f(1)\n"), parsing.parse("y = g(2)\n")
    call = other.body[0].body[0].value
    assert positions_of(one, [call]) == {}
    assert positions_of(other, [call]) == {call: positions(other)[call]}


def test_positions_of_odd_files():
    """No trailing newline (the module takes its last token back), nothing but comments, nothing."""
    from mpcheck.rules.spans import positions_of

    for text in ("x = f(\n  1)", "class A:\n    def f(self): return g(1)", "# only\n", "", "if x:\n    pass\n# end"):
        module = parsing.parse(text)
        expected = positions(module)
        for node in expected:
            assert positions_of(module, [node]) == {node: expected[node]}, (text, node)


def test_placed_nodes_need_no_positions_of_the_whole_file():
    """FileContext.place: the lines of the calls handed to other files (analysis._outgoing_calls)
    without positioning every node; the same spans, (1, 1) for a node of another tree as before."""
    from mpcheck.rules.context import FileContext

    text = "import torch\n\n\ndef f(x):\n    return g(\n        x.to('cuda:1'))\n"
    module = parsing.parse(text)
    call = module.body[1].body.body[0].body[0].value
    stranger = parsing.parse("h(1)\n").body[0].body[0].value
    ctx = FileContext("f.py", text, module)
    ctx.place([call, stranger])
    assert ctx.span(call) == ((5, 12), (6, 24)) and ctx.line(stranger) == 1
    assert "_positions" not in ctx.__dict__
    assert ctx.span(call) == FileContext("f.py", text, module).span(call)
