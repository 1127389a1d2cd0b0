"""Every fenced example of every rule document is a test.

A ```python bad block must give exactly its rule's findings on the lines that
end with `# <- MPNNN`, and nothing else from that rule; a ```python good block
must give none (for codes the linter reports; a run-time-only code's examples
are prose). The documents must also keep the format the catalogue reads, and
their headers (code, name, severity, summary) must say what mpcheck/codes.py says.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpcheck import codes
from mpcheck.analysis import analyze
from mpcheck.config import DEFAULT_GPUS
from mpcheck.rules import rules_by_code

RULES_DIR = Path(__file__).resolve().parent.parent / "rules"
DOCS = sorted(RULES_DIR.glob("MP*.md"))
_FENCE = re.compile(r"^```python (bad|good)\n(.*?)^```\s*$", re.M | re.S)
_HEAD = re.compile(r"^# (MP\d{3}): ([a-z0-9-]+)\nSeverity: (error|warning|info)\n\n([^\n#][^\n]*)\n\n", re.M)
_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## When it stays silent")


def _examples():
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        code = doc.name[:5]
        if code in codes.BY_CODE and codes.LINT not in codes.get(code).faces:
            continue  # a run-time-only code: its examples are not lint tests
        for m in _FENCE.finditer(text):
            line = text[: m.start()].count("\n") + 1
            yield pytest.param(code, m.group(1), m.group(2), id=f"{doc.stem}:{line}:{m.group(1)}")


@pytest.mark.parametrize("code,kind,source", list(_examples()))
def test_doc_example(code, kind, source):  # a crashing rule raises RuleCrash: the test fails
    result = analyze(f"{code}_example.py", source, frozenset({code}), "example", {}, DEFAULT_GPUS)
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
    assert m, "first lines must be `# MPNNN: kebab-name`, `Severity: ...`, blank, the summary line, blank"
    code, name, severity, summary = m.groups()
    assert doc.stem == f"{code}-{name}"
    entry = codes.BY_CODE.get(code)
    assert entry is not None, f"{doc.name}: {code} is not in mpcheck/codes.py"
    assert (name, severity, summary) == (entry.name, entry.severity, entry.summary)
    positions = [text.find(s) for s in _SECTIONS]
    assert all(p > 0 for p in positions), [s for s, p in zip(_SECTIONS, positions) if p < 0]
    assert positions == sorted(positions), "sections out of order"
    assert "```python bad" in text and "```python good" in text
    rule = rules_by_code().get(code)
    if codes.LINT in entry.faces and code != codes.SYNTAX_ERROR.code:  # MP000 is the pipeline's own
        assert rule is not None, f"no rule class for {code}"
        assert (rule.name, rule.severity, rule.summary) == (name, severity, summary)
    else:
        assert rule is None, f"{code} has a lint Rule class but codes.py does not give it the lint face"


def test_every_code_has_a_doc():
    documented = {d.name[:5] for d in DOCS}
    assert set(codes.BY_CODE) <= documented, sorted(set(codes.BY_CODE) - documented)


def test_every_rule_is_in_the_table_with_the_lint_face():
    registry = rules_by_code()
    assert registry, "no rule registered"
    for code in registry:
        assert code in codes.BY_CODE, code
        assert codes.LINT in codes.get(code).faces, code
    lint_codes = {c.code for c in codes.on_face(codes.LINT)} - {codes.SYNTAX_ERROR.code}
    assert set(registry) == lint_codes


def test_a_rule_class_declares_only_its_code(monkeypatch):
    from mpcheck.rules.base import Rule

    made = type("Known", (Rule,), {"code": "MP007"})
    assert (made.name, made.severity, made.summary) == (
        codes.get("MP007").name,
        codes.get("MP007").severity,
        codes.get("MP007").summary,
    )
    with pytest.raises(TypeError, match="not in mpcheck/codes.py"):
        type("Unknown", (Rule,), {"code": "MP999"})
    with pytest.raises(TypeError, match="declare only the code"):
        type("Renamed", (Rule,), {"code": "MP001", "name": "other-name"})
    run_only = codes.Code("MP998", "run-only", "warning", "Seen only at run time.", (codes.RUN,))
    monkeypatch.setitem(codes.BY_CODE, run_only.code, run_only)
    with pytest.raises(TypeError, match="lint face"):
        type("RunOnly", (Rule,), {"code": run_only.code})
