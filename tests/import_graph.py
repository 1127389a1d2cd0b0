"""mpcheck's import graph, read from the source with `ast` (nothing is imported, so no torch is needed).

Every import statement counts, function-level ones included; relative imports are resolved;
`from a import b` names the module `a.b` when that is a module, else `a`. Each import says
whether it runs when its module is imported (module level) and whether it sits under
`if TYPE_CHECKING:` (for type checkers only). Used by tests/test_layering.py (the whole package)
and tests/runtime/test_layout.py (the runtime's sub-packages).
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Container
from dataclasses import dataclass

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "mpcheck"


@dataclass(frozen=True)
class Import:
    module: str  # dotted name of what is imported
    top_level: bool  # runs when the importing module is imported (not inside a function)
    typing_only: bool  # under `if TYPE_CHECKING:`


def module_files(package: pathlib.Path = PACKAGE) -> dict[str, pathlib.Path]:
    """{dotted module name: file} for every module of `package` (a package is named by its __init__)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in(source: str, module: str, is_package: bool, known: Container[str]) -> list[Import]:
    """The imports of `module` (whose text is `source`); `known` holds the module names that
    `from a import b` may resolve `a.b` to."""
    found: list[Import] = []

    def resolve(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        # `from . import x` in a package's __init__ is relative to the package itself.
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(node: ast.AST, top_level: bool, typing_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, top_level, True)
            for child in node.orelse:
                visit(child, top_level, typing_only)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, top_level, typing_only) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append(Import(sub if sub in known else base, top_level, typing_only))
        inner = top_level and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner, typing_only)

    visit(ast.parse(source), True, False)
    return found


def import_graph(package: pathlib.Path = PACKAGE) -> dict[str, list[Import]]:
    """{module: its imports} for every module of `package`."""
    files = module_files(package)
    return {
        name: imports_in(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", files)
        for name, path in files.items()
    }
