"""How much of the files the pre-filter lets through could the linter leave unparsed?

    python bench/analysis_slice_potential.py [PATH]     # default: this Python's torch package

A file that holds a rule's word is parsed and analysed whole. Would analysing only its top-level
statements that can matter save much? Those are: every statement that is no `def` or `class`
(imports, constants, `if` blocks), each `def`/`class` that holds a rule's word where it counts, the
ones naming a name such a statement defines (a device may flow in), and the definitions those name
(what they call). Prints the share of those files' text kept, with imported names taken for devices
or not. Measured (session 31, torch 2.13's 526 such files, 25.0 M characters): 86% kept, 99.7% when
imported names count: in torch a class that says `cuda` holds most of its file, and the rest is
connected to it, so the cut was not built (docs/measurements.md, session 31).
"""

from __future__ import annotations

import ast
import os
import sys

from mpcheck.lint import rulemeta
from mpcheck.lint.livetext import LiveText
from mpcheck.lint.prefilter import PreFilter

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _mentions(node: ast.AST) -> set[str]:
    return {
        n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))
    }


def _binds(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, _DEFINITIONS):
        return {stmt.name}
    out: set[str] = set()
    for n in ast.walk(stmt):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
    return out


def kept_chars(text: str, words: list[str], imports_carry: bool) -> int | None:
    """The characters of `text` the cut would keep; None when it does not parse."""
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError):
        return None
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    live = LiveText(text)
    at = [i for w in words for i in _occurrences(text, w) if live.in_code(i, i + len(w))]
    spans = []
    for s in body:
        first = s.decorator_list[0].lineno if isinstance(s, _DEFINITIONS) and s.decorator_list else s.lineno
        spans.append((starts[first - 1], starts[s.end_lineno or s.lineno]))
    has_word = [any(a <= i < b for i in at) for a, b in spans]
    is_def = [isinstance(s, _DEFINITIONS) for s in body]
    is_import = [isinstance(s, (ast.Import, ast.ImportFrom)) for s in body]
    mentions = [_mentions(s) for s in body]
    binds = [_binds(s) for s in body]
    defined: dict[str, list[int]] = {}
    for i, s in enumerate(body):
        if is_def[i]:
            defined.setdefault(s.name, []).append(i)  # type: ignore[attr-defined]
    carry = {n for i in range(len(body)) if has_word[i] or (imports_carry and is_import[i]) for n in binds[i]}
    carrying = list(has_word)
    kept = [not d or w for d, w in zip(is_def, has_word, strict=True)]
    changed = True
    while changed:
        changed = False
        for i in range(len(body)):
            if not carrying[i] and not is_import[i] and mentions[i] & carry:
                carrying[i] = kept[i] = changed = True
                carry |= binds[i]
            if carrying[i] or (kept[i] and is_def[i]):
                for j in (j for n in mentions[i] for j in defined.get(n, ())):
                    if not kept[j]:
                        kept[j] = changed = True
    outside = len(text) - sum(b - a for a, b in spans)
    return outside + sum(b - a for (a, b), k in zip(spans, kept, strict=True) if k)


def _occurrences(text: str, word: str) -> list[int]:
    out, at = [], text.find(word)
    while at >= 0:
        out.append(at)
        at = text.find(word, at + 1)
    return out


def main() -> None:
    if len(sys.argv) > 1:
        root = sys.argv[1]
    else:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        assert spec is not None and spec.origin is not None, "torch is not installed: give a PATH"
        root = os.path.dirname(spec.origin)
    rules = rulemeta.load(None)
    codes = frozenset(rules)
    prefilter = PreFilter(rules, codes)
    total, kept, kept_imports, files = 0, 0, 0, 0
    for folder, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".py"):
                continue
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                text = f.read()
            if not prefilter.codes_for(text, codes):
                continue
            plain = kept_chars(text, prefilter.words, imports_carry=False)
            if plain is None:
                continue
            files += 1
            total += len(text)
            kept += plain
            kept_imports += kept_chars(text, prefilter.words, imports_carry=True) or len(text)
    print(f"{files} files hold a rule's word, {total:,} characters")
    print(
        f"kept: {kept / total:.1%} (imported names not taken for devices), {kept_imports / total:.1%} (taken for them)"
    )


if __name__ == "__main__":
    main()
