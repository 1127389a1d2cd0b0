"""A module moved one tensor at a time through `.data`.

    for p in model.parameters():
        p.data = p.data.to(device)

re-points each parameter's storage (an optimizer built before keeps its references),
which is `model.to(device)` for the parameters. Read as a loop over parameters, it
would leave `model` where it was, and its first call would look like one on a module
"never placed". So the loop is read as a move of `model`:

- over its parameters and its buffers (`itertools.chain(m.parameters(), m.buffers())`,
  or a module that holds no buffer), it is `model.to(...)` with the loop's arguments;
- over its parameters only, of a module that may hold a buffer, where the module is
  is not known; the buffers of a BatchNorm in it certainly stay where they were, and
  its first call fails (MP001, events.BuffersLeftBehind).

Only a loop whose body assigns `p.data` unconditionally, from a move of `p` or
`p.data` whose arguments do not depend on `p`, is read so.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from mpcheck.devices import unmoved  # (a module: unmoved.py asks this one about loops in turn)
from mpcheck.devices.names import dotted
from mpcheck.devices.values import DictV, Obj, SeqV, Val, is_module
from mpcheck.devices.walk import walk

_MOVES = frozenset({"to", "cuda", "cpu"})
_KINDS = {
    "parameters": "parameters",
    "named_parameters": "parameters",
    "buffers": "buffers",
    "named_buffers": "buffers",
}
_CHAINS = frozenset({"itertools.chain", "chain"})

# torch.nn modules that register buffers: the norms that keep running statistics.
BUFFERED_NN = frozenset(
    {
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "SyncBatchNorm",
        "LazyBatchNorm1d",
        "LazyBatchNorm2d",
        "LazyBatchNorm3d",
    }
)
# Their buffers, by attribute: set to a tensor on another device than the module, batch norm fails (MP001).
RUNNING_STATS = frozenset({"running_mean", "running_var"})
# Those whose buffers depend on an argument (`track_running_stats=True`): whether they hold one is not known.
_MAYBE_BUFFERED_NN = frozenset({"InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"})


@dataclass(frozen=True)
class DataMoveLoop:
    owner: cst.BaseExpression  # the module whose tensors the loop walks (`model`)
    kinds: frozenset[str]  # "parameters", "buffers": what it walks
    move: cst.Call  # the move each tensor gets (`p.data.to(device)`)


def data_move_loop(stmt: cst.For) -> DataMoveLoop | None:
    """The module a loop moves through `.data`, with what of it and how; None for any other loop."""
    var = _loop_variable(stmt.target)
    if var is None:
        return None
    walked = _walked(stmt.iter)
    if walked is None:
        return None
    owner, kinds = walked
    for line in stmt.body.body:
        if not isinstance(line, cst.SimpleStatementLine):
            continue
        for small in line.body:
            move = _data_assigned_move(small, var)
            if move is not None:
                return DataMoveLoop(owner, kinds, move)
    return None


def dropped_moves(stmt: cst.For) -> list[cst.Call]:
    """The moves of a loop over a module's tensors that are statements of their own, their result dropped:
    `for p in m.parameters(): p.data.to(device)` (or `p.to(d)`, `p.cuda()`). A tensor's `.to()` returns a
    copy and leaves the tensor where it was (only a module's works in place): nothing moves."""
    var = _loop_variable(stmt.target)
    if var is None or _walked(stmt.iter) is None:
        return []
    found: list[cst.Call] = []
    blocks: list[cst.BaseSuite] = [stmt.body]
    while blocks:
        block = blocks.pop()
        for line in block.body if isinstance(block, cst.IndentedBlock) else ():
            if isinstance(line, (cst.If, cst.With)):  # under a condition or a context: still each tensor's own
                blocks.append(line.body)
                if isinstance(line, cst.If) and isinstance(line.orelse, cst.Else):
                    blocks.append(line.orelse.body)
            if not isinstance(line, cst.SimpleStatementLine):
                continue
            for small in line.body:
                if isinstance(small, cst.Assign) and any(_binds(t.target, var) for t in small.targets):
                    return found  # `p = ...`: the name holds something else from here
                call = small.value if isinstance(small, cst.Expr) else None
                if (
                    isinstance(call, cst.Call)
                    and isinstance(call.func, cst.Attribute)
                    and call.func.attr.value in _MOVES
                    and _tensor_of(call.func.value, var)
                ):
                    found.append(call)
    return found


def _tensor_of(recv: cst.BaseExpression, var: str) -> bool:
    """`p` or `p.data`: the loop's tensor."""
    return _is_name(recv, var) or (
        isinstance(recv, cst.Attribute) and recv.attr.value == "data" and _is_name(recv.value, var)
    )


def _binds(target: cst.BaseExpression, var: str) -> bool:
    return any(isinstance(n, cst.Name) and n.value == var for n in walk(target))


def _loop_variable(target: cst.BaseAssignTargetExpression) -> str | None:
    """`p` of `for p in ...` and of `for name, p in ...` (named_parameters)."""
    if isinstance(target, cst.Name):
        return target.value
    if isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(target.elements[1].value, cst.Name):
        return target.elements[1].value.value
    return None


def _walked(it: cst.BaseExpression) -> tuple[cst.BaseExpression, frozenset[str]] | None:
    """(module, what of it) for `m.parameters()`, `m.named_buffers()`, `chain(m.parameters(), m.buffers())`."""
    if isinstance(it, cst.Call) and dotted(it.func) in _CHAINS and it.args:
        parts = [_walked(a.value) if a.keyword is None and not a.star else None for a in it.args]
        if any(p is None for p in parts):
            return None
        owners = {dotted(p[0]) for p in parts if p is not None}
        if len(owners) != 1 or None in owners:
            return None
        first = parts[0]
        assert first is not None
        return first[0], frozenset(k for p in parts if p is not None for k in p[1])
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and not it.args):
        return None
    kind = _KINDS.get(it.func.attr.value)
    if kind is None or dotted(it.func.value) is None:
        return None
    return it.func.value, frozenset({kind})


