"""`--statistics`: how many findings of each code, most frequent first."""

from __future__ import annotations

from collections import Counter

from mpcheck.finding import Finding


def render(findings: list[Finding]) -> str:
    counts = Counter((f.code, f.name) for f in findings)
    fixable = Counter(f.code for f in findings if f.fix is not None and f.fix.safe)
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0]))
    if not rows:
        return ""
    width = max(len(str(n)) for _, n in rows)
    lines = []
    for (code, name), n in rows:
        mark = " [*]" if fixable[code] else ""
        lines.append(f"{n:>{width}}  {code}  {name}{mark}")
    return "\n".join(lines) + "\n"
