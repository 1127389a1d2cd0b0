"""MP017: a loop over several devices in an __init__ builds modules but never uses its device,
so what it builds, meant one set per device, all ends on one device; or a list of devices is made by
a loop that never uses its index, so every stage it places gets the same one."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import UnusedLoopDevice
from mpcheck.devices.names import dotted
from mpcheck.devices.values import show
from mpcheck.devices.walk import walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
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
        for comp, name in _device_lists_ignoring_their_index(ctx.module):
            yield self.finding(
                ctx,
                comp.elt,
                f"`{ctx.code(comp)}` makes one device per `{name}` but never uses `{name}`: every item is the same "
                f"device, so the stages placed by this list all land on one GPU instead of one each. Make each "
                f"item from `{name}` (e.g. `torch.device('cuda', first + {name})`).",
                suggestion=f"use `{name}` in the device each item names",
            )


def _built(n: int, names: tuple[str, ...]) -> str:
    """'4 `RefineBlock` modules', '6 modules (`Linear`, `LayerNorm`)'."""
    if len(names) == 1:
        return f"{n} `{names[0]}` module{'s' if n != 1 else ''}"
    return f"{n} modules ({', '.join(f'`{x}`' for x in names)})"


def _device_lists_ignoring_their_index(module: cst.Module) -> Iterator[tuple[cst.ListComp | cst.GeneratorExp, str]]:
    """`[torch.device("cuda", local_rank) for i in range(stages)]`: a list of devices made by a loop whose item
    never reads the loop's name. Not for a name that says it is unused (`_`, `_i`): `[torch.device("cpu") for _
    in parts]` is one device for every part on purpose."""
    for node in walk(module):
        if not isinstance(node, (cst.ListComp, cst.GeneratorExp)) or node.for_in.inner_for_in is not None:
            continue
        target = node.for_in.target
        if not isinstance(target, cst.Name) or target.value.startswith("_") or not _names_a_gpu(node.elt):
            continue
        if not any(isinstance(n, cst.Name) and n.value == target.value for n in walk(node.elt)):
            yield node, target.value


def _names_a_gpu(elt: cst.BaseExpression) -> bool:
    """`torch.device("cuda", k)`, `"cuda:0"`, `f"cuda:{k}"`."""
    if isinstance(elt, cst.Call):
        name = dotted(elt.func) or ""
        first = elt.args[0].value if elt.args else None
        return name in ("torch.device", "device") and first is not None and _names_a_gpu(first)
    if isinstance(elt, cst.SimpleString):
        value = elt.evaluated_value
        return isinstance(value, str) and value.startswith("cuda")
    if isinstance(elt, cst.FormattedString):
        head = elt.parts[0] if elt.parts else None
        return isinstance(head, cst.FormattedStringText) and head.value.startswith("cuda")
    return False
