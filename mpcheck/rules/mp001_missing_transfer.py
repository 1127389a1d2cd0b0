"""MP001: a tensor known to be on one device reaches a module, parameter or op on another."""

from __future__ import annotations

import libcst as cst

from mpcheck.devices.describe import MODE_WORDS, move_fix, origin_text, value_text
from mpcheck.devices.events import Mismatch
from mpcheck.devices.values import device_literal, known_tensor, show, single
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.words import FLOW_WORDS


class MissingTransfer(Rule):
    code = "MP001"
    needs = FLOW_WORDS

    def check(self, ctx):
        for ev in once_per_node(ctx.model.facts(Mismatch)):
            v = ev.value
            here, there = single(v.devs), single(ev.target)
            name = value_text(ctx, ev.expr, v)
            line = ctx.line(ev.node)
            if ev.op == "module":
                what = ev.what
                if not what.startswith("the first stage") and isinstance(ev.node, cst.Call):
                    what = ctx.code(ev.node.func)
                target = what if what.startswith("the first stage") else f"`{what}`"
                meets = f"{target} is on {show(there)}"
            else:
                other = value_text(ctx, ev.what_expr, ev.other, ev.what or "the other operand")
                op = ev.op
                where = "" if op == "op" else f" in `{op}`"
                meets = f"it meets `{other}`{where}, which is on {show(there)}"
            expr = ev.expr
            mod = ev.module
            if there == "cpu" and mod is not None and "never placed" in (mod.origin or ""):
                yield self.finding(
                    ctx,
                    ev.node,
                    f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but `{ctx.code(ev.node.func)}` was never "
                    f"placed, so it is still on the CPU{MODE_WORDS.get(ev.mode, '')}: place it in __init__, e.g. "
                    f"`.to({device_literal(here)})`.",
                    devices=[here, there],
                    modules=[ctx.code(ev.node.func)],
                    suggestion=f"place `{ctx.code(ev.node.func)}` with `.to({device_literal(here)})` in __init__",
                )
                continue
            if _is_move(expr):
                # The value was moved, to the wrong device: fix that move.
                fix = f"{ctx.code(expr.func.value)}.to({device_literal(there)})"
            elif name.isidentifier():
                fix = f"{name} = {name}.to({device_literal(there)})"
            elif isinstance(expr, (cst.Call, cst.Attribute, cst.Subscript)):
                fix = f"{name}.to({device_literal(there)})"
            else:
                fix = f"({name}).to({device_literal(there)})"
            yield self.finding(
                ctx,
                ev.node,
                f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but {meets}{MODE_WORDS.get(ev.mode, '')}: "
                f"move it first, e.g. `{fix}` before line {line}.",
                devices=[here, there],
                modules=[ev.what] if ev.op == "module" else [],
                suggestion=f"{fix} before line {line}",
                fix=move_fix(ctx, expr, repr(there)) if _fixable(ctx, ev, v, there) else None,
            )


def _is_move(expr) -> bool:
    return (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in ("to", "cuda", "cpu")
    )


def _fixable(ctx, ev: Mismatch, v, there: str) -> bool:
    """`.to(there)` is right only on a tensor (a list has no .to()) and only where
    every visit of the site needs `there` (not a loop over blocks on two devices).
    An operand of a torch function or tensor method is a tensor whatever the model
    inferred (they take nothing else); a module's forward or `+` may take anything."""
    if there.startswith("sym:") or ctx.model.one_target(ev) != there:
        return False
    return known_tensor(v) or ev.op not in ("module", "op")
