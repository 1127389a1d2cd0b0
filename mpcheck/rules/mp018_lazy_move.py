"""MP018: moves that never take effect: written inside a lazy iterable (`map(...)`, a generator expression)
made as a statement and dropped, which Python 3 never runs; or a tensor's own `.to()` made as a statement in a
loop over a module's parameters (`p.data.to(d)`), whose moved copy is dropped."""

from __future__ import annotations

from collections.abc import Iterator

from mpcheck.devices.events import DroppedTensorMove, LazyMove
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class LazyMoveRule(Rule):
    code = "MP018"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in ctx.model.facts(LazyMove):
            yield self.finding(
                ctx,
                ev.node,
                f"{ev.how} is lazy in Python 3, and this statement drops it: it is never iterated, so the "
                f"`.to()` / `.cuda()` inside never runs and nothing is moved. Write the loop out (`for stage, dev "
                f"in zip(stages, devices): stage.to(dev)`), or consume it (`list(...)`).",
                suggestion="replace it with a `for` loop",
            )
        for d in ctx.model.facts(DroppedTensorMove):
            move = ctx.code(d.node)
            var = d.loop_var
            rest = (
                move.removeprefix(f"{var}.data.") if move.startswith(f"{var}.data.") else move.removeprefix(f"{var}.")
            )
            yield self.finding(
                ctx,
                d.node,
                f"`{move}` returns a moved copy and this statement drops it: a tensor's `.to()` / `.cuda()` is not "
                f"in place (only a module's is), so every tensor this loop walks stays where it was. Assign the "
                f"copy back to the tensor's data (`{var}.data = {var}.data.to(...)`), or move the module itself.",
                suggestion=f"`{var}.data = {var}.data.{rest}`",
            )
