"""The `github` format: workflow commands that GitHub Actions shows as annotations
on the pull request (`::error file=...,line=...::message`)."""

from __future__ import annotations

from mpcheck.finding import Finding
from mpcheck.report import ReportContext

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(findings: list[Finding], ctx: ReportContext) -> str:
    lines = []
    for f in findings:
        props = [
            f"file={_escape_property(f.path)}",
            f"line={f.line}",
            f"col={f.column}",
            f"endLine={f.end_line or f.line}",
            f"endColumn={f.end_column or f.column}",
            f"title={_escape_property(f'{f.code} ({f.name})')}",
        ]
        # The message already ends with the advice (as in the text format): the
        # suggestion is not appended a second time.
        lines.append(f"::{_LEVEL.get(f.severity, 'error')} {','.join(props)}::{_escape_data(f'{f.code} {f.message}')}")
    return "\n".join(lines) + ("\n" if lines else "")
