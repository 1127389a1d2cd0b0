"""MP029: `[[]] * n_gpus` makes one list and repeats it: a plan that appends each layer to its GPU's entry
(`plan[i // per].append(i)`) appends it to the one list every entry is, so every GPU gets every layer, and the
placement loop moves each layer to every GPU in turn: all end on the last.

The same slip with a module: `nn.ModuleList([Block()] * n)` holds one block `n` times, and a loop that moves entry
after entry to its own device (`for dev, ids in ...: for i in ids: self.blocks[i].to(dev)`) moves the one block each
time: it ends on the last device, and the model meant to be split is not.

Plain syntax: an assignment of a list literal of one mutable item (`[[]]`, `[{}]`, `[set()]`, `[list()]`) times a
count, and, in the same function (or at module level), a mutation through one of its entries (`.append()`,
`.extend()`, `.insert()`, `.add()`, `.update()`, `+=`, an item assignment). For modules: a list literal of one
constructor call of a capitalised class times a count (bare, or in `nn.ModuleList(...)` / `nn.Sequential(*...)`),
assigned to a name or `self.<attr>`, and a loop anywhere in the file that moves an entry (`x[i].to(d)`, or `b.to(d)`
for `b` drawn from it) to a device named by a loop's own variable: a device that changes from one entry to the next.
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
        yield from _repeated_modules_spread(self, ctx)


def _repeated_modules_spread(rule: Rule, ctx: FileContext) -> Iterator[Finding]:
    """`self.blocks = nn.ModuleList([Block()] * n)`, then entry after entry moved to a device that changes."""
    for n in walk(ctx.module):
        repeated = _repeated_module(n)
        if repeated is None:
            continue
        target, item = repeated
        name = ctx.code(target)
        move = next((m for m in walk(ctx.module) if isinstance(m, cst.For) and _spreads(m, name, ctx)), None)
        if move is None:
            continue
        literal = ctx.code(item)
        yield rule.finding(
            ctx,
            n,
            f"`[{literal}] * ...` repeats one module object: every entry of `{name}` is the same `{literal}`, so the "
            f"loop at line {ctx.line(move)}, which moves entry after entry to its own device, moves that one module "
            f"each time and it ends on the last device: the model is not split (and its entries share one set of "
            f"weights). "
            f"Make one per entry: `[{literal} for _ in range(...)]`.",
            suggestion=f"build `{name}` with a comprehension, one new `{literal}` per entry",
        )


def _repeated_module(n: cst.CSTNode) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(the target, the constructor call) of `x = [Block()] * n`, `nn.ModuleList([Block()] * n)`,
    `nn.Sequential(*[Block()] * n)`."""
    if not (isinstance(n, cst.Assign) and len(n.targets) == 1):
        return None
    target = n.targets[0].target
    if not isinstance(target, (cst.Name, cst.Attribute)):
        return None
    value: cst.BaseExpression = n.value
    if isinstance(value, cst.Call) and len(value.args) == 1:
        func = value.func
        wrapper = (
            func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        )
        if wrapper in ("ModuleList", "Sequential"):
            value = value.args[0].value
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)):
        return None
    for side in (value.left, value.right):
        if isinstance(side, cst.List) and len(side.elements) == 1 and _constructs_a_class(side.elements[0].value):
            return target, side.elements[0].value
    return None


def _constructs_a_class(v: cst.BaseExpression) -> bool:
    if not isinstance(v, cst.Call):
        return False
    func = v.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return name[:1].isupper()


_MOVES = frozenset({"to", "cuda"})


def _spreads(loop: cst.For, name: str, ctx: FileContext) -> bool:
    """Does `loop` (or a loop in it) move an entry of `name` to a device named by a loop variable?"""
    loops = [loop, *(n for n in walk(loop.body) if isinstance(n, cst.For))]
    loop_names = set().union(*(_bound_names(x.target) for x in loops))
    drawn = set().union(*(_entry_names(x, name, ctx) for x in loops))  # `b` of `for b in blocks`
    for call in walk(loop.body):
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value in _MOVES):
            continue
        if not call.args or (call.args[0].keyword is not None and call.args[0].keyword.value != "device"):
            continue
        recv = call.func.value
        entry = (isinstance(recv, cst.Subscript) and ctx.code(recv.value) == name) or (
            isinstance(recv, cst.Name) and recv.value in drawn
        )
        device_names = {x.value for x in walk(call.args[0].value) if isinstance(x, cst.Name)}
        if entry and device_names & (loop_names - drawn):
            return True
    return False


def _entry_names(loop: cst.For, name: str, ctx: FileContext) -> set[str]:
    """The names `loop` binds to entries of `name`: `b` of `for b in blocks`, `for b, d in zip(blocks, devices)`,
    `for i, b in enumerate(blocks)`."""
    it, target = loop.iter, loop.target
    if ctx.code(it) == name:
        return _bound_names(target)
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and isinstance(target, (cst.Tuple, cst.List))):
        return set()
    parts = [e.value for e in target.elements]
    if it.func.value == "zip":
        positions = [k for k, a in enumerate(it.args) if ctx.code(a.value) == name]
    elif it.func.value == "enumerate" and it.args and ctx.code(it.args[0].value) == name:
        positions = [1]
    else:
        positions = []
    return {p.value for k in positions if k < len(parts) and isinstance(p := parts[k], cst.Name)}


def _bound_names(target: cst.BaseExpression) -> set[str]:
    return {x.value for x in walk(target) if isinstance(x, cst.Name)}


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
