"""MP004: set_device / `with torch.cuda.device(...)` followed by an index-less placement in split-model code."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.describe import split_desc, split_devices
from mpcheck.devices.events import (
    EntryPointRun,
    IndexlessPlacement,
    SplitBuiltAfterSetDevice,
)
from mpcheck.devices.values import show
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext


class SetDeviceConflict(Rule):
    code = "MP004"
    needs = ("set_device", "cuda.device")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in _indexless_in_split_code(ctx.model.facts(EntryPointRun)):
            setdev = ev.setdev
            dev = ev.dev
            lands = show(dev) if dev and dev != "cuda" else "whatever device it selects"
            yield self.finding(
                ctx,
                ev.node,
                f"`{ctx.code(ev.node)}` names no device index: after `{_what(ctx, setdev)}` at line "
                f"{ctx.line(setdev)} it lands on the current device ({lands}), in code that builds or runs a model "
                f"split over several devices. Name the device you mean: `.cuda(i)` / `.to('cuda:i')` / "
                f"torch.device('cuda', i).",
                devices=[dev] if dev else [],
                suggestion="write the device index explicitly",
            )
        for built in ctx.model.facts(SplitBuiltAfterSetDevice):
            setdev = built.setdev
            plain, obj = built.plain, built.obj
            lines = ", ".join(str(ctx.line(n)) for n in built.where[:3])
            after = split_desc(obj) if obj.split else "everything on one device"
            yield self.finding(
                ctx,
                built.node,
                f"`{ctx.code(built.node)}` is built after `{_what(ctx, setdev)}` at line {ctx.line(setdev)}, and its "
                f"__init__ places stages with an index-less `.cuda()`/'cuda' (line {lines}): it was meant as "
                f"{split_desc(plain)}, but now gives {after}. Name each stage's device index in __init__.",
                devices=split_devices(plain),
                suggestion="write the device index of each stage explicitly",
            )


def _indexless_in_split_code(runs: list[EntryPointRun]) -> list[IndexlessPlacement]:
    """The index-less placements after set_device (not inside `with torch.cuda.device`, where
    index-less means that device on purpose) in entry points that build or run a split model;
    one per node, from the first entry point that reached it."""
    out: list[IndexlessPlacement] = []
    seen: set[int] = set()
    for run in runs:
        if not run.builds_split:
            continue
        for p in run.placements:
            if not p.under_device_context and id(p.node) not in seen:
                seen.add(id(p.node))
                out.append(p)
    return out


def _what(ctx: FileContext, node: cst.CSTNode) -> str:
    if isinstance(node, cst.Call):
        return ctx.code(node)
    return "set_device"
