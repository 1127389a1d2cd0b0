"""The `json` format: a list of objects, one per finding, sorted like the text output."""

from __future__ import annotations

import json

from mpcheck.finding import Finding
from mpcheck.report import ReportContext


def render(findings: list[Finding], ctx: ReportContext) -> str:
    return json.dumps([f.to_dict() for f in findings], indent=2) + "\n"
