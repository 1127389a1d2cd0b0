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
            varies = ctx.model.one_target(ev) != there
            target_code = _device_of(ctx, ev) if varies else None
            if target_code is not None:
                # Visits of this line need different devices (a loop over blocks on two GPUs):
                # no one device fits; the device of what it meets on each visit does.
                moved = ctx.code(expr.func.value) if _is_move(expr) else name
                fix = (
                    f"{moved}.to({target_code})"
                    if moved.isidentifier() or _is_move(expr)
                    else f"({moved}).to({target_code})"
                )
            elif _is_move(expr):
                # The value was moved, to the wrong device: fix that move.
                fix = f"{ctx.code(expr.func.value)}.to({device_literal(there)})"
            elif name.isidentifier():
                fix = f"{name} = {name}.to({device_literal(there)})"
            elif isinstance(expr, (cst.Call, cst.Attribute, cst.Subscript)):
                fix = f"{name}.to({device_literal(there)})"
            else:
                fix = f"({name}).to({device_literal(there)})"
            advice = (
                f"the line runs for several devices, so move it to the device it meets on each visit, e.g. `{fix}` "
                f"at line {line}"
                if target_code is not None
                else f"move it first, e.g. `{fix}` before line {line}"
            )
            yield self.finding(
                ctx,
                ev.node,
                f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but {meets}{MODE_WORDS.get(ev.mode, '')}: "
                f"{advice}.",
                devices=[here, there],
                modules=[ev.what] if ev.op == "module" else [],
                suggestion=advice,
                fix=move_fix(ctx, expr, repr(there)) if _fixable(ctx, ev, v, there) else None,
            )


def _device_of(ctx, ev: Mismatch) -> str | None:
    """Code for the device of what the value meets: `next(block.parameters()).device` for a
    module called by name, `x.device` for the other operand of an op; None when not nameable."""
    if ev.op == "module" and isinstance(ev.node, cst.Call) and isinstance(ev.node.func, (cst.Name, cst.Attribute)):
        return f"next({ctx.code(ev.node.func)}.parameters()).device"
    other = ev.what_expr
    if ev.op != "module" and isinstance(other, (cst.Name, cst.Attribute)):
        return f"{ctx.code(other)}.device"
    return None


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
