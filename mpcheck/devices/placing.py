"""Methods that place an instance's parts after it was built: `model = Net(); model.place()` or
`Net().place(placement)`, with a body like an __init__'s placements (`self.embed.to("cuda:0")`,
`getattr(self, name).to(dev)` or `self.get_submodule(name).to(dev)` over a map, `for b in self.blocks: b.to(...)`).

Such a call gives a new view of the instance, its parts placed as the method placed them, as if
its __init__ had ended with that body: the memoised instance itself (Instances.instantiate) is
shared with every other construction with those arguments, so it is left as it was.

Only a method whose every move is of a part of `self` (or of `self` whole, before its parts go elsewhere:
`self.to(default)`) is one, or that sets a Parameter of self or of a part (`self.pos = nn.Parameter(resized)`,
`self.head.weight = self.embed.weight`): a method that also moves a batch or its own result (`fit`, `train_step`)
is work, not placement, and keeps running as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from mpcheck.devices import memo
from mpcheck.devices.names import dotted
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
        # `lin.weight = nn.Parameter(torch.empty(...))` for lin over self's layers (an init after the split),
        # `self.pos_embed = nn.Parameter(resized)` (a checkpoint's table resized after the split): it places
        # that weight too, where the new Parameter is.
        # `self.lm_head.weight = self.wte.weight` (weights tied after the split): the head computes with the
        # embedding's Parameter, where that one is (Statements.assign).
        replaced = [t for n in walk(info.node) for t in (*_new_parameter_targets(n), *_tied_targets(n))]
        got = memo.keep(
            _PLACES_PARTS,
            info.node,
            bool(moves or replaced)
            # (`self.to(placement["default"])` first, then the parts that go elsewhere: the whole is placed too)
            and all(_is_self(m.func.value) or _of_a_part(m.func.value, loop_vars) for m in moves)  # type: ignore[attr-defined]
            # (a method that only moves self whole is Module.to()'s business, as before)
            and (bool(replaced) or not all(_is_self(m.func.value) for m in moves))  # type: ignore[attr-defined]
            and all(_is_self(t) or _of_a_part(t, loop_vars) for t in replaced),
        )
    return got


def _is_move(n: cst.CSTNode) -> bool:
    return isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in _MOVES


def _new_parameter_targets(n: cst.CSTNode) -> list[cst.BaseExpression]:
    """`layer` of `layer.weight = nn.Parameter(...)`."""
    if not (isinstance(n, cst.Assign) and isinstance(n.value, cst.Call)):
        return []
    if (dotted(n.value.func) or "").rsplit(".", 1)[-1] != "Parameter":
        return []
    return [t.target.value for t in n.targets if isinstance(t.target, cst.Attribute)]


def _tied_targets(n: cst.CSTNode) -> list[cst.BaseExpression]:
    """`self.lm_head` of `self.lm_head.weight = self.wte.weight`: a layer's weight set to another part's."""
    if not (isinstance(n, cst.Assign) and isinstance(n.value, cst.Attribute) and n.value.attr.value == "weight"):
        return []
    if not _a_part_of_self(n.value.value):
        return []
    return [
        t.target.value for t in n.targets if isinstance(t.target, cst.Attribute) and t.target.attr.value == "weight"
    ]


def _of_a_part(recv: cst.BaseExpression, loop_vars: set[str]) -> bool:
    """The receiver of a move: `self.x` of `self.x.to(d)`, `self.x[i]`, `getattr(self, name)`, `b` for b over
    self.x."""
    if isinstance(recv, cst.Call) and isinstance(recv.func, cst.Name) and recv.func.value == "getattr":
        return bool(recv.args) and _is_self(recv.args[0].value)
    if isinstance(recv, cst.Call) and isinstance(recv.func, cst.Attribute) and recv.func.attr.value == "get_submodule":
        return _is_self(recv.func.value)  # `self.get_submodule("blocks.3").to(dev)` over a device map
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
    """`b` of `for b in self.blocks:`, `for i, b in enumerate(self.blocks):`, `for b in (self.encoder_q,
    self.encoder_k):`, `for b in list(self.layers) + [self.out]:` and `for b, dev in zip(self.blocks, devs):`."""
    for n in walk(fn):
        if isinstance(n, cst.For):
            yield from _bound_to_parts(n.iter, n.target)


def _bound_to_parts(it: cst.BaseExpression, target: cst.BaseExpression) -> Iterator[str]:
    """The names of `target` that take parts of self, one by one, as a loop over `it` runs."""
    if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.args:
        names = _elements(target)
        if it.func.value == "enumerate" and names is not None and len(names) == 2:
            yield from _bound_to_parts(it.args[0].value, names[1])
            return
        if it.func.value == "zip" and names is not None and len(names) == len(it.args):
            for arg, name in zip(it.args, names):
                yield from _bound_to_parts(arg.value, name)
            return
    if isinstance(target, cst.Name) and _parts_of_self(it):
        yield target.value


def _elements(target: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [e.value for e in target.elements]
    return None


def _parts_of_self(e: cst.BaseExpression) -> bool:
    """`self.blocks`, `(self.a, self.b)`, `list(self.layers) + [self.out]`: parts of self, each a module or a
    container of them."""
    if isinstance(e, (cst.Tuple, cst.List)):
        return bool(e.elements) and all(_parts_of_self(x.value) for x in e.elements)
    if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, cst.Add):
        return _parts_of_self(e.left) and _parts_of_self(e.right)
    if isinstance(e, cst.Call) and isinstance(e.func, cst.Name) and e.func.value in ("list", "tuple"):
        return len(e.args) == 1 and _parts_of_self(e.args[0].value)
    return _a_part_of_self(e)


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
