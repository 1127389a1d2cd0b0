"""MP024: a parameter's default reads a device setting that a function of the module changes later.

Python evaluates a default once, when the `def` runs: `def __init__(self, device=_STAGE_DEVICE)` keeps the
value `_STAGE_DEVICE` had then, whatever a `set_stage_device()` (`global _STAGE_DEVICE`) assigns afterwards.
A call that leaves the argument out gets the old device, so the stages meant for each GPU all land on the
first. Plain syntax: the module's own globals, the functions that rebind them, and the defaults that read them.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.walk import walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext

_DEVICE_WORDS = ("device", "gpu", "cuda", "dev")


class DefaultKeepsOldDevice(Rule):
    code = "MP024"
    needs = ("global ",)

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        settings = _device_settings(ctx.module)
        if not settings:
            return
        rebound = _rebound_by_functions(ctx.module, set(settings))
        if not rebound:
            return
        classes = {id(f): c for c in walk(ctx.module) if isinstance(c, cst.ClassDef) for f in c.body.body}
        for fn in walk(ctx.module):
            if not isinstance(fn, cst.FunctionDef):
                continue
            positional = [*fn.params.posonly_params, *fn.params.params]
            if id(fn) in classes and positional:
                positional = positional[1:]  # self
            for param in (*positional, *fn.params.kwonly_params):
                if param.default is None:
                    continue
                read = next(
                    (n.value for n in walk(param.default) if isinstance(n, cst.Name) and n.value in rebound), None
                )
                if read is None:
                    continue
                at = positional.index(param) if param in positional else None
                call = next(
                    (c for c in _calls_of(ctx.module, fn, classes.get(id(fn))) if _leaves_out(c, param, at)), None
                )
                if call is None:
                    continue  # every call in the file passes it (or none is here): the default is never used here
                setter, name = rebound[read], param.name.value
                yield self.finding(
                    ctx,
                    call,
                    f"`{ctx.code(call.func)}(...)` leaves `{name}` out, so it gets the default of line "
                    f"{ctx.line(param.default)}, which read `{read}` once, when `def {fn.name.value}` ran "
                    f"({ctx.code(settings[read])}); `{setter.name.value}()` (line {ctx.line(setter)}) assigns `{read}` "
                    f"later, and the default never sees it: what is built here lands on the old device. Pass "
                    f"`{name}=` here, or default it to None and read `{read}` in the body "
                    f"(`{name} = {read} if {name} is None else {name}`).",
                    suggestion=f"pass `{name}=` explicitly, or default it to None and read `{read}` in the body",
                )


def _calls_of(module: cst.Module, fn: cst.FunctionDef, cls: cst.ClassDef | None) -> Iterator[cst.Call]:
    """Calls of `fn` in the file: `f(...)`, `Cls(...)` for an `__init__`, `x.meth(...)` for another method."""
    for node in walk(module):
        if not isinstance(node, cst.Call):
            continue
        f = node.func
        if cls is None and isinstance(f, cst.Name) and f.value == fn.name.value:
            yield node
        elif cls is not None and fn.name.value == "__init__" and isinstance(f, cst.Name) and f.value == cls.name.value:
            yield node
        elif cls is not None and fn.name.value != "__init__" and isinstance(f, cst.Attribute):
            if f.attr.value == fn.name.value:
                yield node


def _leaves_out(call: cst.Call, param: cst.Param, at: int | None) -> bool:
    """Does `call` certainly leave `param` (positional index `at`, None for keyword-only) to its default?"""
    if any(a.star for a in call.args):
        return False  # `*args` / `**kwargs`: it may be in them
    if any(a.keyword is not None and a.keyword.value == param.name.value for a in call.args):
        return False
    given = sum(1 for a in call.args if a.keyword is None)
    return at is None or given <= at


def _device_settings(module: cst.Module) -> dict[str, cst.BaseExpression]:
    """Names the module binds at its top level to a device (`"cuda:0"`, `torch.device(...)`) or under a name
    that says device (`_STAGE_DEVICE = 0`): name -> the value bound."""
    out: dict[str, cst.BaseExpression] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = small.targets[0].target
                if isinstance(target, cst.Name) and _a_device(target.value, small.value):
                    out[target.value] = small.value
            elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.value is not None:
                if _a_device(small.target.value, small.value):
                    out[small.target.value] = small.value
    return out


def _a_device(name: str, value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.SimpleString):
        text = value.evaluated_value
        return isinstance(text, str) and (text.startswith("cuda") or text == "cpu")
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "device":
        return True
    return any(w in name.lower() for w in _DEVICE_WORDS) and isinstance(value, (cst.Integer, cst.Name, cst.Call))


def _rebound_by_functions(module: cst.Module, names: set[str]) -> dict[str, cst.FunctionDef]:
    """Which of `names` a function of the module assigns after declaring it `global`: name -> that function."""
    out: dict[str, cst.FunctionDef] = {}
    for fn in walk(module):
        if not isinstance(fn, cst.FunctionDef):
            continue
        declared = {n.name.value for g in walk(fn) if isinstance(g, cst.Global) for n in g.names} & names
        if not declared:
            continue
        for node in walk(fn.body):
            targets: list[cst.BaseExpression] = []
            if isinstance(node, cst.Assign):
                targets = [t.target for t in node.targets]
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                targets = [node.target]
            for t in targets:
                for n in walk(t):
                    if isinstance(n, cst.Name) and n.value in declared:
                        out.setdefault(n.value, fn)
    return out
