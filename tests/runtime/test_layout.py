"""The runtime's sub-packages import in one direction: checks <- capture <- real | virtual <- commands.

Read from the source by tests/import_graph.py (every import statement, function-level ones
included; imports made only for type checkers, under `if TYPE_CHECKING:`, are left out), so
nothing here needs torch. tests/test_layering.py checks the layers of the whole package.
"""

import pytest
from import_graph import import_graph

# What each sub-package may import of the others.
ALLOWED = {
    "checks": set(),
    "capture": {"checks"},
    "real": {"checks", "capture"},
    "virtual": {"checks", "capture"},
    "commands": {"checks", "capture", "real", "virtual"},
    "core": {"checks"},  # runtime/core.py: 0.1.0's path of DeviceMismatchError, a deprecated re-export
}


def _graph() -> dict[str, set[str]]:
    """{runtime module: the runtime modules it imports}."""
    runtime = {m: imports for m, imports in import_graph().items() if m.split(".")[:2] == ["mpcheck", "runtime"]}
    return {
        m: {i.module for i in imports if not i.typing_only and i.module in runtime} - {m}
        for m, imports in runtime.items()
    }


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
