"""MP029: `[[]] * n_gpus` makes one list and repeats it: a plan that appends each layer to its GPU's entry
(`plan[i // per].append(i)`) appends it to the one list every entry is, so every GPU gets every layer, and the
placement loop moves each layer to every GPU in turn: all end on the last.

Plain syntax: an assignment of a list literal of one mutable item (`[[]]`, `[{}]`, `[set()]`, `[list()]`) times a
count, and, in the same function (or at module level), a mutation through one of its entries (`.append()`,
`.extend()`, `.insert()`, `.add()`, `.update()`, `+=`, an item assignment).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.walk import scope_nodes, walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS

_MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "setdefault"})
_EMPTY_CALLS = frozenset({"list", "dict", "set", "collections.defaultdict", "defaultdict", "OrderedDict"})


class RepeatedListInDevicePlan(Rule):
    code = "MP029"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for scope in (ctx.module, *(n for n in walk(ctx.module) if isinstance(n, cst.FunctionDef))):
            own = list(scope_nodes(scope))
            for n in own:
                repeated = _repeated_mutable(n)
                if repeated is None or not isinstance(n, cst.Assign):
                    continue
                target, item = repeated
                name = ctx.code(target)
                mutation = next((m for m in own if _mutates_an_entry(m, name, ctx)), None)
                if mutation is None or any(_replaces_an_entry(m, name, ctx) for m in own):
                    continue  # (`plan[i] = []` for each entry first: each gets its own)
                literal = ctx.code(item)
                yield self.finding(
                    ctx,
                    n,
                    f"`{ctx.code(n.value)}` repeats one `{literal}` object: every entry of `{name}` is the same "
                    f"`{literal}`, so what line {ctx.line(mutation)} adds to one entry (`{ctx.code(mutation)}`) is in "
                    f"all of them, and every device the plan names gets every item. Make one per entry: "
                    f"`[{literal} for _ in range(...)]`.",
                    suggestion=f"build `{name}` with a comprehension, one new `{literal}` per entry",
                )


def _repeated_mutable(n: cst.CSTNode) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(the target, the item) of `plan = [[]] * n` / `n * [{}]`."""
    if not (isinstance(n, cst.Assign) and len(n.targets) == 1):
        return None
    value = n.value
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)):
        return None
    for side in (value.left, value.right):
        if isinstance(side, cst.List) and len(side.elements) == 1 and _mutable(side.elements[0].value):
            target = n.targets[0].target
            if isinstance(target, (cst.Name, cst.Attribute)):
                return target, side.elements[0].value
    return None


def _mutable(v: cst.BaseExpression) -> bool:
    if isinstance(v, (cst.List, cst.Dict, cst.Set)):
        return True
    if isinstance(v, cst.Call) and not v.args:
        func = v.func
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
        return name in {e.rsplit(".", 1)[-1] for e in _EMPTY_CALLS}
    return False


def _mutates_an_entry(n: cst.CSTNode, name: str, ctx: FileContext) -> bool:
    """`name[i].append(x)`, `name[i] += [x]`, `name[i][k] = v`: a change made in place through one entry."""
    if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in _MUTATORS:
        return _entry_of(n.func.value, name, ctx)
    if isinstance(n, cst.AugAssign):
        return _entry_of(n.target, name, ctx)
    if isinstance(n, cst.Assign):
        return any(isinstance(t.target, cst.Subscript) and _entry_of(t.target.value, name, ctx) for t in n.targets)
    return False


def _replaces_an_entry(n: cst.CSTNode, name: str, ctx: FileContext) -> bool:
    """`name[i] = ...` (or `name[0], name[1] = [], []`): an entry given an object of its own."""
    if not isinstance(n, cst.Assign):
        return False
    targets = [
        e.value if isinstance(e, cst.Element) else e
        for t in n.targets
        for e in (t.target.elements if isinstance(t.target, (cst.Tuple, cst.List)) else (t.target,))
    ]
    return any(isinstance(t, cst.Subscript) and ctx.code(t.value) == name for t in targets)


def _entry_of(expr: cst.BaseExpression, name: str, ctx: FileContext) -> bool:
    return isinstance(expr, cst.Subscript) and ctx.code(expr.value) == name
