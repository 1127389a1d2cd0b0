"""The `sarif` format: SARIF 2.1.0 as GitHub code scanning accepts it
(`github/codeql-action/upload-sarif`), with each rule's name, summary and
documentation from the catalogue."""

from __future__ import annotations

import json
import os

import mpcheck
from mpcheck.finding import Finding
from mpcheck.report import ReportContext

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
HELP_URI = "https://github.com/mpcheck/mpcheck/blob/main/rules/{code}-{name}.md"


def _uri(path: str, root: str | None) -> str:
    if root and os.path.isabs(path):
        rel = os.path.relpath(path, root)
        if not rel.startswith(os.pardir):
            path = rel
    elif not os.path.isabs(path):
        path = os.path.normpath(path)
    return path.replace(os.sep, "/")


def render(findings: list[Finding], ctx: ReportContext) -> str:
    codes = sorted({f.code for f in findings} | set(ctx.rule_info))
    index = {code: i for i, code in enumerate(codes)}
    names = {f.code: f.name for f in findings}
    severities = {f.code: f.severity for f in findings}
    rules = []
    for code in codes:
        name, severity, summary, text = ctx.rule_info.get(
            code, (names.get(code, code), severities.get(code, "error"), "", "")
        )
        rule = {
            "id": code,
            "name": name,
            "shortDescription": {"text": summary or name},
            "defaultConfiguration": {"level": _LEVEL.get(severity, "error")},
            "helpUri": HELP_URI.format(code=code, name=name),
            "properties": {"tags": ["model-parallel", "pytorch"]},
        }
        if text:
            rule["fullDescription"] = {"text": summary or name}
            rule["help"] = {"text": text, "markdown": text}
        rules.append(rule)
    results = []
    for f in findings:
        results.append(
            {
                "ruleId": f.code,
                "ruleIndex": index[f.code],
                "level": _LEVEL.get(f.severity, "error"),
                "message": {"text": f.message},  # it ends with the advice: no suggestion appended
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": _uri(f.path, ctx.root), "uriBaseId": "%SRCROOT%"},
                            "region": {
                                "startLine": f.line,
                                "startColumn": f.column,
                                "endLine": f.end_line or f.line,
                                "endColumn": f.end_column or f.column,
                            },
                        }
                    }
                ],
            }
        )
    doc = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "mpcheck",
                        "version": mpcheck.__version__,
                        "semanticVersion": mpcheck.__version__,
                        "informationUri": "https://github.com/mpcheck/mpcheck",
                        "rules": rules,
                    }
                },
                # Our columns count characters (code points), not UTF-16 units.
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
    return json.dumps(doc, indent=2) + "\n"
