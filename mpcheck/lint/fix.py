"""`--fix` and `--diff`: apply the text edits that findings carry, each only once it is shown to work.

Only safe fixes unless `--unsafe-fixes`. Fixes are tried one at a time, in
position order, on top of those already kept; a fix is kept only when

- it does not overlap a kept one (the other stays reported, for the next run),
- the edited text still parses (libcst), and
- a re-lint of the edited text in memory (`recheck`) no longer reports its
  finding and reports nothing new: a `.to()` that silences one mismatch but
  creates another (a loop over blocks on two devices) is refused.

A refused fix leaves its finding reported and is named in `errors`. Nothing is
written before every check passed, and the write is atomic (lint/atomic.py):
a file is never left half-fixed or broken.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from mpcheck.finding import Finding
from mpcheck.lint.atomic import write_text_atomic

# (display path, edited text) -> what a fresh run finds in that text, or None
# when it cannot tell (an internal error): then no fix of the file is kept.
Recheck = Callable[[str, str], list[Finding] | None]


@dataclass
class FixResult:
    fixed: list[Finding] = field(default_factory=list)  # findings gone once the kept fixes are applied
    applied: list[Finding] = field(default_factory=list)  # findings whose own fix was applied
    diffs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # fixes refused, files not written


def _offsets(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _edits(text: str, findings: list[Finding], unsafe: bool) -> list[tuple[int, int, str, Finding]]:
    """(begin, end, replacement, finding) of each applicable fix, by position."""
    starts = _offsets(text)

    def offset(line: int, column: int) -> int | None:
        if not 1 <= line <= len(starts):
            return None
        pos = starts[line - 1] + column - 1
        return pos if 0 <= pos <= len(text) else None

    edits = []
    for f in findings:
        if f.fix is None or (not f.fix.safe and not unsafe):
            continue
        begin = offset(f.fix.line, f.fix.column)
        end = offset(f.fix.end_line, f.fix.end_column)
        if begin is None or end is None or end < begin:
            continue
        edits.append((begin, end, f.fix.replacement, f))
    edits.sort(key=lambda e: (e[0], e[1]))
    return edits


def apply_to_text(text: str, findings: list[Finding], unsafe: bool) -> tuple[str, list[Finding]]:
    """The text with every applicable fix applied, and the findings they fix.
    Of overlapping edits the first (by position) wins."""
    applied: list[tuple[int, int, str, Finding]] = []
    last_end = -1
    for e in _edits(text, findings, unsafe):
        if e[0] < last_end:
            continue  # overlaps an earlier edit: leave it for the next run
        applied.append(e)
        last_end = e[1]
    pieces = []
    pos = 0
    for begin, end, replacement, _ in applied:
        pieces.append(text[pos:begin])
        pieces.append(replacement)
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces), [e[3] for e in applied]


def _parses(text: str) -> str | None:
    """None when libcst parses `text`, else the parser's message."""
    import libcst

    try:
        libcst.parse_module(text)
    except libcst.ParserSyntaxError as exc:
        return f"line {exc.raw_line}: {exc.message}"
    except Exception as exc:  # libcst raises a few other types on odd input
        return str(exc)
    return None


def _key(f: Finding) -> tuple:
    # Columns are left out: a fix earlier on the line shifts the others' columns.
    return (f.code, f.line, f.message)


def _describe(keys: Counter) -> str:
    return ", ".join(f"{code} at line {line}" for code, line, _ in sorted(keys.elements()))


@dataclass
class _FileFix:
    text: str  # the text with the kept fixes
    kept: list[Finding]
    remaining: Counter  # _key -> count of what the re-lint of `text` reports
    refused: list[str]


def _try(path: str, original: str, state: _FileFix, f: Finding, unsafe: bool, recheck: Recheck | None) -> str | None:
    """Add `f`'s fix to the kept ones when every check passes (then None), else say why not
    ("" for an overlap with a kept fix: not a refusal, the next run takes it)."""
    new, applied = apply_to_text(original, state.kept + [f], unsafe)
    if len(applied) != len(state.kept) + 1:
        return ""
    problem = _parses(new)
    if problem is not None:
        return f"the fixed file would not parse ({problem})"
    got = state.remaining
    if recheck is not None:
        after = recheck(path, new)
        if after is None:
            return "the fixed file could not be checked again"
        got = Counter(_key(g) for g in after)
        new_findings = got - state.remaining
        if new_findings:
            return f"it would add {_describe(new_findings)}"
        if got[_key(f)] >= state.remaining[_key(f)]:
            return "the finding would remain"
    state.kept.append(f)
    state.text, state.remaining = new, got
    return None


def _fix_one_file(path: str, text: str, found: list[Finding], unsafe: bool, recheck: Recheck | None) -> _FileFix:
    """Try the fixes of one file's findings one by one; keep those that pass every check."""
    state = _FileFix(text, [], Counter(_key(f) for f in found), [])
    for *_, f in _edits(text, found, unsafe):
        why = _try(path, text, state, f, unsafe, recheck)
        if why:
            state.refused.append(f"{path}:{f.line}: fix for {f.code} not applied: {why}")
    return state


def verified_fixes(path: str, text: str, found: list[Finding], recheck: Recheck) -> list[Finding]:
    """`found` with each fix kept only when, applied alone, it passes the checks of
    `--fix`: a finding says "fixable" only when its fix works."""
    out = []
    for f in found:
        if f.fix is not None:
            state = _FileFix(text, [], Counter(_key(g) for g in found), [])
            if _try(path, text, state, f, True, recheck) is not None:
                f = replace(f, fix=None)
        out.append(f)
    return out


def _gone(found: list[Finding], remaining: Counter) -> list[Finding]:
    """The findings of `found` that the re-lint no longer reports (their own fix
    or another one removed them)."""
    left = Counter(remaining)
    gone = []
    for f in found:
        if left[_key(f)] > 0:
            left[_key(f)] -= 1
        else:
            gone.append(f)
    return gone


def fix_sources(
    findings: list[Finding],
    sources: dict[str, str],
    abspaths: dict[str, str],
    *,
    unsafe: bool,
    write: bool,
    diff: bool,
    stdin_path: str | None = None,
    recheck: Recheck | None = None,
) -> tuple[FixResult, dict[str, str]]:
    """Apply fixes file by file. Returns the result and the new text of each changed file.
    `recheck` re-lints an edited text in memory; without it only the parse check guards a fix."""
    result = FixResult()
    new_texts: dict[str, str] = {}
    by_path: dict[str, list[Finding]] = {}
    for f in findings:
        by_path.setdefault(f.path, []).append(f)
    for path, found in sorted(by_path.items()):
        text = sources.get(path)
        if text is None or not any(f.fix is not None for f in found):
            continue
        state = _fix_one_file(path, text, found, unsafe, recheck)
        result.errors.extend(state.refused)
        if not state.kept or state.text == text:
            continue
        if diff:
            result.diffs.append(
                "".join(
                    difflib.unified_diff(
                        text.splitlines(keepends=True),
                        state.text.splitlines(keepends=True),
                        fromfile=f"a/{path}",
                        tofile=f"b/{path}",
                    )
                )
            )
        if write and path != stdin_path:
            try:
                write_text_atomic(abspaths.get(path, path), state.text, prefix=".mpcheck-fix-")
            except OSError as exc:
                result.errors.append(f"{path}: cannot write the fix: {exc.strerror or exc}")
                continue
        new_texts[path] = state.text
        result.applied.extend(state.kept)
        result.fixed.extend(_gone(found, state.remaining) if recheck is not None else state.kept)
    return result, new_texts
