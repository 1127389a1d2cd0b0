"""MP008: a loss, criterion or metric fed with outputs and targets (or weights) on different devices."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.codes import is_metric_function
from mpcheck.devices.describe import (
    MODE_WORDS,
    move_fix,
    origin_text,
    root_name,
    value_text,
    via_text,
)
from mpcheck.devices.events import LossMismatch, Mismatch
from mpcheck.devices.values import LOSS_OF, Obj, Val, device_literal, show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.made_on_current import made_on_current
from mpcheck.rules.metrics import in_a_metric, weighs_a_loss
from mpcheck.rules.one_move import OneMove, later_lines
from mpcheck.rules.words import FLOW_WORDS


class LossDeviceMismatch(Rule):
    code = "MP008"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        yield from _metric_mismatches(self, ctx)
        events = list(once_per_node(ctx.model.facts(LossMismatch)))
        one_move = OneMove(ctx, events)
        for ev in events:
            if one_move.later(ev):
                continue  # the same targets, left where they were, at another loss: the first one's finding
            same = one_move.lines(ev)
            v, other = ev.value, ev.other
            a_expr, b_expr = ev.other_expr, ev.expr
            if ev.weighs is not None:
                yield _weights_finding(self, ctx, ev)
                continue
            a = value_text(ctx, a_expr, other, "the prediction")
            b = value_text(ctx, b_expr, v, "the class weights")
            da, db = single(other.devs), single(v.devs)
            loss = ctx.code(ev.node.func) if isinstance(ev.node, cst.Call) else "the loss"
            line = ctx.line(ev.node)
            fix = _targets_fix(ctx, a_expr, a, da, b_expr, b)
            also = ""
            if same:  # one move before the first loss mends them all (rules/one_move.py)
                also = f" (and at {later_lines(same)} too)"
            yield self.finding(
                ctx,
                ev.node,
                f"`{loss}` gets `{a}` on {show(da)} ({origin_text(ctx, other)}) and `{b}` on {show(db)} "
                f"({origin_text(ctx, v)}){also}{MODE_WORDS.get(ev.mode, '')}{via_text(ctx, ev.via)}: move the targets to the outputs' device "
                f"(the small tensor, not the logits), e.g. `{fix}` before line {line}.",
                devices=[da, db],
                suggestion=f"{fix} before line {line}",
                # `.to(a.device)` follows the outputs on every visit, and both are tensors:
                # the facts come from torch losses, which take nothing else.
                fix=move_fix(ctx, b_expr, f"{a}.device") if isinstance(a_expr, cst.Name) and not also else None,
            )


def _weights_finding(rule: Rule, ctx: FileContext, ev: LossMismatch) -> Finding:
    """A loss module's class weights (a buffer of the module) on another device than the outputs it gets:
    the module is what moves (`criterion.to(...)` moves its weight), not a tensor of the call."""
    v, out = ev.value, ev.other
    loss = ctx.code(ev.node.func) if isinstance(ev.node, cst.Call) else "the loss"
    there = single(out.devs)
    outputs = value_text(ctx, ev.other_expr, out, "the outputs")
    target = f"{outputs}.device" if isinstance(ev.other_expr, cst.Name) else device_literal(there or "")
    fix = f"{loss}.to({target})" if isinstance(ev.node, cst.Call) and isinstance(ev.node.func, cst.Name) else None
    how = f"e.g. `{fix}` before line {ctx.line(ev.node)}" if fix else f"e.g. with `.to({target})` where it is built"
    return rule.finding(
        ctx,
        ev.node,
        f"`{loss}` holds class weights on {show(single(v.devs))} ({origin_text(ctx, v)}), but gets `{outputs}` on "
        f"{show(there)} ({origin_text(ctx, out)}){MODE_WORDS.get(ev.mode, '')}{via_text(ctx, ev.via)}: a loss "
        f"module's `weight` is a buffer that moves with it, so move the loss to the outputs' device, {how} (or "
        f"build the weights there).",
        devices=[there, single(v.devs)],
        suggestion=f"move the loss module to {show(there)}",
    )


def _metric_mismatches(rule: Rule, ctx: FileContext) -> Iterator[Finding]:
    """Predictions and targets of a metric on two devices, or a loss's value and a mask or weights
    (rules/metrics.py), at the operation; once per targets' variable in a function (`inter = (probs *
    target).sum()` then `union = probs.sum() + target.sum()`: one move of `target` mends both)."""
    done: set[tuple[str, str]] = set()
    for ev in once_per_node(ctx.model.facts(Mismatch)):
        if not in_a_metric(ctx, ev) or made_on_current(ctx, ev) is not None or ev.other is None:
            continue
        # The side that moves: the targets, the mask or the weights, not the loss's value.
        moves_value = not (isinstance(ev.value, Obj) and ev.value.origin == LOSS_OF)
        v: Val = ev.value
        o: Val = ev.other
        v_expr, o_expr = ev.expr, ev.what_expr
        if not moves_value:
            v, v_expr, o, o_expr = o, o_expr, v, v_expr
        tgt = root_name(v_expr, ctx.imported_names)
        function = ctx.function_name(ev.node)
        if is_metric_function(function) and not weighs_a_loss(ev):
            # A function named for a metric is reported once (as at run time): its targets' one missing move
            # shows at each operation, through what is computed from them too (`target_area`).
            tgt = f"<{function}: {ev.via!r}>"
        if tgt:
            key = (function, tgt)
            if key in done:
                continue
            done.add(key)
        here, there = single(getattr(v, "devs", None)), single(getattr(o, "devs", None))
        if here is None or there is None:
            continue
        name = value_text(ctx, v_expr, v, "the other operand")
        other = value_text(ctx, o_expr, o, ev.what if moves_value and ev.what else "the other operand")
        line = ctx.line(ev.node)
        fix = _targets_fix(ctx, o_expr, other, there, v_expr, name)
        tail = f"{MODE_WORDS.get(ev.mode, '')}{via_text(ctx, ev.via)}"
        if weighs_a_loss(ev):
            msg = (
                f"`{name}` on {show(here)} ({origin_text(ctx, v)}) meets `{other}`, a loss's value on {show(there)} "
                f"({origin_text(ctx, o)}){tail}: move the mask or weights to the loss's device, e.g. `{fix}` "
                f"before line {line}."
            )
        else:
            msg = (
                f"a metric compares `{other}` on {show(there)} ({origin_text(ctx, o)}) with `{name}` on "
                f"{show(here)} ({origin_text(ctx, v)}){tail}: move the targets to the predictions' device, "
                f"e.g. `{fix}` before line {line}."
            )
        yield rule.finding(ctx, ev.node, msg, devices=[there, here], suggestion=f"{fix} before line {line}")


def _targets_fix(
    ctx: FileContext,
    out_expr: cst.BaseExpression | None,
    out_text: str,
    out_dev: str | None,
    tgt_expr: cst.BaseExpression | None,
    tgt_text: str,
) -> str:
    """The line that moves the small tensor (targets, weights) to the large one (the outputs), not the reverse."""
    out = root_name(out_expr, ctx.imported_names) or (out_text if out_text.isidentifier() else None)
    dev = f"{out}.device" if out else repr(out_dev)
    tgt = root_name(tgt_expr, ctx.imported_names) or (tgt_text if tgt_text.isidentifier() else None)
    if (
        isinstance(tgt_expr, cst.Call)
        and isinstance(tgt_expr.func, cst.Attribute)
        and tgt_expr.func.attr.value in ("to", "cuda")
    ):
        return f"{ctx.code(tgt_expr.func.value)}.to({dev})"
    if tgt:
        return f"{tgt} = {tgt}.to({dev})"
    if isinstance(tgt_expr, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)):
        return f"{tgt_text}.to({dev})"  # binds tighter than any operator: no parentheses needed
    return f"({tgt_text}).to({dev})"
