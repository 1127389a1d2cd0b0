"""MP015: a device argument torch refuses (`.to(torch.cuda.device(0))`, `.to("gpu")`): see devices/not_a_device.py."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.not_a_device import NotADevice
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext


class NotADeviceRule(Rule):
    code = "MP015"
    needs = ("cuda", "gpu", "GPU")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in once_per_node(ctx.model.facts(NotADevice)):
            call = ev.node
            where = _where(ctx, call)
            if ev.context is not None:
                made = ev.context.node
                index = made.args[0].value if isinstance(made, cst.Call) and made.args else None
                device = f'torch.device("cuda", {ctx.code(index)})' if index is not None else '"cuda"'
                given = f"`{ctx.code(ev.arg)}`" if ev.arg is not None else "the device argument"
                same = ev.arg is not None and ev.arg is made
                origin = "" if same else f" (made by `{ctx.code(made)}`, line {ctx.line(made)})"
                yield self.finding(
                    ctx,
                    call,
                    f"{given}{origin} is given to {where} as a device, but `torch.cuda.device(...)` is a context "
                    f"manager that sets the current GPU (`with torch.cuda.device(i):`), not a device: torch raises "
                    f"TypeError here. Pass a device instead, e.g. `{device}`.",
                    suggestion=f"pass a device, e.g. `{device}`",
                )
                continue
            fix = f"`{ev.meant!r}`" if ev.meant else "`'cuda'` or `'cuda:<index>'`"
            # torch's own words: a type it knows with a bad index, or a type it does not know.
            error = "Invalid device string" if ev.text.startswith("cuda") else "Expected one of cpu, cuda, ..."
            yield self.finding(
                ctx,
                call,
                f"{where} is given {_named(ctx, ev.arg)}the device string {ev.text!r}, which torch cannot read: it "
                f"raises RuntimeError "
                f"(\"{error}\") here. A GPU is written `'cuda'` or `'cuda:<index>'`, e.g. {fix}.",
                devices=[ev.meant] if ev.meant else [],
                suggestion=f"write the device as {fix}",
            )


def _named(ctx: FileContext, arg: cst.BaseExpression | None) -> str:
    """'`self.enc_dev`, ' where the string came through a name or an expression; '' where it is written there."""
    if arg is None or isinstance(arg, (cst.SimpleString, cst.ConcatenatedString)):
        return ""
    return f"`{ctx.code(arg)}`, "


def _where(ctx: FileContext, call: cst.CSTNode) -> str:
    """`.to()`, `torch.zeros()`, `torch.device()`: the call that takes the device, by its name as written."""
    if isinstance(call, cst.Call):
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda"):
            return f"`.{func.attr.value}()`"
        return f"`{ctx.code(func)}()`"
    return "the call"
