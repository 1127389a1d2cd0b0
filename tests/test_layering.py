"""mpcheck's layers, read from the import graph of its source (tests/import_graph.py):

    cli  ->  faces (lint/, runtime/)  ->  analysis, devices/, rules/, report/, ...  ->  finding, codes

A part imports only the parts ALLOWED lists for it, with every import counted: function-level
ones and those made for type checkers only (a cycle in the types is still a cycle). The linter
imports torch nowhere at module level, not even through another module. The runtime's own
sub-packages (real/ and virtual/ apart) are tests/runtime/test_layout.py's.
"""

from __future__ import annotations

import pytest
from import_graph import Import, import_graph, imports_in

PACKAGE = "__init__"  # the part name of the package `mpcheck` itself
CORE = {"codes", "finding", "syntax", "parsing", "config", "catalogue", "devices", "rules", "analysis", "report"}
# What each part of mpcheck may import of the others (a part imports itself freely). Importing
# the package `mpcheck` itself (for __version__) is every module's right: it is their parent.
ALLOWED: dict[str, set[str]] = {
    PACKAGE: {"runtime"},  # `mpcheck.debug` and `mpcheck.dryrun`, imported on first use
    "codes": set(),
    "finding": {"codes"},
    "syntax": {"codes", "finding"},  # MP000, reported by both the lint pipeline and the analysis
    "parsing": set(),  # libcst's parser, for the analysis and the lint pipeline alike
    "config": set(),
    "catalogue": set(),
    "devices": {"codes", "finding"},  # never a rule: rules ask the device model, not the reverse
    "rules": {"codes", "finding", "devices"},
    "analysis": {"codes", "finding", "syntax", "parsing", "devices", "rules"},
    "report": {"codes", "finding"},
    "lint": CORE,
    "runtime": CORE,
    "cli": CORE | {"lint", "runtime"},
    "__main__": {"cli"},
}
# The linter's parts: importing any of them must not import torch.
LINTER = ALLOWED.keys() - {"runtime"}


def part(module: str) -> str | None:
    """The part of mpcheck a module belongs to (PACKAGE for `mpcheck` itself); None outside mpcheck."""
    parts = module.split(".")
    if parts[0] != "mpcheck":
        return None
    return parts[1] if len(parts) > 1 else PACKAGE


def layer_violations(graph: dict[str, list[Import]]) -> list[tuple[str, str]]:
    """(importer, imported) for every import of one part by another that ALLOWED does not list."""
    wrong = set()
    for module, imports in graph.items():
        mine = part(module)
        assert mine is not None, module
        for imp in imports:
            theirs = part(imp.module)
            if theirs not in (None, PACKAGE, mine) and theirs not in ALLOWED[mine]:
                wrong.add((module, imp.module))
    return sorted(wrong)


def torch_chain(graph: dict[str, list[Import]], module: str) -> list[str] | None:
    """The chain of module-level imports by which importing `module` imports torch, or None."""
    seen: set[str] = set()

    def parents_and_self(name: str) -> list[str]:
        parts = name.split(".")
        return [".".join(parts[: i + 1]) for i in range(len(parts))]

    def walk(name: str, chain: list[str]) -> list[str] | None:
        if name in seen or name not in graph:
            return None
        seen.add(name)
        for imp in graph[name]:
            if not imp.top_level or imp.typing_only:
                continue
            if imp.module.split(".")[0] == "torch":
                return [*chain, name, imp.module]
            for target in parents_and_self(imp.module):
                found = walk(target, [*chain, name])
                if found:
                    return found
        return None

    for start in parents_and_self(module):
        found = walk(start, [])
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def graph() -> dict[str, list[Import]]:
    return import_graph()


def test_every_module_belongs_to_a_known_part(graph):
    assert {part(m) for m in graph} == ALLOWED.keys()
    # known edges, so that an empty or a blind graph cannot pass the tests below
    assert Import("mpcheck.finding", True, False) in graph["mpcheck.report"]
    assert any(i.module.startswith("mpcheck.rules") and not i.top_level for i in graph["mpcheck.analysis"])


