"""MP005: a tensor moved from device A to B and back to A with no work on B in between."""

from __future__ import annotations

from mpcheck.devices.describe import value_text
from mpcheck.devices.values import show, single
from mpcheck.rules.base import Rule
from mpcheck.rules.words import FLOW_WORDS


class RoundTripTransfer(Rule):
    code = "MP005"
    name = "round-trip-transfer"
    summary = "A tensor is moved to another device and straight back, with no work done there."
    severity = "warning"
    needs = FLOW_WORDS

    def check(self, ctx):
        seen = set()
        for ev in ctx.model.events("transfer"):
            v = ev.data["value"]
            back, there, before = single(ev.data["devs"]), single(v.devs), single(v.moved_from)
            if v.worked or back is None or there is None or before is None or back != before or there == back:
                continue
            if id(ev.node) in seen or v.moved_at is None:
                continue
            seen.add(id(ev.node))
            name = value_text(ctx, None, v, "the tensor")
            first = ctx.line(v.moved_at)
            yield self.finding(
                ctx,
                ev.node,
                f"`{name}` goes {show(before)} -> {show(there)} (line {first}) -> {show(back)} here, with no work on "
                f"{show(there)} in between: two copies for nothing. Remove both transfers, or keep the "
                f"{show(before)} tensor in a variable and use it here.",
                devices=[before, there],
                suggestion=f"drop the transfer at line {first} and this one",
            )
