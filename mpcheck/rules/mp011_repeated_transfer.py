"""MP011: the same unchanging tensor moved to a device on every forward call or loop iteration."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import Transfer
from mpcheck.devices.values import conflict, device_literal, show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS

_KIND = {"buffer": "buffer", "param": "parameter"}


class RepeatedTransfer(Rule):
    code = "MP011"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in once_per_node(ctx.model.facts(Transfer), lambda ev: bool(_repeated(ev))):
            how = _repeated(ev)
            v = ev.value
            src, dst = single(v.devs), single(ev.devs)
            node = ev.node
            recv = (
                ctx.code(node.func.value)
                if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                else "the tensor"
            )
            what = _KIND.get(v.kind, "tensor")
            when = "on every forward call" if how == "call" else "on every iteration of the loop"
            if how == "call":
                fix = f"create it on {show(dst)} in __init__ (or move it once after placing the model) and use it directly"
            else:
                assert dst is not None  # a transfer repeated by a loop goes to a known device
                fix = f"move it once before the loop: `{recv} = {recv}.to({device_literal(dst)})`"
            yield self.finding(
                ctx,
                ev.node,
                f"`{recv}` (an unchanging {what} on {show(src)}) is copied to {show(dst)} {when}: {fix}.",
                devices=[src, dst],
                suggestion=fix,
            )


def _repeated(ev: Transfer) -> str:
    """'call' / 'loop' for a move, on every forward call or loop iteration, of the same
    unchanging value (buffer, parameter, constant) certainly on another device; else ''."""
    v = ev.value
    if not v.invariant or not conflict(v.devs, ev.devs):
        return ""
    if ev.reads_unchanging_attribute:
        return "call"  # self.buffer.to(...) in forward
    if ev.bound_outside_loop:
        return "loop"  # a tensor made before the loop, moved again in every iteration
    return ""
