"""MP006: devices alternate along a chain or loop of layers, so activations cross more than once per stage."""

from __future__ import annotations

from mpcheck.devices.values import show
from mpcheck.rules.base import Rule
from mpcheck.rules.words import FLOW_WORDS


class TransferPerLayer(Rule):
    code = "MP006"
    needs = FLOW_WORDS

    def check(self, ctx):
        seen = set()
        for chain in ctx.model.interp.chains:
            devs, node = chain["devs"], chain["first_revisit"]
            crossings = len(devs) - 1
            distinct = list(dict.fromkeys(devs))
            # A -> B -> A is two stages with a way back (e.g. to the labels); A -> B -> A -> B is ping-pong.
            if node is None or crossings < 3 or crossings <= len(distinct) or id(node) in seen:
                continue
            seen.add(id(node))
            path = " -> ".join(show(d) for d in devs[:8]) + (" -> ..." if len(devs) > 8 else "")
            yield self.finding(
                ctx,
                node,
                f"the activations cross devices {crossings} times ({path}) where {len(distinct) - 1} crossing(s) "
                f"would do: the layers alternate between {', '.join(show(d) for d in distinct)}. Group consecutive "
                f"layers per device (e.g. the first half on {show(distinct[0])}, the second on "
                f"{show(distinct[1])}) so that each stage boundary is crossed once.",
                devices=distinct,
                suggestion="place consecutive layers on the same device, one block per device",
            )