def test_parts_import_only_what_their_layer_allows(graph):
    assert layer_violations(graph) == []


def test_codes_and_finding_import_nothing_else_of_mpcheck(graph):
    deps = {
        m: {i.module for i in imports if part(i.module) is not None}
        for m, imports in graph.items()
        if m in ("mpcheck.codes", "mpcheck.finding")
    }
    assert deps["mpcheck.codes"] == set()
    assert deps["mpcheck.finding"] <= {"mpcheck.codes"}


@pytest.mark.parametrize("module", ["mpcheck", "mpcheck.__main__", "mpcheck.cli", "mpcheck.lint.pipeline"])
def test_the_linter_imports_no_torch_at_module_level(graph, module):
    assert torch_chain(graph, module) is None


def test_no_linter_module_imports_torch_at_module_level(graph):
    chains = {m: torch_chain(graph, m) for m in graph if part(m) in LINTER}
    assert {m: c for m, c in chains.items() if c} == {}


# The checks themselves, on made-up modules: a violating import must fail them.
def _graph_of(sources: dict[str, str]) -> dict[str, list[Import]]:
    """A graph of made-up modules ({dotted name: source}; a name ending in `.__init__` is a package)."""
    names = {m.removesuffix(".__init__") for m in sources}
    return {
        m.removesuffix(".__init__"): imports_in(src, m.removesuffix(".__init__"), m.endswith(".__init__"), names)
        for m, src in sources.items()
    }


def test_a_device_model_importing_a_rule_in_a_function_is_caught():
    graph = _graph_of(
        {
            "mpcheck.devices.model": "def f():\n    from ..rules import base\n    return base\n",
            "mpcheck.rules.base": "from mpcheck.devices import model\n",
            "mpcheck.devices.__init__": "",
        }
    )
    assert graph["mpcheck.devices.model"] == [Import("mpcheck.rules.base", False, False)]
    assert layer_violations(graph) == [("mpcheck.devices.model", "mpcheck.rules.base")]


def test_imports_for_type_checkers_count_for_layers_but_not_for_torch():
    graph = _graph_of(
        {
            "mpcheck.codes": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
            "    from mpcheck.finding import Finding\n",
        }
    )
    assert layer_violations(graph) == [("mpcheck.codes", "mpcheck.finding")]
    assert torch_chain(graph, "mpcheck.codes") is None


def test_torch_reached_through_another_module_is_caught():
    graph = _graph_of(
        {
            "mpcheck.cli": "from mpcheck.lint import pipeline\n",
            "mpcheck.lint.__init__": "",
            "mpcheck.lint.pipeline": "from . import helpers\n",
            "mpcheck.lint.helpers": "import os\ntry:\n    import torch.nn\nexcept ImportError:\n    pass\n",
            "mpcheck.lint.lazy": "def f():\n    import torch\n",
        }
    )
    assert torch_chain(graph, "mpcheck.cli") == [
        "mpcheck.cli",
        "mpcheck.lint.pipeline",
        "mpcheck.lint.helpers",
        "torch.nn",
    ]
    assert torch_chain(graph, "mpcheck.lint.lazy") is None


def test_faces_below_the_cli_and_cli_above_all():
    graph = _graph_of(
        {
            "mpcheck.analysis": "from mpcheck.lint.rulemeta import X\n",
            "mpcheck.lint.rulemeta": "from mpcheck.runtime import checks\n",
            "mpcheck.report.sarif": "import mpcheck\nfrom mpcheck.cli import main\n",
            "mpcheck.cli": "from mpcheck.runtime.commands import dryrun\nfrom mpcheck.lint import pipeline\n",
        }
    )
    assert layer_violations(graph) == [
        ("mpcheck.analysis", "mpcheck.lint.rulemeta"),
        ("mpcheck.lint.rulemeta", "mpcheck.runtime"),
        ("mpcheck.report.sarif", "mpcheck.cli"),
    ]