def _data_assigned_move(small: cst.BaseSmallStatement, var: str) -> cst.Call | None:
    """The move of `p.data = p.data.to(d)` (or `p.to(d)`, `.cuda(d)`, `.cpu()`), with no `p` in its arguments."""
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
        return None
    target = small.targets[0].target
    if not (isinstance(target, cst.Attribute) and target.attr.value == "data" and _is_name(target.value, var)):
        return None
    call = small.value
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value in _MOVES):
        return None
    recv = call.func.value
    if not (
        _is_name(recv, var)
        or (isinstance(recv, cst.Attribute) and recv.attr.value == "data" and _is_name(recv.value, var))
    ):
        return None
    if any(isinstance(n, cst.Name) and n.value == var for a in call.args for n in walk(a.value)):
        return None  # `p.data.to(p.device)`: where it goes depends on the tensor
    return call


def _is_name(node: cst.BaseExpression, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def holds_buffers(v: Val, depth: int = 0) -> bool | None:
    """Does the module `v` certainly hold a buffer (True), certainly none (False), or is it not known (None)?"""
    if depth > 6:
        return None
    if isinstance(v, SeqV) and v.module:
        return _any_of([holds_buffers(i, depth + 1) for i in v.items] if v.items is not None else [None])
    if isinstance(v, DictV) and v.module:
        return _any_of([holds_buffers(i, depth + 1) for i in v.items.values()])
    if not isinstance(v, Obj) or v.kind != "module":
        return None
    if v.nn_class:
        if v.nn_class in BUFFERED_NN:
            return True
        return None if v.nn_class in _MAYBE_BUFFERED_NN else False
    if v.cls is None or v.attrs is None:
        return None
    own = _registers_buffers(v.cls)
    if own is not False:
        return own
    return _any_of(
        [holds_buffers(a, depth + 1) for a in v.attrs.values() if isinstance(a, (Obj, SeqV, DictV)) and is_module(a)]
    )


def buffered_part(v: Val, depth: int = 0) -> Obj | None:
    """A torch.nn module in `v` (or `v` itself) that certainly holds buffers (a BatchNorm), if one is known."""
    if depth > 6:
        return None
    if isinstance(v, Obj) and v.kind == "module":
        if v.nn_class in BUFFERED_NN:
            return v
        parts: list[Val] = list(v.attrs.values()) if v.cls is not None and v.attrs is not None else []
    elif isinstance(v, SeqV) and v.module:
        parts = list(v.items or ())
    elif isinstance(v, DictV) and v.module:
        parts = list(v.items.values())
    else:
        return None
    for part in parts:
        if (found := buffered_part(part, depth + 1)) is not None:
            return found
    return None


def _registers_buffers(cls: object) -> bool | None:
    """Does a class of the file certainly register no buffer itself (False), or is it not known (None: one
    that calls `register_buffer` may do so under a condition, or register None)?"""
    found = False
    for c in cls.lineage():  # type: ignore[attr-defined]
        local = {b.name for b in c.local_bases}
        if not c.bases or any(b not in unmoved.MODULE_BASES and b not in local for b in c.bases):
            return None  # a base of another file may register one
        for n in walk(c.node):
            if isinstance(n, cst.Attribute) and n.attr.value in ("register_buffer", "_buffers"):
                found = True
    return None if found else False


def _any_of(answers: list[bool | None]) -> bool | None:
    if any(a is True for a in answers):
        return True
    return None if any(a is None for a in answers) else False
