"""FileContext: what a rule sees of one file.

One parse per file. Positions are computed only when a rule reports something
(libcst's PositionProvider over the same tree, so node identity is kept), or,
for the few nodes `place` names, alone (rules/spans.py), and the device model
only when a rule asks for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

import libcst as cst
from libcst.metadata import CodeRange, PositionProvider

from mpcheck.devices.events import EntryPointRun, IndexlessPlacement
from mpcheck.devices.model import DeviceModel
from mpcheck.devices.names import import_bindings
from mpcheck.devices.walk import walk
from mpcheck.rules.spans import positions_of


def positions(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    """libcst's PositionProvider positions of every node of `module`, as
    `MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)` gives them,
    a third cheaper: the wrapper also walks the whole tree once for the batchable providers
    asked with it (none here; torch's `_inductor/ir.py`: 1.7 s -> 1.1 s). `_gen_impl` is the
    method a provider implements; it fills `_computed`, which `_gen` would return."""
    provider = PositionProvider()
    provider._computed = {}
    provider._gen_impl(module)
    return provider._computed  # type: ignore[return-value]  # CodeRanges only: none is lazy


class FileContext:
    def __init__(
        self,
        path: str,
        source: str,
        module: cst.Module,
        modname: str = "",
        project: Mapping[str, dict[str, Any]] | None = None,
        gpu_count: int | None = None,
        callers: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.path = path
        self.callers = callers  # calls of this file's functions in other linted files (devices/callers.py)
        self.source = source
        self.module = module
        self.modname = modname
        self.project = dict(project or {})
        self.gpu_count = gpu_count  # the GPU count the device model assumes (None: unknown)
        # Positions of the nodes `place` was asked for (None: not of this tree), while the whole
        # file's are not computed: a file without findings needs only its outgoing calls' lines.
        self._placed: dict[cst.CSTNode, CodeRange | None] = {}

    @cached_property
    def model(self) -> DeviceModel:
        return DeviceModel(self.module, self.source, self.modname, self.project, self.gpu_count, self.callers)

    @cached_property
    def imported_names(self) -> frozenset[str]:
        """The names the module's top-level imports bind (`torch`, `F`, `Net`): what is a module
        or a class, not a variable, at the root of an expression (`torch.zeros(8)`)."""
        return frozenset(
            local
            for stmt in self.module.body
            if isinstance(stmt, cst.SimpleStatementLine)
            for small in stmt.body
            if isinstance(small, (cst.Import, cst.ImportFrom))
            for local, _ in import_bindings(small, self.modname)
        )

    @property
    def model_built(self) -> bool:
        """Whether a rule asked for the device model (it is built on first use)."""
        return "model" in self.__dict__

    @property
    def used_modules(self) -> list[str]:
        """The project modules whose summaries the device model read; none when no rule asked for the model."""
        return self.model.used_modules if self.model_built else []

    @cached_property
    def _positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        return positions(self.module)

    def place(self, nodes: Sequence[cst.CSTNode]) -> None:
        """Compute the positions of `nodes` for `span` and `line` in one pass, without those of the
        whole file (rules/spans.py: a fifth of the cost) when they are not computed already."""
        if "_positions" in self.__dict__:
            return
        todo = [n for n in dict.fromkeys(nodes) if n not in self._placed]
        if todo:
            found = positions_of(self.module, todo)
            self._placed.update({n: found.get(n) for n in todo})

    def span(self, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int]]:
        """((line, col), (end_line, end_col)), 1-based lines and columns."""
        r = self._placed[node] if node in self._placed else self._positions.get(node)
        if r is None:
            return (1, 1), (1, 1)
        return (r.start.line, r.start.column + 1), (r.end.line, r.end.column + 1)

    def line(self, node: cst.CSTNode) -> int:
        return self.span(node)[0][0]

    def owns(self, node: cst.CSTNode) -> bool:
        """Is `node` of this file's tree (not of an imported module's summary)?"""
        return node in self._positions

    @cached_property
    def tensors_placed_after_set_device(self) -> dict[cst.CSTNode, IndexlessPlacement]:
        """The index-less placements of a tensor (`batch.cuda()`, `device="cuda"`) made after a
        `set_device(k)` with k known, outside `with torch.cuda.device`, by node: they land on cuda:k."""
        return {
            p.node: p
            for run in self.model.facts(EntryPointRun)
            for p in run.placements
            if p.of_tensor and not p.under_device_context and p.dev is not None and p.dev.startswith("cuda:")
        }

    @cached_property
    def class_lines(self) -> list[tuple[int, int]]:
        """(first, last) line of every class of the file, nested ones included."""
        # (walk, not a CSTVisitor, which rebuilds every node with libcst's checks on: program.is_generator)
        found = []
        for node in walk(self.module):
            if isinstance(node, cst.ClassDef):
                (start, _), (end, _) = self.span(node)
                found.append((start, end))
        return sorted(found)

    @cached_property
    def function_spans(self) -> list[tuple[int, int, str]]:
        """(first, last line, name) of every function of the file, nested ones included, in order."""
        found = []
        for node in walk(self.module):
            if isinstance(node, cst.FunctionDef):
                (start, _), (end, _) = self.span(node)
                found.append((start, end, node.name.value))
        return sorted(found)

    def function_name(self, node: cst.CSTNode) -> str:
        """The name of the innermost function of this file around `node` ("" outside any)."""
        if not self.owns(node):
            return ""
        line = self.line(node)
        inside = [(start, name) for start, end, name in self.function_spans if start <= line <= end]
        return max(inside)[1] if inside else ""

    def code(self, node: cst.CSTNode) -> str:
        """The source text of an expression (one line, for messages)."""
        text = self.module.code_for_node(node).strip()
        text = " ".join(text.split())
        return text if len(text) <= 60 else text[:57] + "..."
