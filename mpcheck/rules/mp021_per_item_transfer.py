"""MP021 (the linter's form): a loop over a tensor's rows that moves each row to another device, one copy per row."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import Transfer
from mpcheck.devices.values import conflict, show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class PerItemTransfer(Rule):
    code = "MP021"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in once_per_node(ctx.model.facts(Transfer), lambda ev: ev.rows_of is not None):
            walked = ev.rows_of
            src, dst = single(ev.value.devs), single(ev.devs)
            if walked is None or not ctx.owns(walked) or src is None or dst is None:
                continue
            if src.startswith("sym:") or dst.startswith("sym:") or not conflict(ev.value.devs, ev.devs):
                continue  # to where it is: no copy
            if not (dst.startswith("cuda") or src.startswith("cuda")):
                continue
            node = ev.node
            row = (
                ctx.code(node.func.value)
                if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                else "it"
            )
            whole = ctx.code(walked)
            piece = "row"
            if isinstance(walked, cst.Call) and isinstance(walked.func, cst.Attribute):
                # `feats.split(sizes)` walked by a comprehension that only moves each chunk: one copy of `feats`
                if walked.func.attr.value in ("split", "chunk", "tensor_split", "unbind"):
                    whole, piece = ctx.code(walked.func.value), "chunk"
            # (from a GPU to the host each copy is also a wait: the host reads the row as soon as it lands)
            cost = "each paying a copy's fixed cost" if dst.startswith("cuda") else "each a copy the host waits for"
            yield self.finding(
                ctx,
                node,
                f"`{row}` is a {piece} of `{whole}` (line {ctx.line(walked)}), moved from {show(src)} to {show(dst)} on "
                f"every pass of the loop over its {piece}s: one copy per {piece}, {cost}, where one copy of `{whole}` "
                f"before the loop would do. Move it once and walk the copy (`{whole}.to(...)` before the loop).",
                devices=[src, dst],
                suggestion=f"move `{whole}` to {dst} once, before the loop",
            )
