"""The `text` and `full` formats."""

from __future__ import annotations

from mpcheck.finding import Finding
from mpcheck.report import ReportContext
from mpcheck.report.colour import Palette


def _head(f: Finding, p: Palette) -> str:
    return f"{p('bold', f.path)}:{f.line}:{f.column}: {p.severity(f.severity, f.code)} {f.message}"


def summary_line(findings: list[Finding], ctx: ReportContext) -> str:
    n = len(findings)
    fixable = sum(1 for f in findings if f.fix is not None and f.fix.safe)
    parts = [f"Found {n} finding{'s' if n != 1 else ''}"]
    extra = []
    if ctx.fixed:
        extra.append(f"{ctx.fixed} fixed")
    if fixable:
        extra.append(f"{fixable} fixable with --fix")
    if extra:
        parts.append(f" ({', '.join(extra)})")
    return "".join(parts) + "."


def all_passed(checked: int) -> str:
    """The line of a clean lint run, so that one can tell something was checked."""
    return f"All checks passed ({checked} file{'s' if checked != 1 else ''}).\n"


def render_text(findings: list[Finding], ctx: ReportContext) -> str:
    p = Palette(ctx.color)
    lines = [_head(f, p) for f in findings]
    if findings or ctx.fixed:
        lines.append(summary_line(findings, ctx))
    return "\n".join(lines) + ("\n" if lines else "")


def _source_lines(f: Finding, ctx: ReportContext, p: Palette) -> list[str]:
    text = ctx.sources.get(f.path)
    if text is None:
        return []
    lines = text.splitlines()
    if not 1 <= f.line <= len(lines):
        return []
    src = lines[f.line - 1].expandtabs(1)
    end_col = f.end_column if f.end_line in (None, f.line) and f.end_column else None
    width = max(1, (end_col - f.column) if end_col and end_col > f.column else 1)
    width = min(width, max(1, len(src) - f.column + 1))
    gutter = str(f.line)
    pad = " " * len(gutter)
    return [
        f"{pad} |",
        f"{p('blue', gutter)} | {src}",
        f"{pad} | {' ' * (f.column - 1)}{p.severity(f.severity, '^' * width)}",
    ]


def render_full(findings: list[Finding], ctx: ReportContext) -> str:
    p = Palette(ctx.color)
    blocks = []
    for f in findings:
        block = [_head(f, p)]
        block.extend(_source_lines(f, ctx, p))
        if f.devices:
            block.append(f"  devices: {', '.join(f.devices)}")
        if f.modules:
            block.append(f"  modules: {', '.join(f.modules)}")
        if f.suggestion:
            block.append(f"  {p('cyan', 'help')}: {f.suggestion}")
        blocks.append("\n".join(block))
    out = "\n\n".join(blocks)
    if findings or ctx.fixed:
        out += ("\n\n" if blocks else "") + summary_line(findings, ctx)
    return out + ("\n" if out else "")
