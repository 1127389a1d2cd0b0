"""MP001: a tensor known to be on one device reaches a module, parameter or op on another."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.describe import MODE_WORDS, move_fix, origin_text, value_text, via_text
from mpcheck.devices.events import Mismatch
from mpcheck.devices.values import Obj, device_literal, known_tensor, show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class MissingTransfer(Rule):
    code = "MP001"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
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
                assert here is not None  # the value's device, where the module must be placed
                call = ev.node
                assert isinstance(call, cst.Call)  # the module's call
                yield self.finding(
                    ctx,
                    call,
                    f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but `{ctx.code(call.func)}`"
                    f"{_built_at(ctx, mod)} was never placed, so it is still on the CPU{MODE_WORDS.get(ev.mode, '')}: "
                    f"place it in __init__, e.g. `.to({device_literal(here)})`.",
                    devices=[here, there],
                    modules=[ctx.code(call.func)],
                    suggestion=f"place `{ctx.code(call.func)}` with `.to({device_literal(here)})` in __init__",
                )
                continue
            assert there is not None  # a mismatch names the device the value meets
            moved_tensor = _moved_tensor(expr)
            varies = ctx.model.one_target(ev) != there
            target_code = _device_of(ctx, ev) if varies else None
            if target_code is not None:
                # Visits of this line need different devices (a loop over blocks on two GPUs):
                # no one device fits; the device of what it meets on each visit does.
                moved = ctx.code(moved_tensor) if moved_tensor is not None else name
                fix = (
                    f"{moved}.to({target_code})"
                    if moved.isidentifier() or moved_tensor is not None
                    else f"({moved}).to({target_code})"
                )
            elif moved_tensor is not None:
                # The value was moved, to the wrong device: fix that move.
                fix = f"{ctx.code(moved_tensor)}.to({device_literal(there)})"
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
                f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but {meets}{MODE_WORDS.get(ev.mode, '')}{via_text(ctx, ev.via)}: "
                f"{advice}.",
                devices=[here, there],
                modules=[ev.what] if ev.op == "module" else [],
                suggestion=advice,
                fix=move_fix(ctx, expr, repr(there)) if _fixable(ctx, ev, v, there) else None,
            )


def _device_of(ctx: FileContext, ev: Mismatch) -> str | None:
    """Code for the device of what the value meets: `next(block.parameters()).device` for a
    module called by name, `x.device` for the other operand of an op; None when not nameable."""
    if ev.op == "module" and isinstance(ev.node, cst.Call) and isinstance(ev.node.func, (cst.Name, cst.Attribute)):
        return f"next({ctx.code(ev.node.func)}.parameters()).device"
    other = ev.what_expr
    if ev.op != "module" and isinstance(other, (cst.Name, cst.Attribute)):
        return f"{ctx.code(other)}.device"
    return None


def _moved_tensor(expr: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """`t` when `expr` is a move `t.to(...)` / `t.cuda()` / `t.cpu()`, else None."""
    if (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in ("to", "cuda", "cpu")
    ):
        return expr.func.value
    return None


def _fixable(ctx: FileContext, ev: Mismatch, v: Obj, there: str) -> bool:
    """`.to(there)` is right only on a tensor (a list has no .to()) and only where
    every visit of the site needs `there` (not a loop over blocks on two devices).
    An operand of a torch function or tensor method is a tensor whatever the model
    inferred (they take nothing else); a module's forward or `+` may take anything."""
    if there.startswith("sym:") or ctx.model.one_target(ev) != there:
        return False
    return known_tensor(v) or ev.op not in ("module", "op")


def _built_at(ctx: FileContext, mod: Obj) -> str:
    """' (built at line 8)': where a module that was never placed was created, when known."""
    return f" (built at line {ctx.line(mod.at)})" if isinstance(mod.at, cst.Call) else ""
