"""The runtime's sub-packages import in one direction: checks <- capture <- real | virtual <- commands.

Read from the source (every import statement, function-level ones included; imports made only
for type checkers, under `if TYPE_CHECKING:`, are left out), so nothing here needs torch.
"""

import ast
import pathlib

import pytest

RUNTIME = pathlib.Path(__file__).resolve().parents[2] / "mpcheck" / "runtime"
# What each sub-package may import of the others.
ALLOWED = {
    "checks": set(),
    "capture": {"checks"},
    "real": {"checks", "capture"},
    "virtual": {"checks", "capture"},
    "commands": {"checks", "capture", "real", "virtual"},
}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in RUNTIME.rglob("*.py"):
        parts = path.relative_to(RUNTIME.parents[1]).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.AST, known: dict[str, pathlib.Path]) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in known}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imported(ast.parse(path.read_text()), known) - {name} for name, path in known.items()}


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else None


def test_the_graph_sees_every_sub_package():
    graph = _graph()
    assert {_package(m) for m in graph} - {None} == set(ALLOWED)
    # a known edge, so that an empty graph cannot pass the tests below
    assert "mpcheck.runtime.checks.checker" in graph["mpcheck.runtime.capture.session"]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_sub_packages_import_only_those_below_them(package):
    wrong = sorted(
        (m, d)
        for m, deps in _graph().items()
        if _package(m) == package
        for d in deps
        if _package(d) not in (None, package) and _package(d) not in ALLOWED[package]
    )
    assert wrong == []


def test_no_import_cycle_in_the_runtime():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep) :] + [dep])
            elif dep not in state:
                walk(dep, path)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [])
    assert cycles == []
