"""Which names a file imports only to name a type: the summaries it need not wait for.

The device model reads an imported name's summary where the file runs the name: calls it,
subclasses it, reads an attribute off it, passes it on. A name that appears only where Python
never runs it as a value the model follows (an annotation, the class tested by `isinstance` or
`issubclass`, an `except` clause) tells the model nothing, so summarising its module is time
spent for no fact: torch's `_inductor/ir.py` imports its code generators and its graph for
annotations and `isinstance` tests, and summarising them was a third of its run.

`ast`, not libcst: this runs before the file's own parse (in the main process, while the
parse runs in a forked one), and Python's own parser is ten times faster.
"""

from __future__ import annotations

import ast

_TYPE_TESTS = frozenset({"isinstance", "issubclass"})


def type_only_names(source: str, imported: frozenset[str]) -> frozenset[str]:
    """Of `imported` (local names bound by imports), those whose every use in `source` is in an
    annotation, a type test's class argument or an `except` clause (or that are never used).
    Empty where the text does not parse: every name then counts as used."""
    if not imported:
        return frozenset()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    finder = _RunUses(imported)
    finder.visit(tree)
    return imported - finder.run


class _RunUses(ast.NodeVisitor):
    """Collects the names of `imported` read anywhere a value is computed from them."""

    def __init__(self, imported: frozenset[str]) -> None:
        self.imported = imported
        self.run: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.imported and not isinstance(node.ctx, ast.Store):
            self.run.add(node.id)

    # Annotations: skipped (their names are never looked up by the device model).
    def visit_arg(self, node: ast.arg) -> None:
        return

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        args = node.args
        for default in (*args.defaults, *(d for d in args.kw_defaults if d is not None)):
            self.visit(default)
        for statement in node.body:
            self.visit(statement)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for default in (*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)):
            self.visit(default)
        self.visit(node.body)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        for statement in node.body:
            self.visit(statement)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in _TYPE_TESTS and len(node.args) == 2:
            self.visit(node.args[0])  # the value tested is run; the class (or tuple of them) only compared
            tested = node.args[1]
            for cls in tested.elts if isinstance(tested, ast.Tuple) else (tested,):
                if not isinstance(cls, ast.Name):
                    self.visit(cls)
            for keyword in node.keywords:
                self.visit(keyword)
            return
        self.generic_visit(node)
