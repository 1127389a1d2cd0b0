"""Every fenced example of every rule document is a test.

A ```python bad block must give exactly its rule's findings on the lines that
end with `# <- MPNNN`, and nothing else from that rule; a ```python good block
must give none. The documents must also keep the format the catalogue reads.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpcheck.analysis import analyze
from mpcheck.rules import rules_by_code

RULES_DIR = Path(__file__).resolve().parent.parent / "rules"
DOCS = sorted(RULES_DIR.glob("MP*.md"))
_FENCE = re.compile(r"^```python (bad|good)\n(.*?)^```\s*$", re.M | re.S)
_HEAD = re.compile(r"^# (MP\d{3}): ([a-z0-9-]+)\nSeverity: (error|warning|info)\n\n", re.M)
_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## When it stays silent")


def _examples():
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        code = doc.name[:5]
        for i, m in enumerate(_FENCE.finditer(text)):
            line = text[: m.start()].count("\n") + 1
            yield pytest.param(code, m.group(1), m.group(2), id=f"{doc.stem}:{line}:{m.group(1)}")


@pytest.mark.parametrize("code,kind,source", list(_examples()))
def test_doc_example(code, kind, source, monkeypatch):
    monkeypatch.setenv("MPCHECK_DEBUG", "1")  # a crash in a rule fails the test instead of hiding
    result = analyze(f"{code}_example.py", source, frozenset({code}), "example", {})
    got = sorted(f.line for f in result.findings if f.code == code)
    marked = [i for i, line in enumerate(source.splitlines(), 1) if line.rstrip().endswith(f"# <- {code}")]
    if kind == "bad":
        assert marked, "a bad example must mark its flagged line with `# <- MPNNN`"
        assert got == marked, [f"{f.line}: {f.message}" for f in result.findings]
    else:
        assert not marked, "a good example carries no marker"
        assert got == [], [f"{f.line}: {f.message}" for f in result.findings]


@pytest.mark.parametrize("doc", DOCS, ids=[d.stem for d in DOCS])
def test_doc_format(doc):
    text = doc.read_text(encoding="utf-8")
    m = _HEAD.match(text)
    assert m, "first lines must be `# MPNNN: kebab-name`, `Severity: ...`, blank"
    code, name, severity = m.groups()
    assert doc.stem == f"{code}-{name}"
    positions = [text.find(s) for s in _SECTIONS]
    assert all(p > 0 for p in positions), [s for s, p in zip(_SECTIONS, positions) if p < 0]
    assert positions == sorted(positions), "sections out of order"
    assert "```python bad" in text and "```python good" in text
    rule = rules_by_code().get(code)
    if code != "MP000":
        assert rule is not None, f"no rule class for {code}"
        assert (rule.name, rule.severity) == (name, severity)


def test_every_rule_has_a_doc():
    documented = {d.name[:5] for d in DOCS}
    assert set(rules_by_code()) <= documented
