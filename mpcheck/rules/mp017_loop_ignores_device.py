"""MP017: a loop over several devices in an __init__ builds modules but never uses its device,
so what it builds, meant one set per device, all ends on one device; or a list of devices is made by
a loop that never uses its index, so every stage it places gets the same one; or hooks made in a loop
read its device when they run, after the loop, so every one moves to the last pass's device."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import (
    DeviceListIgnoresIndex,
    DevicePickIgnoresIndex,
    LateBoundHookDevice,
    UnusedLoopDevice,
)
from mpcheck.devices.values import show
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class LoopIgnoresDevice(Rule):
    code = "MP017"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in ctx.model.facts(UnusedLoopDevice):
            loop = ev.node
            assert isinstance(loop, cst.For)
            what = _built(ev.count, ev.built)
            where = "stay on the CPU" if ev.landed == "cpu" else f"all end on {show(ev.landed)}"
            devices = ", ".join(map(show, ev.devices))
            yield self.finding(
                ctx,
                loop.target,
                f"`for {ev.name} in {ctx.code(loop.iter)}` runs once per device ({devices}) and builds {what}, "
                f"but never uses `{ev.name}`: they {where} instead of one set on each device. Place what each "
                f"pass builds on `{ev.name}` (`.to({ev.name})`).",
                devices=[*ev.devices, ev.landed],
                modules=list(ev.built),
                suggestion=f"add `.to({ev.name})` to the modules the loop builds",
            )
        for listed in once_per_node(ctx.model.facts(DeviceListIgnoresIndex)):
            name, loop = listed.name, listed.loop
            made = (
                f"`{ctx.code(loop)}`"
                if not isinstance(loop, cst.For)
                else f"`{ctx.code(listed.node)}`, appended in `for {name} in {ctx.code(loop.iter)}`,"
            )
            yield self.finding(
                ctx,
                listed.node,
                f"{made} makes one device per `{name}` but never uses `{name}`: every item is the same device, so the "
                f"stages placed by this list all land on one GPU instead of one each. Make each item from `{name}` "
                f"(e.g. `torch.device('cuda', first + {name})`).",
                suggestion=f"use `{name}` in the device each item names",
            )
        for pick in once_per_node(ctx.model.facts(DevicePickIgnoresIndex)):
            sub = pick.node
            assert isinstance(sub, cst.Subscript)
            holder, index = ctx.code(sub.value), ctx.code(sub.slice[0].slice)
            among = ", ".join(map(show, pick.among))
            yield self.finding(
                ctx,
                sub,
                f"`{ctx.code(sub)}` picks one of {len(pick.among)} devices ({among}) for each `{pick.name}`, but "
                f"`{index}` gives the same one, {show(pick.picked)}, on every pass of "
                f"`{_loop_head(ctx, pick.loop)}`: everything placed from it lands on that device instead of being "
                f"spread over the list. Scale the index to the list (e.g. `{pick.name} * len({holder}) // n` for "
                f"`n` passes).",
                devices=[pick.picked, *pick.among],
                suggestion=f"spread `{index}` over the {len(pick.among)} devices of `{holder}`",
            )
        for late in once_per_node(ctx.model.facts(LateBoundHookDevice)):
            name, loop = late.name, late.loop
            made = f"`{late.node.name.value}`" if isinstance(late.node, cst.FunctionDef) else "lambda"
            yield self.finding(
                ctx,
                late.node,
                f"the hook {made} that `for {ctx.code(loop.target)} in {ctx.code(loop.iter)}` registers with "
                f"`{late.registrar}` reads `{name}` when it runs, after the loop, not when it is made: every hook "
                f"moves to the device `{name}` held on the loop's last pass, so the modules of the other passes get "
                f"their input on that device. Bind it when the hook is made: a parameter `{name}={name}`.",
                suggestion=f"add `{name}={name}` to the hook's parameters (`lambda mod, args, {name}={name}: ...`)",
            )


def _built(n: int, names: tuple[str, ...]) -> str:
    """'4 `RefineBlock` modules', '6 modules (`Linear`, `LayerNorm`)'."""
    if len(names) == 1:
        return f"{n} `{names[0]}` module{'s' if n != 1 else ''}"
    return f"{n} modules ({', '.join(f'`{x}`' for x in names)})"


def _loop_head(ctx: FileContext, loop: cst.CSTNode) -> str:
    """`for i in range(n)`: the loop as its head reads (a comprehension's `for` clause)."""
    if isinstance(loop, cst.For):
        return f"for {ctx.code(loop.target)} in {ctx.code(loop.iter)}"
    clause = getattr(loop, "for_in", None)
    if isinstance(clause, cst.CompFor):
        return f"for {ctx.code(clause.target)} in {ctx.code(clause.iter)}"
    return "the loop"
