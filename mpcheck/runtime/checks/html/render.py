"""The page: `render(data)` writes the dict of model.py into one self-contained HTML file.

Everything is drawn here, on the server side, as HTML and inline SVG (the page reads without
JavaScript; page.js only adds expand/collapse and jumps); page.css and page.js are inlined.
Colour is never the only cue: memory parts and transfer phases have patterns and labels too
(they survive grayscale printing), and every drawn thing has a text label for screen readers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from importlib import resources
from typing import Any

from mpcheck.runtime.checks.report import fmt_bytes

LANE_W = 260  # px per device lane; the crossings band above uses the same columns
LABEL_HALF_W = 115  # about half a crossing's label (`cuda:0→cuda:1 fwd 3x 12.3 KB 63 us`) at 11 px
PARTS = (  # memory bar parts: (key, label, svg pattern id)
    ("params", "parameters", "p-params"),
    ("grads", "gradients", "p-grads"),
    ("optimizer_state", "optimizer states", "p-opt"),
    ("activations", "activations", "p-acts"),
)


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "no time"
    return f"{ms * 1e3:.0f} us" if ms < 1 else f"{ms:.2f} ms"


def _e(x: Any) -> str:
    return escape(str(x), quote=True)


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


# -- pieces ---------------------------------------------------------------------------------------
PATTERNS = """<svg width="0" height="0" aria-hidden="true" focusable="false" style="position:absolute">
<defs>
<pattern id="p-params" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#1f4e79"/></pattern>
<pattern id="p-grads" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#e9c46a"/><rect width="2" height="6" fill="#5a4500"/></pattern>
<pattern id="p-opt" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#a7c957"/><path d="M0 0L6 6M6 0L0 6" stroke="#2d4010" stroke-width="1"/></pattern>
<pattern id="p-acts" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#f4a3a8"/><circle cx="3" cy="3" r="1.3" fill="#6b1118"/></pattern>
<pattern id="p-bwd" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/><rect width="3" height="6" fill="#b5179e"/></pattern>
<marker id="m-fwd" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="16" markerHeight="16" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="#1d3557"/></marker>
<marker id="m-bwd" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="16" markerHeight="16" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="#b5179e"/></marker>
</defs></svg>"""


def _memory_bar(m: Mapping[str, Any] | None) -> str:
    if m is None:
        return '<p class="muted">No memory read on this device.</p>'
    total = m["total"]
    cap = m["capacity"]
    kind = "estimate" if m["estimate"] else "peak"
    parts = ", ".join(f"{label} {fmt_bytes(m[key])}" for key, label, _ in PARTS)
    if cap:
        share = 100 * total / cap
        head = f"{fmt_bytes(total)} of {fmt_bytes(cap)} ({share:.1f}%)"
        if m["fits"] is False:
            head += f", {fmt_bytes(total - cap)} OVER capacity"
    else:
        head = f"{fmt_bytes(total)} (capacity unknown)"
    label = f"memory {kind}: {head}; {parts}"
    w = LANE_W - 28

    def bar(scale: float, y: int) -> str:
        x = 0.0
        out = []
        for key, name, pat in PARTS:
            width = m[key] * scale
            if width > 0:
                out.append(
                    f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="14" fill="url(#{pat})">'
                    f"<title>{_e(name)}: {_e(fmt_bytes(m[key]))}</title></rect>"
                )
            x += width
        return "".join(out)

    rows = []
    if cap:
        rows.append(f'<rect x="0" y="0" width="{w}" height="14" class="cap"/>' + bar(w / max(cap, total), 0))
    rows.append(bar(w / total, 18 if cap else 0) if total else "")
    height = 34 if cap else 16
    legend = "".join(
        f'<li><svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" fill="url(#{pat})" '
        f'stroke="#333"/></svg> {_e(name)} {_e(fmt_bytes(m[key]))}</li>'
        for key, name, pat in PARTS
    )
    over = ' class="over"' if m["fits"] is False else ""
    return (
        f'<div class="mem" role="group" aria-label="{_e(label)}">'
        f"<p{over}><strong>memory {kind}</strong>: {_e(head)}</p>"
        f'<svg width="{w}" height="{height}" aria-hidden="true">{"".join(rows)}</svg>'
        + ('<p class="muted small">top: against capacity; below: the parts of the total</p>' if cap else "")
        + f'<ul class="legend">{legend}</ul></div>'
    )


def _tree(nodes: Sequence[Mapping[str, Any]], pins: Mapping[str, list[Mapping[str, Any]]], depth: int) -> str:
    items = []
    for n in nodes:
        badge = "".join(
            f'<a class="pin" href="#{_e(f["id"])}" aria-label="finding {_e(f["code"])} on this module">'
            f"&#9873; {_e(f['code'])}</a>"
            for f in pins.get(n["path"], [])
        )
        text = (
            f'<span class="mname">{_e(n["name"])}</span> <span class="mtype">{_e(n["type"])}</span> '
            f'<span class="mbytes">{_e(fmt_bytes(n["bytes"]))}</span>'
        )
        folded = f' <span class="muted">(+{n["folded"]} deeper modules)</span>' if n.get("folded") else ""
        node_id = f' id="m-{_e(n["path"])}"' if not n.get("group") else ""
        if n.get("children"):
            open_ = " open" if depth == 0 and not n.get("group") else ""
            items.append(
                f'<li{node_id} data-path="{_e(n["path"])}"><details{open_}><summary title="{_e(n["path"])}">'
                f"{text}{folded} {badge}</summary>{_tree(n['children'], pins, depth + 1)}</details></li>"
            )
        else:
            items.append(
                f'<li{node_id} data-path="{_e(n["path"])}" tabindex="-1" title="{_e(n["path"])}">'
                f'<span class="leaf">{text}{folded}</span> {badge}</li>'
            )
    return f'<ul class="tree">{"".join(items)}</ul>'


def _lane(dev: Mapping[str, Any], findings: Mapping[str, Mapping[str, Any]]) -> str:
    mine = [findings[i] for i in dev["findings"]]
    pins: dict[str, list[Mapping[str, Any]]] = {}
    for f in mine:
        if f["node"]:
            pins.setdefault(f["node"], []).append(f)
    pinned = "".join(
        f'<li><a href="#{_e(f["id"])}" class="sev-{_e(f["severity"])}">&#9873; {_e(f["code"])} {_e(f["severity"])}</a> '
        f'at {_e(", ".join(f["modules"]) or "top level")} <span class="muted">{_e(f["site"])}</span></li>'
        for f in mine
    )
    label = (
        f"device {dev['name']}: {dev['module_count']} modules, {fmt_bytes(dev['param_bytes'])} of parameters, "
        f"{len(mine)} findings"
    )
    modules = (
        _tree(dev["modules"], pins, 0)
        if dev["modules"]
        else '<p class="muted">No module of the model is placed here.</p>'
    )
    return (
        f'<section class="lane" role="region" aria-label="{_e(label)}" id="lane-{_e(dev["name"])}">'
        f'<h3>{_e(dev["name"])}</h3><p class="muted">{dev["module_count"]} modules, '
        f"{_e(fmt_bytes(dev['param_bytes']))} of parameters</p>"
        f"{_memory_bar(dev['memory'])}"
        + (f'<ul class="pinned" aria-label="findings on {_e(dev["name"])}">{pinned}</ul>' if mine else "")
        + f"<h4>modules</h4>{modules}</section>"
    )


def _crossing_label(c: Mapping[str, Any]) -> str:
    return (
        f"{c['src']} to {c['dst']}, {c['phase']}: {c['count']} transfers, {fmt_bytes(c['bytes'])}, "
        f"{fmt_ms(c['time_ms'])}"
    )


def _lifts(crossings: Sequence[Mapping[str, Any]], x_of: Mapping[str, float]) -> dict[int, float]:
    """How far each arc rises from the line (forward up, backward down): short spans lowest, and an
    arc one label's height above any arc on its side that it overlaps (its span or its label's)."""
    drawn = [i for i, c in enumerate(crossings) if c["src"] in x_of and c["dst"] in x_of]
    spans = {i: abs(x_of[crossings[i]["src"]] - x_of[crossings[i]["dst"]]) / LANE_W for i in drawn}
    placed: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}  # (left, right, lift)
    lifts = {}
    for i in sorted(drawn, key=lambda i: spans[i]):
        forward = crossings[i]["phase"] != "backward"
        a, b = sorted((x_of[crossings[i]["src"]], x_of[crossings[i]["dst"]]))
        centre = (a + b) / 2
        left, right = min(a + 20, centre - LABEL_HALF_W), max(b - 20, centre + LABEL_HALF_W)
        lift = 24 + 26 * spans[i]
        for lo, hi, other in placed[forward]:
            if lo < right and left < hi:
                lift = max(lift, other + 18)
        placed[forward].append((left, right, lift))
        lifts[i] = lift
    return lifts


def _crossings_svg(devices: Sequence[Mapping[str, Any]], crossings: Sequence[Mapping[str, Any]]) -> str:
    x_of = {d["name"]: i * LANE_W + LANE_W / 2 for i, d in enumerate(devices)}
    lifts = _lifts(crossings, x_of)
    up = max([lifts[i] for i in lifts if crossings[i]["phase"] != "backward"] + [20])
    down = max([lifts[i] for i in lifts if crossings[i]["phase"] == "backward"] + [20])
    mid = up + 36
    height = mid + down + 24
    width = LANE_W * len(devices)
    out = [f'<line x1="0" y1="{mid}" x2="{width}" y2="{mid}" class="axis"/>']
    for d in devices:
        x = x_of[d["name"]]
        out.append(f'<circle cx="{x}" cy="{mid}" r="5" class="dev"/>')
        out.append(f'<line x1="{x}" y1="16" x2="{x}" y2="{height}" class="tick"/>')
        out.append(f'<text x="{x}" y="12" text-anchor="middle" class="devname">{_e(d["name"])}</text>')
    for i, lift in lifts.items():
        c = crossings[i]
        x1, x2 = x_of[c["src"]], x_of[c["dst"]]
        forward = c["phase"] != "backward"
        cls = "fwd" if forward else "bwd"
        y = mid - lift if forward else mid + lift
        path = f"M{x1},{mid} Q{(x1 + x2) / 2},{2 * y - mid} {x2},{mid}"
        if x1 == x2:  # a device to itself (unusual): a small loop
            path = f"M{x1 - 8},{mid} C{x1 - 30},{y} {x1 + 30},{y} {x1 + 8},{mid}"
        text = (
            f"{c['src']}\u2192{c['dst']} {'fwd' if forward else 'bwd'} {c['count']}x {fmt_bytes(c['bytes'])} "
            f"{fmt_ms(c['time_ms'])}"
        )
        label = _crossing_label(c)
        out.append(
            f'<g class="crossing {cls}" tabindex="0" role="img" aria-label="{_e(label)}" data-row="x-{i}">'
            f"<title>{_e(label)}</title>"
            f'<path d="{path}" stroke-width="{c["width"]}" marker-end="url(#m-{cls})"/>'
            f'<text x="{(x1 + x2) / 2}" y="{y + (-4 if forward else 12)}" text-anchor="middle">{_e(text)}</text></g>'
        )
    return (
        f'<svg class="band" width="{width}" height="{height}" role="group" '
        f'aria-label="crossings between devices: forward above the line, backward below">{"".join(out)}</svg>'
    )


def _crossings_table(crossings: Sequence[Mapping[str, Any]], steps: int) -> str:
    if not crossings:
        return '<p class="muted">No transfer between devices was seen.</p>'
    per = f" (over {steps} step{'s' if steps != 1 else ''})" if steps else ""
    rows = "".join(
        f'<tr id="x-{i}"><td>{_e(c["src"])}</td><td>{_e(c["dst"])}</td>'
        f'<td><span class="ph-{_e(c["phase"])}">{_e(c["phase"])}</span></td>'
        f'<td class="num">{c["count"]}</td><td class="num">{_e(fmt_bytes(c["bytes"]))}</td>'
        f'<td class="num">{_e(fmt_ms(c["time_ms"]))}</td></tr>'
        for i, c in enumerate(crossings)
    )
    return (
        f'<table class="crossings"><caption>Crossings per direction and phase{_e(per)}</caption>'
        "<thead><tr><th scope=col>from</th><th scope=col>to</th><th scope=col>phase</th>"
        "<th scope=col>count</th><th scope=col>bytes</th><th scope=col>time</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _findings(findings: Sequence[Mapping[str, Any]]) -> str:
    if not findings:
        return '<p class="ok">No device findings.</p>'
    items = []
    for f in findings:
        jump = (
            f' <button type="button" class="jump" data-target="m-{_e(f["node"])}">show module {_e(f["node"])}</button>'
            if f["node"]
            else ""
        )
        seen = f" (seen {f['count']} times)" if f["count"] > 1 else ""
        items.append(
            f'<li id="{_e(f["id"])}" class="finding sev-{_e(f["severity"])}" tabindex="-1">'
            f'<p><strong>{_e(f["code"])} {_e(f["name"])}</strong> <span class="sev">[{_e(f["severity"])}]</span> '
            f'<code class="site">{_e(f["site"])}</code>{_e(seen)}</p>'
            f"<p>{_e(f['message'])}</p>"
            + (f'<p class="fix"><strong>fix:</strong> {_e(f["fix"])}</p>' if f["fix"] else "")
            + f'<p class="muted">modules: {_e(", ".join(f["modules"]) or "-")}; devices: '
            f"{_e(', '.join(f['devices']) or '-')}{jump}</p></li>"
        )
    return f'<ol class="findings">{"".join(items)}</ol>'


def _timeline(t: Mapping[str, Any] | None) -> str:
    if not t:
        return (
            '<p class="muted">No transfer times were kept: the timeline needs the run to keep its transfers '
            "(--html or --trace given before the run).</p>"
        )
    events = t["events"]
    pairs = sorted({(e["src"], e["dst"]) for e in events})
    row_of = {p: i for i, p in enumerate(pairs)}
    label_w, w, row_h = 130, 900, 22
    scale = w / t["span_ms"]
    out = []
    for s in t["steps"]:
        x = label_w + s["start_ms"] * scale
        out.append(
            f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{len(pairs) * row_h + 14}" class="step"/>'
            f'<text x="{x + 2:.1f}" y="{len(pairs) * row_h + 12}" class="small">step {s["index"]}</text>'
        )
    for (src, dst), i in row_of.items():
        mine = [e for e in events if (e["src"], e["dst"]) == (src, dst)]
        total = sum(e["bytes"] for e in mine)
        out.append(
            f'<g tabindex="0" role="img" aria-label="{_e(f"{src} to {dst}: {len(mine)} transfers, {fmt_bytes(total)}")}">'
            f'<text x="0" y="{i * row_h + 15}">{_e(src)} &#8594; {_e(dst)}</text>'
        )
        for e in mine:
            x = label_w + e["start_ms"] * scale
            width = max(1.0, (e["dur_ms"] or 0.0) * scale)
            fill = "url(#p-bwd)" if e["phase"] == "backward" else "#1d3557"
            out.append(
                f'<rect x="{x:.1f}" y="{i * row_h + 3}" width="{width:.1f}" height="16" fill="{fill}">'
                f"<title>{_e(e['phase'])} {_e(fmt_bytes(e['bytes']))} {_e(fmt_ms(e['dur_ms']))} "
                f"{_e(e['module'] or '')} {_e(e['site'] or '')}</title></rect>"
            )
        out.append("</g>")
    dropped = f" The first {t['dropped']} transfers are left out." if t["dropped"] else ""
    return (
        f'<p class="muted">{len(events)} transfers over {_e(fmt_ms(t["span_ms"]))}; forward solid, '
        f"backward hatched; width: the copy's time.{_e(dropped)}</p>"
        f'<div class="scroll"><svg width="{label_w + w + 10}" height="{len(pairs) * row_h + 20}" '
        f'class="timeline" role="group" aria-label="timeline of transfers">{"".join(out)}</svg></div>'
    )


# -- the page -------------------------------------------------------------------------------------
def render(data: Mapping[str, Any]) -> str:
    devices = data["devices"]
    findings = {f["id"]: f for f in data["findings"]}
    total = data.get("total") or {}
    summary = (
        f"{len(devices)} devices, {len(findings)} findings, {total.get('count', 0)} transfers "
        f"({fmt_bytes(total.get('bytes', 0))}) over {data['steps']} step{'s' if data['steps'] != 1 else ''}"
    )
    lanes = "".join(_lane(d, findings) for d in devices)
    extra = "".join(f'<li class="note">note: {_e(n)}</li>' for n in data["notes"])
    extra += "".join(f'<li class="note">limit: {_e(n)}</li>' for n in data["limits"])
    if data.get("stopped"):
        extra += f'<li class="note over">stopped: {_e(data["stopped"])}</li>'
    payload = json.dumps(
        {"devices": [d["name"] for d in devices], "findings": len(findings)}, separators=(",", ":")
    ).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(data["title"])}</title>
<style>{_asset("page.css")}</style></head>
<body>
{PATTERNS}
<a class="skip" href="#findings">Skip to findings</a>
<header><h1>{_e(data["title"])}</h1><p>{_e(data["subtitle"])}</p><p class="summary">{_e(summary)}</p>
{f'<ul class="notes">{extra}</ul>' if extra else ""}</header>
<main>
<section aria-labelledby="h-split"><h2 id="h-split">Devices, modules and crossings</h2>
<p class="muted">One lane per device with the modules placed on it. Above the line: forward crossings (solid,
dark); below: backward (dashed, light); wider for more bytes.
<button type="button" id="expand">expand all modules</button> <button type="button" id="collapse">collapse all</button></p>
<div class="scroll">{_crossings_svg(devices, data["crossings"])}
<div class="lanes" style="grid-template-columns: repeat({max(len(devices), 1)}, {LANE_W}px)">{lanes}</div></div>
{_crossings_table(data["crossings"], data["steps"])}
</section>
<section aria-labelledby="h-findings" id="findings"><h2 id="h-findings">Findings</h2>{_findings(data["findings"])}</section>
<section aria-labelledby="h-timeline"><h2 id="h-timeline">Transfers on a timeline</h2>{_timeline(data["timeline"])}</section>
</main>
<script type="application/json" id="mpcheck-data">{payload}</script>
<script>{_asset("page.js")}</script>
</body></html>
"""
