"""MP018: moves that never take effect: written inside a lazy iterable (`map(...)`, a generator expression)
made as a statement and dropped, which Python 3 never runs; a tensor's own `.to()` made as a statement in a
loop over a module's parameters (`p.data.to(d)`), whose moved copy is dropped; or a forward (pre-)hook that moves
its inputs or output into its own local name and returns nothing, so the module gets them as they were."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import DroppedTensorMove, LazyMove
from mpcheck.devices.moves import plain_device_move
from mpcheck.devices.names import dotted
from mpcheck.devices.walk import walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS

# Module methods that register a hook whose return value replaces the inputs (pre-hooks) or the output.
_HOOK_REGISTRARS = frozenset({"register_forward_pre_hook", "register_forward_hook"})


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
        yield from self._hooks_that_return_nothing(ctx)

    def _hooks_that_return_nothing(self, ctx: FileContext) -> Iterator[Finding]:
        registered = _registered_hooks(ctx.module)
        for fn in walk(ctx.module):
            if not isinstance(fn, cst.FunctionDef) or fn.name.value not in registered:
                continue
            lost = _moved_into_a_parameter_then_dropped(fn)
            if lost is None:
                continue
            name = lost.targets[0].target.value  # type: ignore[attr-defined]
            registrar, at = registered[fn.name.value]
            yield self.finding(
                ctx,
                lost,
                f"`{fn.name.value}` is registered with `{registrar}` (line {ctx.line(at)}), and it moves "
                f"`{name}` into its own local name and returns nothing: a hook hands the module new "
                f"{'inputs' if registrar == 'register_forward_pre_hook' else 'output'} only by returning them, so "
                f"PyTorch goes on with them as they were and nothing is moved. Return them: "
                f"`return {ctx.code(lost.value)}`.",
                suggestion=f"`return {ctx.code(lost.value)}`",
            )


def _registered_hooks(module: cst.Module) -> dict[str, tuple[str, cst.CSTNode]]:
    """Function name -> (the registrar, the call) for `m.register_forward_pre_hook(f)` and
    `m.register_forward_pre_hook(partial(f, dev))` in the file."""
    out: dict[str, tuple[str, cst.CSTNode]] = {}
    for n in walk(module):
        if not (
            isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in _HOOK_REGISTRARS
        ):
            continue
        if not n.args:
            continue
        hook = n.args[0].value
        if isinstance(hook, cst.Call) and (dotted(hook.func) or "").rsplit(".", 1)[-1] == "partial" and hook.args:
            hook = hook.args[0].value
        if isinstance(hook, cst.Name):
            out.setdefault(hook.value, (n.func.attr.value, n))
    return out


def _moved_into_a_parameter_then_dropped(fn: cst.FunctionDef) -> cst.Assign | None:
    """`args = tuple(a.to(device) for a in args)` as a statement of the hook's body, to one of its parameters,
    when the body returns no value anywhere and reads that name nowhere after it."""
    if any(isinstance(n, cst.Return) and n.value is not None for n in walk(fn.body)):
        return None
    params = {p.name.value for p in fn.params.params}
    body = list(fn.body.body)
    for i, stmt in enumerate(body):
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            continue
        a = stmt.body[0]
        if not (isinstance(a, cst.Assign) and len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name)):
            continue
        name = a.targets[0].target.value
        if name not in params or not any(plain_device_move(n) for n in walk(a.value)):
            continue
        later = [n for s in body[i + 1 :] for n in walk(s)]
        if any(isinstance(n, cst.Name) and n.value == name for n in later):
            continue
        return a
    return None
