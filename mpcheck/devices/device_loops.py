"""A loop over several devices in an __init__ that builds modules but never reads its device
(`for dev in devices: self.blocks.append(copy.deepcopy(template))`): what it builds, one set
per device by the loop's shape, all ends on one device (or stays on the CPU) once __init__ is
done. An `events.UnusedLoopDevice` then, at the loop.

Said only when the loop's items are known devices (two or more distinct ones), its target is a
plain name read nowhere in its body, it built module objects (Obj.ident), and every one of them
that the instance holds at the end of __init__ is on one and the same device: a later statement
that places them (`for i, b in enumerate(self.blocks): b.to(devices[i // per])`) ends the case.

The same split is lost a step earlier by a list of devices made by a loop that never reads its name
(`[torch.device("cuda", local_rank) for i in range(stages)]`, or the same item appended in a `for` loop): an
`events.DeviceListIgnoresIndex`, noted where the comprehension or the loop is run (once per node). A name that says it is unused (`_`, `_i`) is taken at
its word: `[torch.device("cpu") for _ in parts]` is one device for every part on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import libcst as cst

from mpcheck.devices import memo
from mpcheck.devices.events import DeviceListIgnoresIndex, DevicePickIgnoresIndex, LateBoundHookDevice, UnusedLoopDevice
from mpcheck.devices.names import dotted
from mpcheck.devices.values import UNPLACED, Const, DictV, Obj, SeqV, Val, as_device, distinct_devices, single
from mpcheck.devices.walk import assigned, children, loop_bound_names, target_names, walk

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from mpcheck.devices.interp import Interp
    from mpcheck.devices.program import State


@dataclass(frozen=True)
class DeviceLoop:
    node: cst.For
    name: str
    devices: tuple[str, ...]
    idents: range  # the module objects built while it ran


def over_devices(stmt: cst.For, items: Sequence[Val], st: State) -> tuple[str, tuple[str, ...]] | None:
    """(the target's name, the devices) of a loop in an __init__ over known distinct devices whose
    target its body never reads; None otherwise."""
    if not st.in_init or not isinstance(stmt.target, cst.Name):
        return None
    devs = []
    for item in items:
        d = single(as_device(item, ints_are_cuda=False))  # (not `range(n)`: a count of anything)
        if d is None or d.startswith("sym:"):
            return None
        devs.append(d)
    distinct = distinct_devices(devs)
    if len(distinct) < 2:
        return None
    name = stmt.target.value
    if any(
        isinstance(n, cst.Name) and n.value == name for part in (stmt.body, stmt.orelse) if part for n in walk(part)
    ):
        return None
    return name, tuple(distinct)


def note(interp: Interp, stmt: cst.For, found: tuple[str, tuple[str, ...]], first: int, st: State) -> None:
    """The loop ran, building the module objects numbered from `first` on."""
    built = range(first, len(interp.ident_names) + 1)
    if built and st.scope is not None:
        st.scope.device_loops.append(DeviceLoop(stmt, found[0], found[1], built))


def check_instance(interp: Interp, obj: Obj, loops: list[DeviceLoop]) -> None:
    """At the end of an __init__: each loop whose modules all ended on one device."""
    if not loops or obj.attrs is None:
        return
    held = _held(obj.attrs.values())
    for loop in loops:
        mine = [v for v in held if v.ident in loop.idents]
        if not mine:
            continue
        where = {_where(v) for v in mine}
        landed = where.pop() if len(where) == 1 else None
        if landed is None:
            continue
        names = sorted({interp.ident_names.get(v.ident, "module") for v in mine if v.ident is not None})
        interp.recorder.record(
            UnusedLoopDevice(
                node=loop.node, name=loop.name, devices=loop.devices, landed=landed, count=len(mine), built=tuple(names)
            )
        )


def _where(v: Obj) -> str | None:
    """Its one device; 'cpu' for a module never placed; None when not known."""
    if v.devs is None:
        return "cpu" if v.origin == UNPLACED else None
    d = single(v.devs)
    return d if d is not None and not d.startswith("sym:") else None


def _held(values: Any, depth: int = 0) -> list[Obj]:
    """The outermost module objects of known identity among these values (a container's items; an
    object's own parts are its own, not counted again)."""
    out: list[Obj] = []
    for v in values:
        if isinstance(v, Obj) and v.kind in ("module", "any") and v.ident is not None:
            out.append(v)
        elif isinstance(v, SeqV) and v.module and depth < 3:
            out.extend(_held(v.items if v.items is not None else (v.elem,), depth + 1))
        elif isinstance(v, DictV) and v.module and depth < 3:
            out.extend(_held(v.items.values(), depth + 1))
    return out


def note_device_list(interp: Interp, node: cst.ListComp | cst.GeneratorExp) -> None:
    """Record a DeviceListIgnoresIndex for `node` if its item names a GPU and never reads the loop's name."""
    if id(node) in interp.device_lists_seen:
        return
    interp.device_lists_seen.add(id(node))
    target = node.for_in.target
    if node.for_in.inner_for_in is not None or type(target) is not cst.Name or target.value.startswith("_"):
        return
    if _ignores(node.elt, target.value):
        interp.recorder.record(DeviceListIgnoresIndex(node=node.elt, name=target.value, loop=node))


def note_device_appends(interp: Interp, stmt: cst.For) -> None:
    """The same for `for i in range(stages): devices.append(torch.device("cuda", rank))`."""
    if id(stmt) in interp.device_lists_seen:
        return
    interp.device_lists_seen.add(id(stmt))
    target = stmt.target
    if type(target) is not cst.Name or target.value.startswith("_"):
        return
    for line in stmt.body.body:
        for small in line.body if type(line) is cst.SimpleStatementLine else ():
            call = small.value if type(small) is cst.Expr else None
            if not (
                type(call) is cst.Call
                and type(call.func) is cst.Attribute
                and call.func.attr.value == "append"
                and len(call.args) == 1
            ):
                continue
            if _ignores(call.args[0].value, target.value) and not _reads_any(
                call.args[0].value, loop_bound_names(stmt)
            ):
                # (A name the body sets, `dev += 1` when a budget fills, changes the device from item to item.)
                interp.recorder.record(DeviceListIgnoresIndex(node=call.args[0].value, name=target.value, loop=stmt))


class PickWatch:
    """The devices a loop's item picks from a list of devices by a formula of the loop's name, pass by pass:
    `[devices[i // n_layers] for i in range(n_layers)]` (meant `i * len(devices) // n_layers`) reads `i`, but the
    formula gives 0 for every `i`, so every stage lands on the list's first GPU. Only a list of two or more
    known, distinct devices indexed by an expression of names, numbers and arithmetic (read again per pass,
    with no side effect) is watched; a finding needs two passes or more that all picked the same device.
    A choice between two devices by a test of the loop's name is watched the same way:
    `devices[0] if i < n else devices[1]` in `for i in range(n)` (meant `n // 2`) is true on every pass, as is
    `if i < n: dev = devices[0]` / `else: dev = devices[1]`."""

    def __init__(self, picks: tuple[cst.Subscript | cst.IfExp | cst.If, ...], name: str) -> None:
        self.name = name
        self.picks = picks
        self.seen: dict[int, list[str | None]] = {id(s): [] for s in self.picks}
        self.lists: dict[int, tuple[str, ...]] = {}

    def after_pass(self, interp: Interp, st: State | None) -> None:
        """`st`: the state after the pass (None where its paths did not join into one)."""
        for sub in self.picks:
            if st is None:
                self.seen[id(sub)].append(None)
                continue
            if not isinstance(sub, cst.Subscript):
                self._after_choice(interp, sub, st)
                continue
            listed = interp.exprs.ev(sub.value, st)
            formula = _index(sub)
            assert formula is not None  # (_picks kept only subscripts with one)
            index = interp.exprs.ev(formula, st)
            items = listed.items if isinstance(listed, SeqV) and listed.items is not None else ()
            # GPU indices (`gpus = list(range(torch.cuda.device_count()))`) where the list's name says so
            ints = _names_gpus(sub.value)
            devs = [d for v in items if (d := single(as_device(v, ints_are_cuda=ints))) and not d.startswith("sym:")]
            if not devs or len(devs) != len(items):
                self.seen[id(sub)].append(None)
                continue
            self.lists[id(sub)] = tuple(devs)
            i = index.value if isinstance(index, Const) and type(index.value) is int else None
            self.seen[id(sub)].append(devs[i] if i is not None and -len(devs) <= i < len(devs) else None)

    def _after_choice(self, interp: Interp, choice: cst.IfExp | cst.If, st: State) -> None:
        parts = choice_parts(choice)
        assert parts is not None  # (_picks kept only choices with two sides)
        test = interp.exprs.ev(parts[0], st)
        sides = [single(as_device(interp.exprs.ev(e, st), ints_are_cuda=False)) for e in parts[1:]]
        devs = [d for d in sides if d and not d.startswith("sym:")]
        if not isinstance(test, Const) or type(test.value) is not bool or len(devs) != 2 or devs[0] == devs[1]:
            self.seen[id(choice)].append(None)
            return
        self.lists[id(choice)] = tuple(devs)
        self.seen[id(choice)].append(devs[0] if test.value else devs[1])

    def finish(self, interp: Interp, loop: cst.CSTNode) -> None:
        for sub in self.picks:
            seen = self.seen[id(sub)]
            listed = self.lists.get(id(sub), ())
            picked = {d for d in seen if d is not None}
            among = distinct_devices(listed)
            if len(seen) < max(2, len(among)) or None in seen or len(picked) != 1 or len(among) < 2:
                continue  # (fewer passes than devices: the loop may mean only some of them)
            key = ("pick", id(sub))
            if key in interp.device_lists_seen:
                continue
            interp.device_lists_seen.add(key)
            interp.recorder.record(
                DevicePickIgnoresIndex(node=sub, name=self.name, loop=loop, picked=picked.pop(), among=tuple(among))
            )


def pick_watch(
    item: cst.CSTNode, target: cst.BaseAssignTargetExpression, bound: frozenset[str] = frozenset()
) -> PickWatch | None:
    """A watch for a loop's item (a comprehension's element, a `for` loop's body, whose other names `bound` an
    index must not read: their value after the pass is not the one the pick saw), or None when it picks nothing."""
    if type(target) is not cst.Name or target.value.startswith("_"):
        return None
    picks: tuple[cst.Subscript | cst.IfExp | cst.If, ...] | None = memo.recall(_PICKS, item)
    if picks is None:
        picks = memo.keep(_PICKS, item, tuple(_picks(item, target.value, bound)))
    return PickWatch(picks, target.value) if picks else None


_PICKS = memo.node_table()
# What an index formula may be made of: read again per pass, it changes nothing.
_PURE = (cst.Name, cst.Attribute, cst.Integer, cst.BinaryOperation, cst.UnaryOperation)
# Not min() / max(): a clamp (`devices[min(k + 1, n - 1)]`) saturates on purpose, with few GPUs on the last one.
_PURE_CALLS = frozenset({"len", "int", "round", "abs"})


def _names_gpus(listed: cst.BaseExpression) -> bool:
    """`gpus`, `self.device_ids`, `gpu_ids`: a list whose name says its numbers are GPU indices."""
    last = (
        listed.attr.value if isinstance(listed, cst.Attribute) else listed.value if isinstance(listed, cst.Name) else ""
    )
    return any(w in last.lower() for w in ("gpu", "device"))


def choice_parts(n: cst.CSTNode) -> tuple[cst.BaseExpression, cst.BaseExpression, cst.BaseExpression] | None:
    """(test, first, second) of a choice between two values read again per pass with no side effect:
    `first if test else second`, or `if test: x = first` / `else: x = second` (one name, one line each)."""
    if type(n) is cst.IfExp:
        parts = (n.test, n.body, n.orelse)
    elif type(n) is cst.If and type(n.orelse) is cst.Else:
        sides = [_one_assignment(block) for block in (n.body, n.orelse.body)]
        if sides[0] is None or sides[1] is None or sides[0][0] != sides[1][0]:
            return None
        parts = (n.test, sides[0][1], sides[1][1])
    else:
        return None
    return parts if _pure_test(parts[0]) and _pure_side(parts[1]) and _pure_side(parts[2]) else None


def _one_assignment(block: cst.BaseSuite) -> tuple[str, cst.BaseExpression] | None:
    """(name, value) of a block that is one `name = value`."""
    body = block.body if isinstance(block, cst.IndentedBlock) else (block,)
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return None
    stmt = body[0].body[0]
    if type(stmt) is not cst.Assign or len(stmt.targets) != 1 or type(stmt.targets[0].target) is not cst.Name:
        return None
    return stmt.targets[0].target.value, stmt.value


def _picks(item: cst.CSTNode, name: str, bound: frozenset[str]) -> list[cst.Subscript | cst.IfExp | cst.If]:
    """The subscripts `listed[formula of name]` and the choices `a if test of name else b` in `item` (not in a
    function or lambda it defines)."""
    out: list[cst.Subscript | cst.IfExp | cst.If] = []
    todo = [item]
    while todo:
        n = todo.pop()
        if isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            continue  # runs later, or not at all: not on the loop's pass
        todo.extend(children(n))
        parts = choice_parts(n) if isinstance(n, (cst.IfExp, cst.If)) else None
        if parts is not None:
            assert isinstance(n, (cst.IfExp, cst.If))
            names = {x.value for p in parts for x in walk(p) if type(x) is cst.Name}
            if name in {x.value for x in walk(parts[0]) if type(x) is cst.Name} and not names & (bound - {name}):
                out.append(n)
            continue
        if type(n) is not cst.Subscript or not isinstance(n.value, (cst.Name, cst.Attribute)):
            continue
        index = _index(n)
        if index is None or isinstance(index, cst.Name) or not _pure(index):
            continue  # (`devices[i]` picks what the list holds: a list of repeated devices is a placement)
        if _written_in(item, n.value):
            continue  # a list the loop fills in as it goes (`self.block_dev[i] = ...`)
        names = {x.value for x in walk(index) if type(x) is cst.Name}
        reads = {x.value for x in walk(n.value) if type(x) is cst.Name}
        if name in names and not (names | reads) & (bound - {name}):
            out.append(n)
    return out


def _written_in(item: cst.CSTNode, listed: cst.BaseExpression) -> bool:
    """Does `item` assign into the list `listed` names (`listed[i] = ...`, `listed.append(...)`) or rebind it?"""
    code = dotted(listed)
    if code is None:
        return True
    for n in walk(item):
        for target in assigned(n):
            base = target.value if isinstance(target, cst.Subscript) else target
            if dotted(base) == code:
                return True
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and dotted(n.func.value) == code:
            if n.func.attr.value in ("append", "insert", "extend", "pop", "reverse", "sort"):
                return True
    return False


def _index(sub: cst.Subscript) -> cst.BaseExpression | None:
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return None
    return sub.slice[0].slice.value


def _pure_test(e: cst.CSTNode) -> bool:
    """A test read again per pass with no side effect: comparisons of pure expressions, `and`/`or`/`not`."""
    if isinstance(e, cst.Comparison):
        return _pure(e.left) and all(_pure(c.comparator) for c in e.comparisons)
    if isinstance(e, cst.BooleanOperation):
        return _pure_test(e.left) and _pure_test(e.right)
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
        return _pure_test(e.expression)
    return False


def _pure_side(e: cst.CSTNode) -> bool:
    """A side of a device choice read again per pass: a name, a string, `devices[0]`, `self.devs[k]`."""
    if isinstance(e, cst.SimpleString):
        return True
    if isinstance(e, cst.Subscript):
        index = _index(e)
        return index is not None and _pure(index) and _pure(e.value)
    return isinstance(e, (cst.Name, cst.Attribute)) and _pure(e)


def _pure(e: cst.CSTNode) -> bool:
    if isinstance(e, cst.Call):
        return (
            isinstance(e.func, cst.Name)
            and e.func.value in _PURE_CALLS
            and all(a.keyword is None and not a.star and _pure(a.value) for a in e.args)
        )
    if not isinstance(e, _PURE):
        return False
    if isinstance(e, cst.BinaryOperation):
        return _pure(e.left) and _pure(e.right)
    if isinstance(e, cst.UnaryOperation):
        return _pure(e.expression)
    if isinstance(e, cst.Attribute):
        return _pure(e.value)
    return True


# Module and tensor methods that keep a callable to run later, each time the module runs or a gradient arrives.
_HOOK_REGISTRARS = frozenset(
    {
        "register_forward_pre_hook",
        "register_forward_hook",
        "register_full_backward_pre_hook",
        "register_full_backward_hook",
        "register_backward_hook",
        "register_hook",
    }
)


def note_late_bound_hooks(interp: Interp, stmt: cst.For) -> None:
    """Record a LateBoundHookDevice for each hook that `stmt`'s body makes and registers and that reads, as a
    device, a name the loop sets (its target, or `dev = devices[i]` in its body) without binding it as a
    parameter (`lambda m, args, dev=dev: ...`). Not when the body also removes a hook (`h.remove()`): a hook
    used and removed within its pass sees that pass's value."""
    key = ("hooks", id(stmt))
    if key in interp.device_lists_seen:
        return
    interp.device_lists_seen.add(key)
    body = stmt.body
    if any(type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "remove" for n in walk(body)):
        return
    varying = loop_bound_names(stmt)
    defined = {small.name.value: small for small in getattr(body, "body", ()) if type(small) is cst.FunctionDef}
    for call in walk(body):
        if not (
            type(call) is cst.Call
            and type(call.func) is cst.Attribute
            and call.func.attr.value in _HOOK_REGISTRARS
            and call.args
        ):
            continue
        arg = call.args[0].value
        hook = defined.get(arg.value) if isinstance(arg, cst.Name) else arg
        if not isinstance(hook, (cst.Lambda, cst.FunctionDef)):
            continue
        name = _late_device(hook, varying)
        if name is not None:
            interp.recorder.record(LateBoundHookDevice(node=hook, name=name, loop=stmt, registrar=call.func.attr.value))


def _late_device(hook: cst.Lambda | cst.FunctionDef, varying: frozenset[str]) -> str | None:
    """A name of `varying` that `hook` reads as a device (`x.to(dev)`, `.cuda(dev)`, `device=dev`) and does not
    bind itself (a parameter, a default, an assignment or a comprehension's name inside it)."""
    own = {p.name.value for p in (*hook.params.params, *hook.params.kwonly_params, *hook.params.posonly_params)}
    own |= {name for n in walk(hook.body) for t in _binds(n) for name in target_names(t)}
    for n in walk(hook.body):
        if type(n) is not cst.Call:
            continue
        moves = type(n.func) is cst.Attribute and n.func.attr.value in ("to", "cuda")
        for arg in n.args:
            v = arg.value
            named = arg.keyword.value if arg.keyword is not None else None
            if (
                type(v) is cst.Name
                and v.value in varying
                and v.value not in own
                and (named == "device" or (moves and named is None))
            ):
                return v.value
    return None


def _binds(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The targets `node` binds: an assignment's, a `for` loop's or a comprehension's."""
    if type(node) is cst.For or type(node) is cst.CompFor:
        return [node.target]
    return assigned(node)


def _ignores(item: cst.BaseExpression, name: str) -> bool:
    """Does `item` name a GPU without reading `name`?"""
    return _names_a_gpu(item) and not _reads_any(item, {name})


def _reads_any(item: cst.BaseExpression, names: frozenset[str] | set[str]) -> bool:
    return any(type(n) is cst.Name and n.value in names for n in walk(item))


def _names_a_gpu(elt: cst.BaseExpression) -> bool:
    """`torch.device("cuda", k)`, `"cuda:0"`, `f"cuda:{k}"`."""
    if type(elt) is cst.Call:
        first = elt.args[0].value if elt.args else None
        return dotted(elt.func) in ("torch.device", "device") and first is not None and _names_a_gpu(first)
    if type(elt) is cst.SimpleString:
        value = elt.evaluated_value
        return isinstance(value, str) and value.startswith("cuda")
    if type(elt) is cst.FormattedString:
        head = elt.parts[0] if elt.parts else None
        return type(head) is cst.FormattedStringText and head.value.startswith("cuda")
    return False
