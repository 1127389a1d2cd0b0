"""The rule catalogue: the documents `rules/MPNNN-kebab-name.md`.

They are read from `mpcheck/_rule_docs` in an installed wheel, else from the
repository's `rules/` folder. `mpcheck rule` and the SARIF reporter take a
rule's text from here; its code, name, severity and summary come from
mpcheck/codes.py, and tests/test_rule_docs.py holds each document's header
equal to that table. Reading is plain text: no libcst, no torch.

Document format (written by whoever writes the rule):

    # MP002: split-model-in-data-parallel
    Severity: error
    One paragraph of summary.
    ## What it does / ## Why is this bad? / ## Example / ## Use instead / ## When it stays silent
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_DOC_NAME = re.compile(r"^(MP\d{3})-([a-z0-9-]+)\.md$")
_TITLE = re.compile(r"^#\s*(MP\d{3})\s*[:\-\u2014]\s*([a-z0-9-]+)\s*$")
_SEVERITY = re.compile(r"^severity\s*:\s*(\w+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class RuleDoc:
    code: str
    name: str
    severity: str
    summary: str
    text: str  # the whole markdown document
    path: Path

    def section(self, title: str) -> str:
        """The body of the `## title` section ('' when absent); matched case-insensitively on its start."""
        out: list[str] = []
        inside = False
        for line in self.text.splitlines():
            if line.startswith("## "):
                inside = line[3:].strip().lower().startswith(title.lower())
                continue
            if inside:
                out.append(line)
        return "\n".join(out).strip()


def docs_dir() -> Path:
    """Where the documents are: the wheel's copy first, else the repository's."""
    here = Path(__file__).resolve().parent
    shipped = here / "_rule_docs"
    if shipped.is_dir():
        return shipped
    return here.parent / "rules"


def parse_doc(path: Path) -> RuleDoc:
    text = path.read_text(encoding="utf-8")
    m = _DOC_NAME.match(path.name)
    code, name = (m.group(1), m.group(2)) if m else ("", "")
    lines = text.splitlines()
    severity = "error"
    summary_lines: list[str] = []
    i = 0
    # Title line (it wins over the file name when both are present).
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines):
        t = _TITLE.match(lines[i].strip())
        if t:
            code, name = t.group(1), t.group(2)
            i += 1
    # Optional Severity line, then the summary paragraph up to the first blank line or section.
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines):
        s = _SEVERITY.match(lines[i].strip())
        if s:
            severity = s.group(1).lower()
            i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    while i < len(lines) and lines[i].strip() and not lines[i].startswith("#"):
        summary_lines.append(lines[i].strip())
        i += 1
    return RuleDoc(
        code=code,
        name=name,
        severity=severity,
        summary=" ".join(summary_lines),
        text=text,
        path=path,
    )


@cache
def load(folder: Path | None = None) -> dict[str, RuleDoc]:
    """Every rule document by code, sorted by code."""
    folder = folder or docs_dir()
    docs: dict[str, RuleDoc] = {}
    if folder.is_dir():
        for path in sorted(folder.glob("MP*.md")):
            if _DOC_NAME.match(path.name):
                doc = parse_doc(path)
                if doc.code:
                    docs[doc.code] = doc
    return dict(sorted(docs.items()))
