"""The seam between the lint pipeline (files, cache, processes) and the analysis
(device model + rules). The pipeline calls only these three functions; all
three are pure functions of their arguments, so results can be cached and run
in any process.

    files -> read -> pre-filter -> imports() -> summarize() (files others import)
          -> analyze() per file -> findings -> noqa -> reporters
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from mpcheck.finding import Finding


@dataclass
class FileResult:
    findings: list[Finding]
    # Dotted names of the project modules whose summaries this result used:
    # the cache must drop this file's result when any of them changes.
    used_modules: list[str] = field(default_factory=list)


def imports(source: str, modname: str) -> list[str]:
    """Dotted names of the modules `source` imports (relative imports resolved
    against `modname`). Cheap: no libcst parse."""
    raise NotImplementedError


def summarize(path: str, source: str, modname: str) -> dict | None:
    """A JSON-able summary of what other files may import from this one
    (classes and their placement, helper functions and what they return).
    None when the file does not parse."""
    raise NotImplementedError


def analyze(
    path: str,
    source: str,
    codes: frozenset[str],
    modname: str,
    project: Mapping[str, dict],
) -> FileResult:
    """Run the rules whose codes are in `codes` on one file. `project` maps
    dotted module names to their summaries. Never raises on bad input: a file
    that does not parse gives one MP000 finding."""
    raise NotImplementedError
