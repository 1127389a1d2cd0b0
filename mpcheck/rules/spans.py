"""The positions of a few nodes of a libcst tree, exactly as libcst's PositionProvider gives them,
for about the cost of generating the file's code once.

PositionProvider records a CodeRange for every node and recounts lines and columns at every token:
on torch's `_inductor/ir.py` that is 0.98 s, more than the parse (0.68 s), where the plain code
generation is 0.19 s. A file without findings still needs the lines of the calls it hands to other
files (analysis._outgoing_calls): a few nodes. So this state is libcst's plain CodegenState that
counts lines and columns only when one of those nodes starts or ends (the tokens since the last
count, with PositionProvider's own arithmetic), and records ranges for those nodes alone, with
PositionProvider's rules: the syntactic range when the node records one (hoisted from the
`start_node`/`end_node` it names, which are then followed too), else the whitespace-inclusive one.
tests/test_positions.py checks every node of real files against PositionProvider.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst._position import CodePosition, CodeRange
from libcst.metadata.position_provider import NEWLINE_RE


class _Counting(CodegenState):
    """CodegenState (plain code generation) that places the nodes in `wanted` as PositionProvider does."""

    def __init__(self, module: cst.Module, wanted: Collection[cst.CSTNode]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.wanted = {id(n) for n in wanted}
        self.found: dict[int, CodeRange] = {}
        self._starts: list[CodePosition] = []  # whitespace-inclusive starts of the wanted nodes open now
        self._counted = 0  # tokens counted into line and column
        self._line = 1
        self._column = 0

    def _position(self) -> CodePosition:
        tokens = self.tokens
        for i in range(self._counted, len(tokens)):  # PositionProvider's _update_position, token by token
            segments = NEWLINE_RE.split(tokens[i])
            if len(segments) == 1:
                self._column += len(tokens[i])
            else:
                self._line += len(segments) - 1
                self._column = len(segments[-1])
        self._counted = len(tokens)
        return CodePosition(self._line, self._column)

    def pop_trailing_newline(self) -> None:
        # PositionProvider counted the token before it was taken back: so do we.
        self._position()
        super().pop_trailing_newline()
        self._counted = len(self.tokens)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            self._starts.append(self._position())

    def after_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            start = self._starts.pop()
            if id(node) not in self.found:  # the syntactic range, when the node recorded one, stays
                self.found[id(node)] = CodeRange(start, self._position())

    @contextmanager
    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> Iterator[None]:
        if id(node) not in self.wanted:
            yield
            return
        # The nodes its range is hoisted from are generated inside: follow them from here.
        for other in (start_node, end_node):
            if other is not None:
                self.wanted.add(id(other))
        start = self._position()
        try:
            yield
        finally:
            end = self._position()
            if start_node is not None:
                start = self.found[id(start_node)].start
            if end_node is not None:
                end = self.found[id(end_node)].end
            self.found[id(node)] = CodeRange(start, end)


def positions_of(module: cst.Module, nodes: Collection[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    """The PositionProvider range of each of `nodes` that is part of `module` (others are left out)."""
    state = _Counting(module, nodes)
    module._codegen(state)
    by_id: dict[int, Any] = {id(n): n for n in nodes}
    return {by_id[i]: r for i, r in state.found.items() if i in by_id}
