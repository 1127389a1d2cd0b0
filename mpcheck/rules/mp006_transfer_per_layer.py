"""MP006: devices alternate along a chain or loop of layers, so activations cross more than once per stage."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from mpcheck.devices.describe import and_list, plural
from mpcheck.devices.events import Crossing
from mpcheck.devices.values import show
from mpcheck.devices.walk import target_names, walk
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
            if not chain.called and _repeated_by_a_counted_loop(ctx, chain.nodes):
                continue
            seen.add(id(node))
            path = " -> ".join(show(d) for d in devs[:8]) + (" -> ..." if len(devs) > 8 else "")
            n = len(distinct)
            yield self.finding(
                ctx,
                node,
                f"the activations cross devices {crossings} times ({path}), where {n} devices need "
                f"{plural(n - 1, 'crossing')}: "
                + (
                    "each block's output comes back to be added to a residual stream that stays behind, and the "
                    "sum goes out again to the next block. Move the stream with the blocks (`h = h.to(dev)`, "
                    "then `h = h + blk(h)`)"
                    if chain.residual
                    else f"the layers alternate between {and_list([show(d) for d in distinct])}. Group consecutive "
                    f"layers per device ({_grouping(distinct)})"
                )
                + " so that each stage boundary is crossed once.",
                devices=distinct,
                suggestion="place consecutive layers on the same device, one block per device",
            )


def _repeated_by_a_counted_loop(ctx: FileContext, nodes: list[cst.CSTNode]) -> bool:
    """Are all the crossings inside one `for` loop that only counts its passes (`for _ in range(iters)`: its name
    read nowhere in its body), calling no layer? Then they are one exchange repeated, the same computation on the
    same weights each pass (a relaxation, a message-passing round), not an activation walking a stack of layers
    placed back and forth: which side each state lives on is the design, not a layer order to regroup."""
    loops = [
        n
        for n in walk(ctx.module)
        if isinstance(n, cst.For) and all(any(x is node for x in walk(n.body)) for node in nodes)
    ]
    if not loops or not nodes:
        return False
    loop = loops[-1]  # (walk is outermost first: the innermost holding them all)
    names = set(target_names(loop.target))
    read = {n.value for n in walk(loop.body) if isinstance(n, cst.Name)}
    return not names & read


def _grouping(distinct: list[str]) -> str:
    """'e.g. the first half on cuda:0, the second on cuda:1', or one block per device in order."""
    if len(distinct) == 2:
        return f"e.g. the first half on {show(distinct[0])}, the second on {show(distinct[1])}"
    return f"one contiguous block of layers on each of {and_list([show(d) for d in distinct])}, in that order"


@dataclass
class _Chain:
    """The devices an activation visits in one pass, in order, and the transfer that first went back to one."""

    devs: list[str]
    reported: bool
    first_revisit: cst.CSTNode | None = None
    nodes: list[cst.CSTNode] = field(default_factory=list)
    # Per crossing in `nodes`: its Crossing.hop, and the index in `devs` of its destination.
    hops: list[int] = field(default_factory=list)
    marks: list[int] = field(default_factory=list)
    made: list[int] = field(default_factory=list)  # per crossing, its Crossing.made_by
    called: set[Any] = field(default_factory=set)  # the modules called in this pass (Crossing.stage)
    residual: bool = False  # a branch's output was added back to the very value that left


def _chains(steps: list[Crossing]) -> list[_Chain]:
    """The lineages of activations, built from their crossings in order (those opened in runs that count)."""
    by_lineage: dict[int, _Chain] = {}
    passes: list[_Chain] = []
    for c in steps:
        chain = by_lineage.get(c.lineage)
        if chain is None and c.opens:
            chain = by_lineage[c.lineage] = _Chain([], c.reported)
        if chain is not None and c.stage is not None:
            if c.stage in chain.called:
                # A module object called again on the same activation: a new pass (a generation or
                # recurrent loop feeding its output back), whose way back is the split's own cost.
                passes.append(chain)
                chain = by_lineage[c.lineage] = _Chain(chain.devs[-1:], chain.reported)
            chain.called.add(c.stage)
            continue
        if chain is not None and c.merge is not None:
            _merge(chain, c)
            continue
        if chain is None or _host(c.src) or _host(c.dst):
            # A copy to the host leaves the chain (a metric, a log line, a saved tensor); one
            # from the host is the input coming in: neither is a crossing between layers.
            continue
        if c.undoes:
            # A round trip with no work in between: MP005's business; it is not a stage crossing.
            if chain is not None and len(chain.devs) >= 2 and chain.devs[-1] == c.src:
                chain.devs.pop()
                if chain.nodes:
                    _drop_last(chain, 1)
            continue
        if chain.hops and c.made_at < chain.hops[-1] and chain.devs and chain.devs[-1] == c.src:
            # What leaves was made before the last crossings, which went out and came back here
            # (tokens sent to one expert after another, each result gathered where the tokens
            # stayed): the next crossing does not go on from what came back, so those crossings
            # were a branch off the activation, as a merge shows for a result summed back.
            _drop_branch(chain, c.made_at, c.src)
        if chain.devs and chain.devs[-1] != c.src and c.src in chain.devs:
            # The activation is still where it was before the last crossings, so those were
            # copies it branched off (a U-Net's skip sent ahead to the decoder's device), not
            # moves of the activation itself: go back to where it really is.
            _back_to(chain, c.src)
        if not chain.devs or chain.devs[-1] != c.src:
            chain.devs.append(c.src)
        chain.marks.append(len(chain.devs))
        if c.dst in chain.devs and chain.first_revisit is None:
            chain.first_revisit = c.node
        chain.devs.append(c.dst)
        chain.nodes.append(c.node)
        chain.hops.append(c.hop)
        chain.made.append(c.made_by)
    return [ch for ch in [*passes, *by_lineage.values()] if ch.reported]


def _back_to(chain: _Chain, dev: str) -> None:
    """Drop the crossings after the activation's last stay on `dev` (they were branches)."""
    keep = len(chain.devs) - 1 - chain.devs[::-1].index(dev)
    dropped = len(chain.devs) - 1 - keep
    del chain.devs[keep + 1 :]
    _drop_last(chain, min(dropped, len(chain.nodes)))


