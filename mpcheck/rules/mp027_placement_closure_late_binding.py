"""MP027: a function made in a loop, kept for later, places on the loop's device variable: it reads the variable
when it runs, after the loop, so every one of them places on the last device.

`for name, dev in plan.items(): policy[name] = lambda m: m.to(dev)` stores one lambda per part, but a closure
reads `dev` when it is called, not when it is made: by then the loop has ended and `dev` is the plan's last device.
Every part goes there. The same holds for hooks registered in the loop (`blk.register_forward_pre_hook(lambda m, a:
(a[0].to(dev),))`: each block's input goes to the last block's GPU) and for a `def` made in the loop and stored.
flake8-bugbear's B023 reports the general form; this rule reports the placements, with the devices' fix. Plain
syntax: the loop, the closure, what it reads and whether it is kept rather than called at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.walk import assigned, target_names, walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS

# Calls that keep the function they are given, to call it later (not `map`, `apply`, `sorted`: they call it now).
_KEEPING_CALLS = frozenset({"append", "extend", "insert", "setdefault", "add"})
_PLACING = frozenset({"to", "cuda"})


class PlacementClosureLateBinding(Rule):
    code = "MP027"
    needs = FLOW_WORDS  # (a split names a second device: words.py)

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        kept = _kept_functions(ctx.module)
        for loop in walk(ctx.module):
            made = _made_per_pass(loop, kept)
            if made is None:
                continue
            loop_vars, functions, what = made
            if not loop_vars:
                continue
            for fn in functions:
                late = _places_with(fn, loop_vars)
                if late is None:
                    continue
                name, place = late
                yield self.finding(
                    ctx,
                    fn,
                    f"This function is made on each pass of the {what} at line {ctx.line(loop)} and kept to run later, "
                    f"and it places on the loop's `{name}` (`{ctx.code(place)}`): a closure reads `{name}` when it "
                    f"runs, after the loop has ended, so every one of them places on the last `{name}`. Bind the "
                    f"pass's value when the function is made: a default argument `{name}={name}`.",
                    suggestion=f"add `{name}={name}` to the function's parameters",
                )


def _made_per_pass(
    loop: cst.CSTNode, kept: set[int]
) -> tuple[set[str], list[cst.Lambda | cst.FunctionDef], str] | None:
    """(the loop's names, the functions each pass makes and keeps, "loop" or "comprehension"): a `for` loop's
    kept lambdas and defs; a comprehension's item that is a lambda (`[lambda m: m.to(dev) for dev in devices]`,
    each one kept in the list it builds, and each reads the comprehension's `dev` when it runs)."""
    if isinstance(loop, cst.For):
        fns = [fn for fn in walk(loop.body) if isinstance(fn, (cst.Lambda, cst.FunctionDef)) and id(fn) in kept]
        return set(target_names(loop.target)), fns, "loop"
    # (Not a generator expression: read in step with its use, `zip((lambda m: m.to(d) for d in devs), parts)`,
    # each function runs before the next pass rebinds `d`.)
    if isinstance(loop, (cst.ListComp, cst.SetComp, cst.DictComp)):
        item = loop.value if isinstance(loop, cst.DictComp) else loop.elt
        if not isinstance(item, cst.Lambda):
            return None
        names: set[str] = set()
        clause: cst.CompFor | None = loop.for_in
        while clause is not None:
            names.update(target_names(clause.target))
            clause = clause.inner_for_in
        return names, [item], "comprehension"
    return None


def _kept_functions(module: cst.Module) -> set[int]:
    """The lambdas and defs that a statement keeps for later: stored into an item or an attribute
    (`policy[name] = lambda ...`), appended to a container, registered as a hook, or a def whose name is kept so."""
    kept: set[int] = set()
    stored_names: set[str] = set()

    def keep(value: cst.BaseExpression) -> None:
        if isinstance(value, cst.Lambda):
            kept.add(id(value))
        elif isinstance(value, cst.Name):
            stored_names.add(value.value)

    for n in walk(module):
        if isinstance(n, cst.Assign) and any(isinstance(t.target, (cst.Subscript, cst.Attribute)) for t in n.targets):
            keep(n.value)
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute):
            meth = n.func.attr.value
            if meth in _KEEPING_CALLS or (meth.startswith("register_") and meth.endswith("hook")):
                for a in n.args:
                    keep(a.value)
    for n in walk(module):
        if isinstance(n, cst.FunctionDef) and n.name.value in stored_names:
            kept.add(id(n))
    return kept


def _places_with(fn: cst.Lambda | cst.FunctionDef, loop_vars: set[str]) -> tuple[str, cst.Call] | None:
    """(the loop variable, the call) when the function's body moves something to a loop variable it does not bind
    itself (a parameter, a default, an assignment in its body)."""
    params = fn.params
    own = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            own.add(star.name.value)
    body = fn.body
    own |= {name for n in walk(body) for t in assigned(n) for name in target_names(t)}
    free = loop_vars - own
    if not free:
        return None
    for n in walk(body):
        if not (isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in _PLACING):
            continue
        for a in n.args:
            if (
                isinstance(a.value, cst.Name)
                and a.value.value in free
                and (a.keyword is None or a.keyword.value == "device")
            ):
                return a.value.value, n
    return None
