"""`--statistics`: how many findings of each code, most frequent first, as a
table (the human formats) or as JSON (the machine formats)."""

from __future__ import annotations

import json
from collections import Counter

from mpcheck.finding import Finding


def _rows(findings: list[Finding]) -> list[tuple[str, str, int, bool]]:
    """(code, name, count, fixable with --fix), most frequent first."""
    counts = Counter((f.code, f.name) for f in findings)
    fixable = Counter(f.code for f in findings if f.fix is not None and f.fix.safe)
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0]))
    return [(code, name, n, bool(fixable[code])) for (code, name), n in ordered]


def render(findings: list[Finding], fmt: str = "text") -> str:
    rows = _rows(findings)
    if fmt == "json":
        doc = [{"code": c, "name": name, "count": n, "fixable": fix} for c, name, n, fix in rows]
        return json.dumps(doc, indent=2) + "\n"
    if not rows:
        return ""
    width = max(len(str(n)) for _, _, n, _ in rows)
    lines = [f"{n:>{width}}  {code}  {name}{' [*]' if fix else ''}" for code, name, n, fix in rows]
    return "\n".join(lines) + "\n"
