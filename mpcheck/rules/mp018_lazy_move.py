"""MP018: moves written inside a lazy iterable (`map(...)`, a generator expression) made as a statement and
dropped: Python 3 never runs them."""

from __future__ import annotations

from collections.abc import Iterator

from mpcheck.devices.events import LazyMove
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
