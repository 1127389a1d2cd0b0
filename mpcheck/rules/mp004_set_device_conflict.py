"""MP004: set_device / `with torch.cuda.device(...)` followed by an index-less placement in split-model code."""

from __future__ import annotations

import libcst as cst

from mpcheck.devices.describe import split_desc, split_devices
from mpcheck.devices.values import show
from mpcheck.rules.base import Rule


class SetDeviceConflict(Rule):
    code = "MP004"
    needs = ("set_device", "cuda.device")

    def check(self, ctx):
        for ev in ctx.model.events("indexless_after_setdev"):
            setdev = ev.data["setdev"]
            dev = ev.data["dev"]
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
        for ev in ctx.model.events("split_built_after_setdev"):
            setdev = ev.data["setdev"]
            plain, obj = ev.data["plain"], ev.data["obj"]
            lines = ", ".join(str(ctx.line(n)) for n in ev.data["where"][:3])
            after = split_desc(obj) if obj.split else "everything on one device"
            yield self.finding(
                ctx,
                ev.node,
                f"`{ctx.code(ev.node)}` is built after `{_what(ctx, setdev)}` at line {ctx.line(setdev)}, and its "
                f"__init__ places stages with an index-less `.cuda()`/'cuda' (line {lines}): it was meant as "
                f"{split_desc(plain)}, but now gives {after}. Name each stage's device index in __init__.",
                devices=split_devices(plain),
                suggestion="write the device index of each stage explicitly",
            )


def _what(ctx, node: cst.CSTNode) -> str:
    if isinstance(node, cst.Call):
        return ctx.code(node)
    return "set_device"
