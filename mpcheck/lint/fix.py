"""`--fix` and `--diff`: apply the text edits that findings carry.

Only safe fixes unless `--unsafe-fixes`. Overlapping edits: the first (by
position) wins, the other stays reported. The edited text must still parse
(libcst) before anything is written; the write is atomic. A fix that would
break the file is reported and the file is left as it was.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from mpcheck.finding import Finding
from mpcheck.lint.atomic import write_text_atomic


@dataclass
class FixResult:
    fixed: list[Finding] = field(default_factory=list)  # findings whose fix was applied
    diffs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _offsets(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def apply_to_text(text: str, findings: list[Finding], unsafe: bool) -> tuple[str, list[Finding]]:
    """The text with every applicable fix applied, and the findings they fix."""
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
    applied: list[tuple[int, int, str, Finding]] = []
    last_end = -1
    for e in edits:
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


def fix_sources(
    findings: list[Finding],
    sources: dict[str, str],
    abspaths: dict[str, str],
    *,
    unsafe: bool,
    write: bool,
    diff: bool,
    stdin_path: str | None = None,
) -> tuple[FixResult, dict[str, str]]:
    """Apply fixes file by file. Returns the result and the new text of each changed file."""
    result = FixResult()
    new_texts: dict[str, str] = {}
    by_path: dict[str, list[Finding]] = {}
    for f in findings:
        if f.fix is not None:
            by_path.setdefault(f.path, []).append(f)
    for path, fs in sorted(by_path.items()):
        text = sources.get(path)
        if text is None:
            continue
        new, fixed = apply_to_text(text, fs, unsafe)
        if not fixed or new == text:
            continue
        problem = _parses(new)
        if problem is not None:
            codes = ", ".join(sorted({f.code for f in fixed}))
            result.errors.append(
                f"{path}: fix for {codes} not applied: the fixed file would not parse ({problem}); file left unchanged"
            )
            continue
        if diff:
            result.diffs.append(
                "".join(
                    difflib.unified_diff(
                        text.splitlines(keepends=True),
                        new.splitlines(keepends=True),
                        fromfile=f"a/{path}",
                        tofile=f"b/{path}",
                    )
                )
            )
        if write and path != stdin_path:
            try:
                write_text_atomic(abspaths.get(path, path), new, prefix=".mpcheck-fix-")
            except OSError as exc:
                result.errors.append(f"{path}: cannot write the fix: {exc.strerror or exc}")
                continue
        new_texts[path] = new
        result.fixed.extend(fixed)
    return result, new_texts
