"""MP014: a loss's large predictions moved to its small targets' GPU instead of the targets to theirs."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.describe import moved_tensor
from mpcheck.devices.events import PredictionsMovedToTargets
from mpcheck.devices.values import device_literal, show
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class CostlyTransferDirection(Rule):
    code = "MP014"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in once_per_node(ctx.model.facts(PredictionsMovedToTargets)):
            moved = moved_tensor(ev.node)
            preds = f"`{ctx.code(moved)}`" if moved is not None else "the predictions"
            targets = f"`{ctx.code(ev.targets_expr)}`" if ev.targets_expr is not None else "the targets"
            op = ev.op.rsplit(".", 1)[-1]
            fix = (
                f"keep {preds} on {show(ev.src)} and move {targets} there instead, e.g. "
                f"`{_plain(ctx, ev.targets_expr)}.to({device_literal(ev.src)})` at line {ctx.line(ev.loss)}"
            )
            yield self.finding(
                ctx,
                ev.node,
                f"{preds} (the predictions of `{op}`, line {ctx.line(ev.loss)}) is moved from {show(ev.src)} to "
                f"{show(ev.dst)}, where the targets {targets} are: the predictions carry a class dimension the targets lack, "
                f"so this copies about that many times more data, and the gradient crosses back the same way. "
                f"{fix[0].upper()}{fix[1:]}.",
                devices=[ev.src, ev.dst],
                suggestion=fix,
            )


def _plain(ctx: FileContext, expr: cst.BaseExpression | None) -> str:
    if expr is None:
        return "targets"
    text = ctx.code(expr)
    return text if isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) else f"({text})"
