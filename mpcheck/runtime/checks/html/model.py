"""The page's data: a plain dict built from a runtime report, with no HTML in it (testable alone).

    page_data(report, rows, events=..., step_marks=..., capacities=..., title=...) -> dict

`report` is the json report (`report_dict` of either face: findings, transfers, memory, notes;
the dry run adds dryrun, limits, stopped). `rows` is the module placement (placement.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mpcheck.runtime.checks.html.placement import ModuleRow

# Deeper modules are folded into their ancestor at this depth under a lane (a count stays).
MAX_DEPTH = 6
# Consecutive siblings of one type on one device (blocks.0..15) fold into one group from this many.
GROUP_MIN = 3
# Transfers kept for the timeline: the last ones, whole steps where possible.
MAX_EVENTS = 1000


def device_sort_key(dev: str) -> tuple[int, str, int]:
    """cuda:0 < cuda:1 < cuda:10 < other accelerators < cpu < meta."""
    kind, _, index = dev.partition(":")
    order = {"cuda": 0, "cpu": 2, "meta": 3}.get(kind, 1)
    return (order, kind, int(index) if index.isdigit() else -1)


# -- the module tree ------------------------------------------------------------------------------
def _parent(path: str) -> str | None:
    return path.rsplit(".", 1)[0] if "." in path else None


def _subtree_devices(rows: Mapping[str, ModuleRow], children: Mapping[str, list[str]]) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}

    def walk(path: str) -> frozenset[str]:
        if path in out:
            return out[path]
        devs = set(rows[path].devices)
        for c in children.get(path, []):
            devs |= walk(c)
        out[path] = frozenset(devs)
        return out[path]

    for path in rows:
        walk(path)
    return out


def _node(
    path: str,
    rows: Mapping[str, ModuleRow],
    children: Mapping[str, list[str]],
    depth: int,
) -> dict[str, Any]:
    row = rows[path]
    kids = children.get(path, [])
    node: dict[str, Any] = {"path": path, "name": path.rsplit(".", 1)[-1], "type": row.type, "bytes": row.param_bytes}
    folded = 0
    child_nodes = []
    for c in kids:
        child = _node(c, rows, children, depth + 1)
        node["bytes"] += child["bytes"]
        if depth + 1 >= MAX_DEPTH:
            folded += _size(child)
        else:
            child_nodes.append(child)
    if child_nodes:
        node["children"] = _group(child_nodes)
    if folded:
        node["folded"] = folded
    return node


def _size(node: Mapping[str, Any]) -> int:
    """How many modules `node` stands for: itself (a group is none), its children, the folded ones."""
    own = 0 if node.get("group") else 1
    return own + int(node.get("folded", 0)) + sum(_size(c) for c in node.get("children", []))


_INDEX = re.compile(r"^(.*)\.(\d+)$")


def _group(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs of siblings `x.0, x.1, ...` of one type fold into one group node (its children: the run)."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []

    def flush() -> None:
        if len(run) >= GROUP_MIN:
            first, last = run[0], run[-1]
            out.append(
                {
                    "path": f"{first['path']}-{last['name']}",
                    "name": f"{first['name']}-{last['name']}",
                    "type": f"{len(run)} x {first['type']}",
                    "bytes": sum(n["bytes"] for n in run),
                    "children": list(run),
                    "group": len(run),
                }
            )
        else:
            out.extend(run)
        run.clear()

    for n in nodes:
        m = _INDEX.match(n["path"])
        if run:
            prev = _INDEX.match(run[-1]["path"])
            same = (
                m is not None
                and prev is not None
                and m.group(1) == prev.group(1)
                and int(m.group(2)) == int(prev.group(2)) + 1
                and n["type"] == run[-1]["type"]
            )
            if not same:
                flush()
        if m is not None:
            run.append(n)
        else:
            flush()
            out.append(n)
    flush()
    return out


def lanes_of(rows: Mapping[str, ModuleRow]) -> dict[str, list[dict[str, Any]]]:
    """device -> the module trees placed wholly on it: the top-most modules whose parameters (theirs
    and their children's) all sit on that one device. A module spread over several devices is not
    drawn itself; its own parameters, if any, appear as `path (own parameters)` on their device."""
    children: dict[str, list[str]] = {}
    for path in rows:
        parent = _parent(path)
        while parent is not None and parent not in rows:
            parent = _parent(parent)
        if parent is not None:
            children.setdefault(parent, []).append(path)
    subtree = _subtree_devices(rows, children)
    lanes: dict[str, list[dict[str, Any]]] = {}
    for path, row in rows.items():
        devs = subtree[path]
        parent = _parent(path)
        while parent is not None and parent not in rows:
            parent = _parent(parent)
        parent_devs = subtree[parent] if parent is not None else frozenset()
        if len(devs) == 1 and parent_devs != devs:
            lanes.setdefault(next(iter(devs)), []).append(_node(path, rows, children, 0))
        elif len(devs) > 1 and len(row.devices) == 1 and row.param_bytes:
            lanes.setdefault(row.devices[0], []).append(
                {"path": path, "name": path, "type": f"{row.type} (own parameters)", "bytes": row.param_bytes}
            )
    return {dev: _group(nodes) for dev, nodes in lanes.items()}


# -- the page -----------------------------------------------------------------------------------
def _memory(dev: str, m: Mapping[str, Any], capacity: int | None) -> dict[str, Any]:
    """The bar's parts. A dry run gives activations (its estimate); a real run gives torch's peak:
    what the peak holds beyond parameters, gradients and optimizer states is shown as activations."""
    params, grads, opt = int(m.get("params", 0)), int(m.get("grads", 0)), int(m.get("optimizer_state", 0))
    estimate = "activations" in m
    if estimate:
        acts = int(m.get("activations", 0))
    else:
        acts = max(0, int(m.get("peak_allocated", 0)) - params - grads - opt)
    total = int(m["total"]) if "total" in m else params + grads + opt + acts
    cap = m.get("capacity", capacity)
    return {
        "params": params,
        "grads": grads,
        "optimizer_state": opt,
        "activations": acts,
        "total": total,
        "capacity": int(cap) if cap else None,
        "fits": (total <= int(cap)) if cap else None,
        "estimate": estimate,
    }


def _lane_of_finding(f: Mapping[str, Any], placed: Mapping[str, str]) -> str | None:
    """The device whose lane shows the finding: its module's (or its nearest placed ancestor's), else
    the first device it names."""
    for module in f.get("modules") or ():
        path: str | None = module
        while path is not None:
            if path in placed:
                return placed[path]
            path = _parent(path)
    devices = f.get("devices") or ()
    return devices[0] if devices else None


def _placed_paths(lanes: Mapping[str, list[dict[str, Any]]]) -> dict[str, str]:
    out: dict[str, str] = {}

    def walk(node: Mapping[str, Any], dev: str) -> None:
        if not node.get("group"):
            out[node["path"]] = dev
        for c in node.get("children", []):
            walk(c, dev)

    for dev, nodes in lanes.items():
        for n in nodes:
            walk(n, dev)
    return out


def _timeline(events: Sequence[Mapping[str, Any]], step_marks: Sequence[Sequence[float]]) -> dict[str, Any] | None:
    if not events:
        return None
    kept = list(events)
    dropped = 0
    if len(kept) > MAX_EVENTS:
        first_step = kept[-MAX_EVENTS]["step"]
        cut = [e for e in kept if e["step"] >= first_step + 1] or kept[-MAX_EVENTS:]
        dropped = len(kept) - len(cut)
        kept = cut
    t0 = min(e["ts_s"] for e in kept)
    rows = [
        {
            "src": e["src"],
            "dst": e["dst"],
            "phase": e["phase"],
            "bytes": e["bytes"],
            "start_ms": round((e["ts_s"] - t0) * 1e3, 4),
            "dur_ms": e["dur_ms"],
            "step": e["step"],
            "module": e.get("module"),
            "site": e.get("site"),
        }
        for e in kept
    ]
    steps = [
        {"index": int(idx), "start_ms": round((s - t0) * 1e3, 4), "end_ms": round((end - t0) * 1e3, 4)}
        for s, end, idx in step_marks
        if end >= t0
    ]
    span = max([r["start_ms"] + (r["dur_ms"] or 0.0) for r in rows] + [s["end_ms"] for s in steps] + [1e-3])
    return {"events": rows, "steps": steps, "span_ms": round(span, 4), "dropped": dropped}


def page_data(
    report: Mapping[str, Any],
    rows: Iterable[ModuleRow],
    *,
    events: Sequence[Mapping[str, Any]] = (),
    step_marks: Sequence[Sequence[float]] = (),
    capacities: Mapping[str, int] | None = None,
    title: str = "mpcheck report",
    subtitle: str = "",
) -> dict[str, Any]:
    row_map = {r.path: r for r in rows}
    lanes = lanes_of(row_map)
    placed = _placed_paths(lanes)
    transfers = report.get("transfers") or {}
    by_pair = transfers.get("by_pair") or []
    memory = report.get("memory") or {}
    capacities = capacities or {}
    # Only devices that hold something or move something get a lane ("meta": shapes only, no device).
    names: set[str] = set(lanes)
    names |= {d for d, m in memory.items() if any(int(m.get(k, 0) or 0) for k in ("params", "total", "peak_allocated"))}
    for r in by_pair:
        names |= {r["src"], r["dst"]}
    findings = []
    for i, f in enumerate(report.get("findings") or []):
        lane = _lane_of_finding(f, placed)
        if lane is not None:
            names.add(lane)
        modules = list(f.get("modules") or ())
        findings.append(
            {
                "id": f"finding-{i + 1}",
                "code": f["code"],
                "name": f.get("name", ""),
                "severity": f.get("severity", "error"),
                "message": f["message"],
                "site": f"{f['path']}:{f['line']}",
                "fix": f.get("suggestion") or "",
                "modules": modules,
                "devices": list(f.get("devices") or ()),
                "lane": lane,
                "node": next((m for m in modules if m in placed), None),
                "count": int((f.get("extra") or {}).get("count", 1) or 1),
            }
        )
    names.discard("meta")
    devices = []
    for dev in sorted(names, key=device_sort_key):
        modules = lanes.get(dev, [])
        devices.append(
            {
                "name": dev,
                "modules": modules,
                "module_count": sum(_size(n) for n in modules),
                "param_bytes": sum(n["bytes"] for n in modules),
                "memory": _memory(dev, memory[dev], capacities.get(dev)) if dev in memory else None,
                "findings": [f["id"] for f in findings if f["lane"] == dev],
            }
        )
    biggest = max([r["bytes"] for r in by_pair] + [1])
    crossings = [
        {
            "src": r["src"],
            "dst": r["dst"],
            "phase": r["phase"],
            "count": r["count"],
            "bytes": r["bytes"],
            "time_ms": r["time_ms"],
            # wider for more bytes: 1.5 px for the least, 12 px for the most (square root: areas)
            "width": round(1.5 + 10.5 * math.sqrt(r["bytes"] / biggest), 2),
        }
        for r in by_pair
    ]
    return {
        "title": title,
        "subtitle": subtitle,
        "devices": devices,
        "crossings": crossings,
        "steps": transfers.get("steps", 0),
        "total": transfers.get("total"),
        "findings": findings,
        "timeline": _timeline(events, step_marks),
        "notes": list(report.get("notes") or []),
        "limits": [f"{x['site']}: {x['message']}" for x in report.get("limits") or []],
        "stopped": report.get("stopped"),
    }
