"""MP019: a tensor made on the host from a shape alone and moved to a GPU at once, in code that runs every
step: made on the GPU (`device=`), it costs neither the host's fill nor the copy."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import HostMadeMove
from mpcheck.devices.values import CURRENT, show, single
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
            if not target and dst == CURRENT and (shaped := _sized_after(ctx, ev.factory)) is not None:
                # `.cuda()`: the current device, which is not where the tensor it is shaped after lives once the
                # model is placed elsewhere (`-gpu 1`); made where that tensor is, it goes where it is used.
                device = f"device={shaped}.device"
            yield self.finding(
                ctx,
                ev.node,
                f"`{factory}(...)` makes the tensor on the host and this line copies it to {show(dst)}, on every "
                f"step: the host fills it and the copy from pageable memory waits for the host. Make it there: "
                f"`{factory}(..., {device})`.",
                devices=["cpu", dst],
                suggestion=f"pass `{device}` to `{factory}(...)` and drop the move",
            )


def _sized_after(ctx: FileContext, factory: cst.Call) -> str | None:
    """The tensor whose size the factory's arguments name (`x` in `torch.zeros(x.size(0), 3)`), as written."""
    for a in factory.args:
        for n in walk(a.value):
            of = None
            if isinstance(n, cst.Attribute) and n.attr.value == "shape":
                of = n.value
            elif isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "size":
                of = n.func.value
            if of is not None and isinstance(of, (cst.Name, cst.Attribute)):
                return ctx.code(of)
    return None
