"""Reporters: findings in, text out. Every face (lint, run, dry run) uses them.

text     path:line:col: MP003 message           (default, concise)
full     the same plus the source line, a caret and the suggestion
json     a list of objects
sarif    SARIF 2.1.0 for GitHub code scanning
github   workflow annotation lines (::error file=...)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mpcheck.finding import Finding

FORMATS = ("text", "full", "json", "sarif", "github")


@dataclass
class ReportContext:
    sources: dict[str, str] = field(default_factory=dict)  # path -> text, for `full`
    color: bool = False
    fixed: int = 0  # findings fixed by --fix (for the summary line)
    # code -> (name, severity, summary, full text); SARIF rule metadata
    rule_info: dict[str, tuple[str, str, str, str]] = field(default_factory=dict)
    root: str | None = None  # SARIF paths are made relative to it when possible


def renderer(fmt: str) -> Callable[[list[Finding], ReportContext], str]:
    if fmt == "text":
        from mpcheck.report.text import render_text as fn
    elif fmt == "full":
        from mpcheck.report.text import render_full as fn
    elif fmt == "json":
        from mpcheck.report.json_report import render as fn
    elif fmt == "sarif":
        from mpcheck.report.sarif import render as fn
    elif fmt == "github":
        from mpcheck.report.github import render as fn
    else:
        raise ValueError(f"unknown output format {fmt!r} (choose from {', '.join(FORMATS)})")
    return fn


def render(fmt: str, findings: list[Finding], ctx: ReportContext | None = None) -> str:
    return renderer(fmt)(findings, ctx or ReportContext())
