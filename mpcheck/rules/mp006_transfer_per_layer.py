"""MP006: devices alternate along a chain or loop of layers, so activations cross more than once per stage."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from mpcheck.devices.events import Crossing
from mpcheck.devices.values import show
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class TransferPerLayer(Rule):
    code = "MP006"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        seen = set()
        for chain in _chains(ctx.model.facts(Crossing)):
            devs, node = chain.devs, chain.first_revisit
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


@dataclass
class _Chain:
    """The devices an activation visits, in order, and the transfer that first went back to one."""

    devs: list[str]
    reported: bool
    first_revisit: cst.CSTNode | None = None
    nodes: list[cst.CSTNode] = field(default_factory=list)


def _chains(steps: list[Crossing]) -> list[_Chain]:
    """The lineages of activations, built from their crossings in order (those opened in runs that count)."""
    by_lineage: dict[int, _Chain] = {}
    for c in steps:
        chain = by_lineage.get(c.lineage)
        if c.undoes:
            # A round trip with no work in between: MP005's business; it is not a stage crossing.
            if chain is not None and len(chain.devs) >= 2 and chain.devs[-1] == c.src:
                chain.devs.pop()
                if chain.nodes:
                    chain.nodes.pop()
            continue
        if chain is None:  # c.opens
            chain = by_lineage[c.lineage] = _Chain([c.src], c.reported)
        if chain.devs[-1] != c.src:
            chain.devs.append(c.src)
        if c.dst in chain.devs and chain.first_revisit is None:
            chain.first_revisit = c.node
        chain.devs.append(c.dst)
        chain.nodes.append(c.node)
    return [ch for ch in by_lineage.values() if ch.reported]
