"""Methods that place an instance's parts after it was built: `model = Net(); model.place()` or
`Net().place(placement)`, with a body like an __init__'s placements (`self.embed.to("cuda:0")`,
`getattr(self, name).to(dev)` over a map, `for b in self.blocks: b.to(...)`).

Such a call gives a new view of the instance, its parts placed as the method placed them, as if
its __init__ had ended with that body: the memoised instance itself (Instances.instantiate) is
shared with every other construction with those arguments, so it is left as it was.

Only a method whose every move is of a part of `self` is one: a method that also moves a batch
or its own result (`fit`, `train_step`) is work, not placement, and keeps running as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from mpcheck.devices import memo
from mpcheck.devices.program import FuncInfo, Scope, State
from mpcheck.devices.values import DictV, Obj, SeqV, Val
from mpcheck.devices.walk import walk

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterator

    from mpcheck.devices.interp import Interp

_MOVES = frozenset({"to", "cuda"})
_MAX_DEPTH = 4


_PLACES_PARTS = memo.node_table()


def places_parts(info: FuncInfo) -> bool:
    """Does the method move parts of `self`, and nothing else (see the module's docstring)?"""
    if info.name.startswith("__") or info.name == "forward":
        return False
    got: bool | None = memo.recall(_PLACES_PARTS, info.node)
    if got is None:
        loop_vars = set(_loop_vars_over_self(info.node))
        moves = [n for n in walk(info.node) if _is_move(n)]
        got = memo.keep(_PLACES_PARTS, info.node, bool(moves) and all(_of_a_part(m, loop_vars) for m in moves))
    return got


def _is_move(n: cst.CSTNode) -> bool:
    return isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in _MOVES


def _of_a_part(move: cst.CSTNode, loop_vars: set[str]) -> bool:
    """`self.x.to(d)`, `self.x[i].to(d)`, `getattr(self, name).to(d)`, `b.to(d)` for b over self.x."""
    assert isinstance(move, cst.Call) and isinstance(move.func, cst.Attribute)
    recv: cst.BaseExpression = move.func.value
    if isinstance(recv, cst.Call) and isinstance(recv.func, cst.Name) and recv.func.value == "getattr":
        return bool(recv.args) and _is_self(recv.args[0].value)
    if isinstance(recv, cst.Name):
        return recv.value in loop_vars
    if not isinstance(recv, (cst.Attribute, cst.Subscript)):
        return False
    while isinstance(recv, (cst.Attribute, cst.Subscript)):
        recv = recv.value
    # `self.enc.head.to(d)`, or `enc.head.to(d)` for enc over parts of self
    return _is_self(recv) or (isinstance(recv, cst.Name) and recv.value in loop_vars)


def _a_part_of_self(e: cst.BaseExpression) -> bool:
    """`self.blocks`, `self.stages[0]`: an attribute (or an item of one) of self."""
    root = e
    while isinstance(root, (cst.Attribute, cst.Subscript)):
        root = root.value
    return _is_self(root) and e is not root


def _is_self(e: cst.BaseExpression) -> bool:
    return isinstance(e, cst.Name) and e.value == "self"


def _loop_vars_over_self(fn: cst.FunctionDef) -> Iterator[str]:
    """`b` of `for b in self.blocks:`, `for i, b in enumerate(self.blocks):` and
    `for b in (self.encoder_q, self.encoder_k):`."""
    for n in walk(fn):
        if not isinstance(n, cst.For):
            continue
        it = n.iter
        if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "enumerate" and it.args:
            it = it.args[0].value
        parts = [e.value for e in it.elements] if isinstance(it, (cst.Tuple, cst.List)) and it.elements else [it]
        if not all(_a_part_of_self(p) for p in parts):
            continue
        target = n.target
        names = target.elements if isinstance(target, cst.Tuple) else [target]
        last = names[-1]
        value = last.value if isinstance(last, cst.Element) else last
        if isinstance(value, cst.Name):
            yield value.value


def placed_view(
    interp: Interp, recv: Obj, info: FuncInfo, args: list[Val], kwargs: dict[str, Val], st: State
) -> tuple[Obj, bool]:
    """A copy of the instance `recv` with the method `info` run on it as the end of its __init__,
    and whether the method returns `self` (`Net().place()` is then that copy)."""
    assert recv.attrs is not None  # an instance
    # Its parts as built: a CPU part that a later move of the whole model might have moved is on the CPU
    # while this method places the others by hand (what it leaves there stays there).
    as_built = {**recv.attrs, **interp.cpu_as_built.get(id(recv), {})}
    obj = recv.with_(attrs={a: _fresh(v, 0) for a, v in as_built.items()}, split=None, devs=None)
    env = dict(interp.globals)
    interp.calls.bind(info, env, obj, args, kwargs)
    ist = State(env, st.cur, st.setdev, st.mode, obj, True, Scope(info.qual))
    sites = interp.recorder.sites
    sites.append(None)  # what the method does is the class's own, whoever calls it (Fact.via)
    try:
        interp.stmts.run_body(info, ist)
    finally:
        sites.pop()
    interp.instances.finish_placed(obj)
    return obj, any(r is obj for r in ist.returns)


def _fresh(v: Val, depth: int) -> Val:
    """A copy of a part that a placement may edit in place (Module.to() of a torch.nn module in an
    __init__ sets its device on the object), so that the instance it came from stays as it was."""
    if depth > _MAX_DEPTH:
        return v
    if isinstance(v, Obj) and v.kind in ("module", "any"):
        attrs = {a: _fresh(i, depth + 1) for a, i in v.attrs.items()} if v.attrs is not None else None
        return v.with_(attrs=attrs)
    if isinstance(v, SeqV) and v.module:
        items = tuple(_fresh(i, depth + 1) for i in v.items) if v.items is not None else None
        return SeqV(
            items,
            elem=_fresh(v.elem, depth + 1),
            kind=v.kind,
            module=True,
            spans=v.spans,
            spans_by=v.spans_by,
            hooks=v.hooks,
        )
    if isinstance(v, DictV) and v.module:
        return DictV({k: _fresh(i, depth + 1) for k, i in v.items.items()}, module=True)
    return v
