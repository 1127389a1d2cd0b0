"""MP005: a tensor moved from device A to B and back to A with no work on B in between."""

from __future__ import annotations

from collections.abc import Iterator

from mpcheck.devices.describe import value_text
from mpcheck.devices.events import Transfer
from mpcheck.devices.values import show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class RoundTripTransfer(Rule):
    code = "MP005"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in once_per_node(ctx.model.facts(Transfer), _round_trip):
            v = ev.value
            home, there = single(v.moved_from), single(v.devs)  # home -> there -> home
            name = value_text(ctx, None, v, "the tensor")
            first = ctx.line(v.moved_at)
            yield self.finding(
                ctx,
                ev.node,
                f"`{name}` goes {show(home)} -> {show(there)} (line {first}) -> {show(home)} here, with no work on "
                f"{show(there)} in between: two copies for nothing. Remove both transfers, or keep the "
                f"{show(home)} tensor in a variable and use it here.",
                devices=[home, there],
                suggestion=f"drop the transfer at line {first} and this one",
            )


def _round_trip(ev: Transfer) -> bool:
    """A transfer back to the one device the value came from, with no work done on the device between."""
    v = ev.value
    back, there, before = single(ev.devs), single(v.devs), single(v.moved_from)
    return (
        not v.worked
        and v.moved_at is not None
        and None not in (back, there, before)
        and back == before
        and there != back
    )
