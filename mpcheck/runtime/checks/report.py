"""The runtime report: findings (the linter's schema and renderers) plus transfers and memory.

Three outputs: a terminal summary (colour only on a terminal), `json` (an
object: `findings` in the linter's finding schema, `transfers`, `memory`,
`notes`), and a Chrome trace (open in Perfetto / chrome://tracing) of the
transfers and steps per device.

Times are GPU times of the copies (CUDA events on the source stream); a
step's time is the host wall time between two step ends, so "share" is the
part of the step's wall time the copies took on their streams.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from mpcheck.finding import Finding
from mpcheck.runtime.checks.ledger import TINY_BYTES, Agg, Ledger

if TYPE_CHECKING:
    from mpcheck.runtime.checks.face import CheckedSession

TOP = 10


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


fmt_bytes = _fmt_bytes  # the HTML page and the merged report of a job's ranks write bytes alike


def _fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms * 1e3:.0f} us" if ms < 1 else f"{ms:.2f} ms"


def _site_str(site: Any) -> str:
    line = getattr(site, "line", 0)
    return str(site) if site is not None and line else "<unknown>"


def _row(a: Agg) -> dict[str, Any]:
    return a.as_dict()


def transfers_dict(ledger: Ledger) -> dict[str, Any]:
    steps = ledger.steps
    wall = sum(s.wall_ms for s in steps)
    total = ledger.total()
    out: dict[str, Any] = {
        "steps": len(steps),
        "step_wall_ms_total": round(wall, 3),
        "total": {**_row(total), "share": round(total.time_ms / wall, 6) if wall > 0 and total.timed else None},
        "by_pair": [{"src": s, "dst": d, "phase": ph, **_row(a)} for (s, d, ph), a in sorted(ledger.by_pair().items())],
        "by_site": [
            {"site": _site_str(site), "src": s, "dst": d, "phase": ph, **_row(a)}
            for (site, s, d, ph), a in sorted(ledger.by_site().items(), key=lambda kv: -kv[1].time_ms)
        ],
        "by_module": [
            {"module": mod, "src": s, "dst": d, "phase": ph, **_row(a)}
            for (mod, s, d, ph), a in sorted(ledger.by_module().items(), key=lambda kv: -kv[1].time_ms)
        ],
        "tiny_by_site": tiny_by_site(ledger),
        "per_step": [s.as_dict() for s in steps[-100:]],
    }
    return out


def tiny_by_site(ledger: Ledger) -> list[dict[str, Any]]:
    """Latency-bound transfers (under TINY_BYTES each) merged per call site, whatever the pair."""
    groups: dict[str, tuple[Agg, set[str]]] = {}
    for (src, dst, site, _mod, phase), a in ledger.totals.items():
        if a.count and a.bytes / a.count < TINY_BYTES:
            agg, pairs = groups.setdefault(_site_str(site), (Agg(), set()))
            agg.count += a.count
            agg.bytes += a.bytes
            agg.time_ms += a.time_ms
            agg.timed += a.timed
            pairs.add(f"{src}->{dst} {phase}")
    return [
        {"site": site, "pairs": sorted(pairs), **_row(agg)}
        for site, (agg, pairs) in sorted(groups.items(), key=lambda kv: -kv[1][0].count)
    ]


def report_dict(session: CheckedSession) -> dict[str, Any]:
    checker = session.checker
    return {
        "findings": [f.to_dict() for f in sorted(checker.findings, key=Finding.sort_key)],
        "transfers": transfers_dict(checker.ledger),
        "memory": {dev: dict(v) for dev, v in sorted(checker.ledger.memory.items())},
        "notes": list(session.notes),
    }


def render_text(session: CheckedSession, *, color: bool = False) -> str:
    from mpcheck.report import ReportContext
    from mpcheck.report.colour import Palette
    from mpcheck.report.text import render_full

    p = Palette(color)
    checker = session.checker
    ledger = checker.ledger
    findings = sorted(checker.findings, key=Finding.sort_key)
    lines: list[str] = [p("bold", "mpcheck runtime report")]
    if findings:
        lines.append(render_full(findings, ReportContext(color=color)).rstrip())
        for f in findings:
            if f.extra.get("count", 1) > 1:
                lines.append(f"  ({f.path}:{f.line} {f.code} seen {f.extra['count']} times)")
    else:
        lines.append("No device findings.")
    t = transfers_dict(ledger)
    total = t["total"]
    n = max(t["steps"], 1)
    lines.append("")
    share = f", {100 * total['share']:.1f}% of step time" if total.get("share") is not None else ""
    lines.append(
        p("bold", "Transfers")
        + f": {t['steps']} step(s), {total['count']} transfers, {_fmt_bytes(total['bytes'])}, "
        + f"{_fmt_ms(total['time_ms'])} on the copy streams{share}"
    )
    if t["by_pair"]:
        lines.append(
            f"  {'src -> dst':<22}{'phase':<10}{'count/step':>11}{'bytes/step':>12}{'time/step':>11}"
            f"{'GB/s':>8}{'share':>8}{'non-contig':>11}"
        )
        wall = t["step_wall_ms_total"]
        for r in t["by_pair"]:
            gbps = f"{r['gb_per_s']:.1f}" if r["gb_per_s"] is not None else "-"
            sh = f"{100 * r['time_ms'] / wall:.1f}%" if r["time_ms"] is not None and wall > 0 else "-"
            per_t = r["time_ms"] / n if r["time_ms"] is not None else None
            lines.append(
                f"  {r['src'] + ' -> ' + r['dst']:<22}{r['phase']:<10}{r['count'] / n:>11.1f}"
                f"{_fmt_bytes(r['bytes'] / n):>12}{_fmt_ms(per_t):>11}{gbps:>8}{sh:>8}{r['noncontiguous']:>11}"
            )
        lines.append(p("bold", "  by call site") + f" (top {TOP} by time):")
        for r in t["by_site"][:TOP]:
            lines.append(
                f"    {r['site']:<40} {r['src']} -> {r['dst']} {r['phase']:<9} x{r['count']:<6}"
                f"{_fmt_bytes(r['bytes']):>10} {_fmt_ms(r['time_ms']):>10}"
            )
        lines.append(p("bold", "  by module boundary") + f" (top {TOP} by time):")
        for r in t["by_module"][:TOP]:
            lines.append(
                f"    {str(r['module'] or '<top level>'):<40} {r['src']} -> {r['dst']} {r['phase']:<9} "
                f"x{r['count']:<6}{_fmt_bytes(r['bytes']):>10} {_fmt_ms(r['time_ms']):>10}"
            )
        tiny = t["tiny_by_site"]
        if tiny:
            lines.append(
                p("bold", "  tiny transfers") + f" (< {TINY_BYTES // 1024} KiB each, latency-bound) by call site:"
            )
            for r in tiny[:TOP]:
                lines.append(
                    f"    {r['site']:<40} x{r['count']:<6}{_fmt_bytes(r['bytes']):>10} "
                    f"{_fmt_ms(r['time_ms']):>10}  ({', '.join(r['pairs'])})"
                )
    mem = checker.ledger.memory
    if mem:
        lines.append("")
        lines.append(p("bold", "Memory per device") + " (bytes held by tensors; peak = torch's peak allocated):")
        for dev, d in sorted(mem.items()):
            peak = f"  peak {_fmt_bytes(d['peak_allocated'])}" if "peak_allocated" in d else ""
            lines.append(
                f"  {dev:<8} params {_fmt_bytes(d.get('params', 0)):>9}  grads {_fmt_bytes(d.get('grads', 0)):>9}"
                f"  optimizer {_fmt_bytes(d.get('optimizer_state', 0)):>9}{peak}"
            )
    for note in session.notes:
        lines.append(p("yellow", f"note: {note}"))
    return "\n".join(lines) + "\n"


def chrome_trace(session: CheckedSession) -> dict[str, Any]:
    ledger = session.checker.ledger
    events: list[dict[str, Any]] = []
    pids: dict[str, int] = {}

    def pid(name: str) -> int:
        if name not in pids:
            pids[name] = len(pids) + 1
            events.append({"ph": "M", "name": "process_name", "pid": pids[name], "args": {"name": name}})
        return pids[name]

    steps_pid = pid("steps")
    for start, end, idx in ledger.step_marks:
        events.append(
            {
                "ph": "X",
                "name": f"step {idx}",
                "pid": steps_pid,
                "tid": 0,
                "ts": start * 1e6,
                "dur": (end - start) * 1e6,
            }
        )
    for e in ledger.events:
        events.append(
            {
                "ph": "X",
                "name": f"{e['src']} -> {e['dst']} {_fmt_bytes(e['bytes'])}",
                "cat": e["phase"],
                "pid": pid(e["src"]),
                "tid": f"to {e['dst']}",
                "ts": e["ts_s"] * 1e6,
                "dur": (e["dur_ms"] or 0.0) * 1e3,
                "args": {
                    "bytes": e["bytes"],
                    "site": e["site"],
                    "module": e["module"],
                    "step": e["step"],
                    "gpu_time_ms": e["dur_ms"],
                },
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"note": "ts = host time the copy was enqueued; dur = its GPU time (CUDA events)"},
    }


def write_outputs(
    session: CheckedSession,
    *,
    output_format: str = "text",
    stream: TextIO | None = None,
    trace: str | None = None,
    color_mode: str = "auto",
) -> None:
    write_report_and_trace(
        report=lambda: report_dict(session),
        text=lambda color: render_text(session, color=color),
        trace_data=lambda: chrome_trace(session),
        output_format=output_format,
        stream=stream,
        trace=trace,
        color_mode=color_mode,
    )


def write_report_and_trace(
    *,
    report: Callable[[], dict[str, Any]],
    text: Callable[[bool], str],
    trace_data: Callable[[], dict[str, Any]],
    output_format: str,
    stream: TextIO | None,
    trace: str | None,
    color_mode: str,
) -> None:
    """What both faces write: the report (`report()` as json, or `text(color)`) to `stream`,
    the Chrome trace `trace_data()` to the file `trace`. The faces hand in their own builders
    (the dry run adds memory and its link model to the session's)."""
    if stream is not None:
        if output_format == "json":
            stream.write(json.dumps(report(), indent=2) + "\n")
        else:
            from mpcheck.report.colour import wanted

            stream.write(text(wanted(color_mode, stream)))
        stream.flush()
    if trace is not None:
        data = trace_data()
        with open(trace, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
