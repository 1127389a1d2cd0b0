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
        yield from self._placed_copies_dropped(ctx)

    def _placed_copies_dropped(self, ctx: FileContext) -> Iterator[Finding]:
        copiers = _functions_returning_a_placed_copy(ctx.module)
        if not copiers:
            return
        for n in walk(ctx.module):
            if not (isinstance(n, cst.Expr) and isinstance(n.value, cst.Call) and isinstance(n.value.func, cst.Name)):
                continue
            name = n.value.func.value
            made = copiers.get(name)
            if made is None or not n.value.args:
                continue
            arg = ctx.code(n.value.args[0].value)
            yield self.finding(
                ctx,
                n.value,
                f"`{name}()` places a copy (`{ctx.code(made)}`, line {ctx.line(made)}) and returns it, and this "
                f"statement drops it: `{arg}` itself is never moved, so it runs where it was and the split never "
                f"happens. Keep the result: `{arg} = {ctx.code(n.value)}`.",
                suggestion=f"`{arg} = {ctx.code(n.value)}`",
            )

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


# Functions that copy a module whole.
_COPIERS = frozenset({"copy.deepcopy", "copy.copy", "deepcopy"})


def _functions_returning_a_placed_copy(module: cst.Module) -> dict[str, cst.Call]:
    """Function name -> the copy it makes, for the module-level functions that copy their first argument
    (`placed = copy.deepcopy(model)`), move parts of the copy (`placed.head.to(dev)`) and return it alone."""
    out: dict[str, cst.Call] = {}
    for fn in module.body:
        if not isinstance(fn, cst.FunctionDef) or not fn.params.params:
            continue
        first = fn.params.params[0].name.value
        returns = [n for n in walk(fn.body) if isinstance(n, cst.Return)]
        if len(returns) != 1 or not isinstance(returns[0].value, cst.Name):
            continue
        copy_name = returns[0].value.value
        made = [
            n.value
            for n in walk(fn.body)
            if isinstance(n, cst.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0].target, cst.Name)
            and n.targets[0].target.value == copy_name
        ]
        copy = made[0] if len(made) == 1 else None
        if not isinstance(copy, cst.Call) or not _copy_of(copy, first):
            continue
        if any(plain_device_move(n) and _rooted_at(n, copy_name) for n in walk(fn.body)):
            out[fn.name.value] = copy
    return out


def _copy_of(value: cst.Call, name: str) -> bool:
    """`copy.deepcopy(name)`."""
    return (
        (dotted(value.func) or "") in _COPIERS
        and len(value.args) == 1
        and isinstance(value.args[0].value, cst.Name)
        and value.args[0].value.value == name
    )


def _rooted_at(call: cst.CSTNode, name: str) -> bool:
    """`name.x.to(dev)`, `name.to(dev)`: a move of `name` or of one of its attributes. (A loop over the copy's
    blocks moves them too, but the one direct move the functions make is enough to know it places.)"""
    node = call.func.value if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) else None
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return isinstance(node, cst.Name) and node.value == name
