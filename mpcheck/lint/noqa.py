"""Suppression comments, as flake8 and ruff read them.

- `# noqa: MP003` or `# noqa: MP001,MP003` on the reported line, or on the first
  or last line of the (multi-line) statement that contains it; a bare `# noqa`
  suppresses every code there. Codes of other tools in the same comment
  (`# noqa: E501, MP003`) are allowed.
- `# mpcheck: noqa` on a line of its own anywhere in a file skips the whole file;
  `# mpcheck: noqa: MP003` skips only those codes in it.

Statement spans come from `ast` (the same spans as libcst's, at a tenth of the
cost) and are computed only for a file that has findings and a `noqa` in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mpcheck.finding import Finding

_CODE_LIST = r"[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*"
_LINE_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>" + _CODE_LIST + r"))?", re.IGNORECASE)
_FILE_NOQA = re.compile(
    r"^[ \t]*#[ \t]*mpcheck:[ \t]*noqa(?::[ \t]*(?P<codes>" + _CODE_LIST + r"))?[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)

ALL = "all"


def _codes(text: str | None):
    if text is None:
        return ALL
    return frozenset(c.upper() for c in re.split(r"[\s,]+", text) if c)


def file_noqa(source: str):
    """None, ALL, or the frozenset of codes that `# mpcheck: noqa` lines suppress in the whole file."""
    if "noqa" not in source:
        return None
    result: set[str] = set()
    for m in _FILE_NOQA.finditer(source):
        codes = _codes(m.group("codes"))
        if codes == ALL:
            return ALL
        result |= codes
    return frozenset(result) if result else None


def line_noqa(line: str):
    """None, ALL, or the codes a `# noqa` comment on this line suppresses."""
    if "#" not in line:
        return None
    m = _LINE_NOQA.search(line)
    if m is None:
        return None
    return _codes(m.group("codes"))


def _suppresses(line: str, code: str) -> bool:
    codes = line_noqa(line)
    return codes is not None and (codes == ALL or code in codes)


def statement_spans(source: str) -> list[tuple[int, int]] | None:
    """(first line, last line) of every simple statement and of every compound
    statement's header (decorators to the line before its body), or None when
    `ast` cannot parse the file."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    spans: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        first = node.lineno
        decorators = getattr(node, "decorator_list", None)
        if decorators:
            first = min(first, *(d.lineno for d in decorators))
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            last = max(first, body[0].lineno - 1) if body[0].lineno > node.lineno else node.lineno
        else:
            last = node.end_lineno or node.lineno
        spans.append((first, last))
    return spans


def _enclosing(spans: list[tuple[int, int]], line: int) -> tuple[int, int] | None:
    best = None
    for first, last in spans:
        if first <= line <= last and (best is None or last - first < best[1] - best[0]):
            best = (first, last)
    return best


def filter_findings(source: str, findings: Iterable[Finding]) -> list[Finding]:
    """The findings that no noqa comment suppresses."""
    findings = list(findings)
    if not findings or "noqa" not in source:
        return findings
    whole = file_noqa(source)
    if whole == ALL:
        return []
    lines = source.splitlines()
    spans: list[tuple[int, int]] | None = None
    kept: list[Finding] = []
    for f in findings:
        if whole and f.code in whole:
            continue
        if 1 <= f.line <= len(lines) and _suppresses(lines[f.line - 1], f.code):
            continue
        if spans is None:
            spans = statement_spans(source) or []
        span = _enclosing(spans, f.line)
        if span is not None:
            first, last = span
            if any(1 <= n <= len(lines) and _suppresses(lines[n - 1], f.code) for n in {first, last}):
                continue
        kept.append(f)
    return kept