def _merge(chain: _Chain, c: Crossing) -> None:
    """A value made at hop `c.merge` meets, on its own device, one that crossed since: the
    crossings after that hop took a branch away and back (an expert on another GPU whose
    output is added to the input's device), while the activation stayed. Drop them, unless what is added
    back is the very value that left (`h = h + blk(h.to(d)).to(h.device)`): then the activation went out and
    back, leaving its residual stream behind, and the next block's input goes on from what came back."""
    since = c.merge or 0
    left = next((i for i, h in enumerate(chain.hops) if h > since), None)
    if left is not None and c.made_by and chain.made[left] == c.made_by:
        chain.residual = True
        return
    _drop_branch(chain, since, c.src)


def _drop_branch(chain: _Chain, since: int, dev: str) -> None:
    """The crossings after hop `since` went from `dev` and came back to it while data made
    before them stayed there: drop them, unless they alternate among themselves."""
    later = len(chain.hops) - next((i for i, h in enumerate(chain.hops) if h > since), len(chain.hops))
    if not later or any(h <= since for h in chain.hops[-later:]):
        return  # the later crossings are not the chain's last ones: leave the chain as it is
    mark = chain.marks[-later]
    if mark < 1 or chain.devs[mark - 1] != dev:
        return  # the activation was not on this device before the branch
    away = chain.devs[mark:-1]
    if dev in away or len(set(away)) != len(away):
        return  # the branch itself goes back and forth (a tower dealt round robin): its crossings count
    del chain.devs[mark:]
    _drop_last(chain, later)


def _drop_last(chain: _Chain, n: int) -> None:
    """Forget the last `n` crossings (and the first transfer back, if it was one of them)."""
    if n <= 0:
        return
    dropped = chain.nodes[-n:]
    del chain.nodes[-n:], chain.hops[-n:], chain.marks[-n:], chain.made[-n:]
    if chain.first_revisit is not None and any(d is chain.first_revisit for d in dropped):
        chain.first_revisit = None


def _host(dev: str) -> bool:
    return dev == "cpu"
