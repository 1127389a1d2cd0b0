"""MP019: a tensor made on the host from a shape alone and moved to a GPU at once, in code that runs every
step: made on the GPU (`device=`), it costs neither the host's fill nor the copy."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import HostMadeMove
from mpcheck.devices.values import CURRENT, one, show, single
from mpcheck.devices.walk import walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class MadeOnHost(Rule):
    code = "MP019"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in once_per_node(ctx.model.facts(HostMadeMove)):
            dst = single(ev.devs)
            assert dst is not None
            factory = ctx.code(ev.factory.func)
            target = ctx.code(ev.node.args[0].value) if isinstance(ev.node, cst.Call) and ev.node.args else None
            device = f"device={target}" if target else f"device={dst!r}"
            shaped = ev.shaped_after
            if (
                not target
                and dst == CURRENT
                and isinstance(shaped, (cst.Name, cst.Attribute))
                and ev.shaped_devs != one("cpu")
            ):
                # `.cuda()`: the current device, which is not where the tensor it is shaped after lives once the
                # model is placed elsewhere (`-gpu 1`); made where that tensor is, it goes where it is used. Not a
                # host tensor's device, though (a mask drawn on the host): that would make it on the host again.
                device = f"device={ctx.code(shaped)}.device"
            if ev.helper_device is not None:
                device = f"{ev.helper_device}={target}" if target else f"{ev.helper_device}={dst!r}"
                made = (
                    f"`{factory}(...)` builds the tensor on the host (its `{ev.helper_device}` left at None, so its "
                    "factories make it there) and this line copies it"
                )
                there = ""
            elif any(n is ev.factory for n in walk(ev.node)):
                made = f"`{factory}(...)` makes the tensor on the host and this line copies it"
                there = ""
            elif not ev.derived:
                made = f"`{factory}(...)` (line {ctx.line(ev.factory)}) makes the tensor on the host and this line copies it"
                there = ""
            else:
                # computed from the factory's tensor on the host first (`torch.argsort(noise)`, a slice of it)
                made = (
                    f"`{factory}(...)` (line {ctx.line(ev.factory)}) makes a tensor on the host, what this line "
                    f"moves is computed from it there, and this line copies that"
                )
                there = f", and compute from it on {show(dst)}"
            yield self.finding(
                ctx,
                ev.node,
                f"{made} to {show(dst)}, on every step: the host fills it and the copy from pageable memory waits for "
                f"the host. Make it there: `{factory}(..., {device})`{there}.",
                devices=["cpu", dst],
                suggestion=f"pass `{device}` to `{factory}(...)` and drop the move",
            )
