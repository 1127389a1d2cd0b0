"""Caches that every caller shares: a mutable default argument (`def forward(self, x, cache={})`), a dict in the
class body (`_masks = {}` read as `self._masks`) or at module level (`_ROPE = {}`). A tensor stored in one under a
key that names no device (`cache[T] = torch.triu(..., device=x.device)`) is handed to every later caller with that
key: where the writing line runs for modules on two GPUs, one of them gets the other's copy. Each write is an
`events.SharedCacheWrite`, one per device it ran for; MP017 reports a write seen with two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from mpcheck.devices.events import SharedCacheWrite
from mpcheck.devices.names import dotted
from mpcheck.devices.program import ClassInfo, params_of
from mpcheck.devices.values import Const, DeviceV, Obj, SeqV, Val, single
from mpcheck.devices.walk import walk

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.interp import Interp
    from mpcheck.devices.program import State

# Names in a key's text that make it one per device or per caller: such a cache is not shared across GPUs.
_PER_DEVICE_WORDS = ("dev", "cuda", "gpu", "rank", "self", "id(", "layer", "idx", "index")


def note_write(interp: Interp, target: cst.Subscript, v: Val, st: State) -> None:
    """`holder[key] = v` in a function: an `events.SharedCacheWrite` when `holder` is shared by every caller, `v` a
    tensor (or a tuple of them) on one GPU and `key` names no device."""
    if not interp.recorder.live or not interp.stack or len(target.slice) != 1:
        return
    index = target.slice[0].slice
    if not isinstance(index, cst.Index):
        return
    dev = _one_gpu(v)
    if dev is None:
        return
    fn = interp.stack[-1].node
    holder = _shared_holder(interp, fn, target.value, st)
    if holder is None or _moved_when_read(fn, target.value):
        return
    key = interp.exprs.ev(index.value, st)
    if _keyed_per_device(fn, index.value, key):
        return
    interp.recorder.record(
        SharedCacheWrite(
            node=target,
            mode=st.mode,
            holder=dotted(target.value) or "the cache",
            kind=holder,
            device=dev,
            key=repr(key.value) if isinstance(key, Const) else None,
            device_text=_device_text(v),
            key_at=_key_binding(fn, index.value, target.value),
        ),
        key=(dev, repr(key.value) if isinstance(key, Const) else None),
    )


def _one_gpu(v: Val) -> str | None:
    """The GPU a stored tensor (or every tensor of a stored tuple: `(cos, sin)`) is certainly on."""
    items = list(v.items) if isinstance(v, SeqV) and v.items else [v]
    devs = set()
    for item in items:
        if not isinstance(item, Obj) or item.kind not in ("tensor", "buffer") or item.opaque:
            return None
        d = single(item.devs)
        if d is None or not d.startswith("cuda"):
            return None
        devs.add(d)
    return devs.pop() if len(devs) == 1 else None


def _key_binding(fn: cst.FunctionDef, key: cst.BaseExpression, holder: cst.BaseExpression) -> cst.BaseExpression:
    """Where the key is made, where the fix goes: the value of the one assignment that binds a name used only as
    this cache's key (`key = seq_len`, then `_CACHE[key]`, `key in _CACHE`); else the key itself (`T`, also a size)."""
    if not isinstance(key, cst.Name):
        return key
    name, text = key.value, dotted(holder)
    values = [
        node.value
        for node in walk(fn.body)
        if isinstance(node, cst.Assign)
        and any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets)
    ]
    reads = sum(1 for n in walk(fn.body) if isinstance(n, cst.Name) and n.value == name) - len(values)
    as_key = 0
    for n in walk(fn.body):
        if isinstance(n, cst.Subscript) and dotted(n.value) == text and len(n.slice) == 1:
            index = n.slice[0].slice
            as_key += isinstance(index, cst.Index) and isinstance(index.value, cst.Name) and index.value.value == name
        elif isinstance(n, cst.Comparison) and isinstance(n.left, cst.Name) and n.left.value == name:
            as_key += any(dotted(c.comparator) == text for c in n.comparisons)
    return values[0] if len(values) == 1 and reads == as_key else key


def _device_text(v: Val) -> str | None:
    """How the stored tensor was given its device, as code (`x.device` of `device=x.device`, `dev` of `.to(dev)`)."""
    first = v.items[0] if isinstance(v, SeqV) and v.items else v
    at = first.at if isinstance(first, Obj) else None
    if not isinstance(at, cst.Call):
        return None
    for arg in at.args:
        if arg.keyword is not None and arg.keyword.value == "device":
            return _text(arg.value)
    if isinstance(at.func, cst.Attribute) and at.func.attr.value in ("to", "cuda") and at.args:
        if at.args[0].keyword is None:
            return _text(at.args[0].value)
    return None


def _shared_holder(interp: Interp, fn: cst.FunctionDef, holder: cst.BaseExpression, st: State) -> str | None:
    """How `holder` is shared by every caller ("a mutable default argument", "a class attribute", "a module-level
    dict"), or None when it is not (a local, an instance's own attribute, something not known)."""
    if isinstance(holder, cst.Name):
        name = holder.value
        for p, default in params_of(fn):
            if p == name:
                return "a mutable default argument" if _empty_dict(default) else None
        if interp.stmts.bindings_here(name):
            return None  # (a local of the function, not the module's)
        top = _module_dicts(interp.module)
        return "a module-level dict" if name in top else None
    if isinstance(holder, cst.Attribute) and isinstance(holder.value, cst.Name):
        owner = interp.exprs.ev(holder.value, st)
        attr = holder.attr.value
        if not isinstance(owner, Obj) or owner.cls is None or (owner.attrs is not None and attr in owner.attrs):
            return None
        expr = owner.cls.class_attr(attr)
        if expr is None or not _empty_dict(expr) or _set_on_instances(owner.cls, attr):
            return None
        return "a class attribute"
    return None


def _set_on_instances(cls: ClassInfo, attr: str) -> bool:
    """Does a method of the class (or of a base of the file) bind `self.<attr>` itself, giving each
    instance its own (`self._tables = {}`)? A write into it (`self._tables[k] = t`) is no binding."""
    for c in cls.lineage():
        for node in walk(c.node.body):
            if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)):
                t = node.target
                if isinstance(t, cst.Attribute) and t.attr.value == attr and not isinstance(t.value, cst.Subscript):
                    if dotted(t.value) != c.node.name.value:  # (`Attn._tables = {}` rebinds the class's)
                        return True
    return False


def _empty_dict(expr: cst.BaseExpression | None) -> bool:
    if isinstance(expr, cst.Dict) and not expr.elements:
        return True
    return (
        isinstance(expr, cst.Call)
        and not expr.args
        and dotted(expr.func) in ("dict", "OrderedDict", "collections.OrderedDict")
    )


def _module_dicts(module: cst.Module) -> set[str]:
    """Names bound to an empty dict at the module's top level (`_CACHE = {}`, `_CACHE: dict = {}`)."""
    out: set[str] = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Assign) and _empty_dict(small.value):
                out.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))
            elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and _empty_dict(small.value):
                out.add(small.target.value)
    return out


def _keyed_per_device(fn: cst.FunctionDef, key: cst.BaseExpression, v: Val) -> bool:
    """Does the key (its text, what a name in it was bound to in this function, or its value `v`) name a device,
    or the caller?"""
    texts = [_text(key)]
    names = {n.value for n in walk(key) if isinstance(n, cst.Name)}
    for node in walk(fn.body):
        if isinstance(node, cst.Assign) and any(
            isinstance(t.target, cst.Name) and t.target.value in names for t in node.targets
        ):
            texts.append(_text(node.value))
    if any(w in t.lower() for t in texts for w in _PER_DEVICE_WORDS):
        return True
    items = v.items if isinstance(v, SeqV) and v.items else (v,)
    return any(isinstance(i, DeviceV) for i in items)


def _text(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _moved_when_read(fn: cst.FunctionDef, holder: cst.BaseExpression) -> bool:
    """Does the function move what it reads back (`cache[k].to(x.device)`, `.type_as(x)`, or a name bound to
    `cache[k]` moved)? Then every caller gets its own device's copy, whatever the key."""
    text = dotted(holder)

    def read(e: cst.BaseExpression) -> bool:
        return isinstance(e, cst.Subscript) and dotted(e.value) == text

    names = {
        t.target.value
        for node in walk(fn.body)
        if isinstance(node, cst.Assign) and read(node.value)
        for t in node.targets
        if isinstance(t.target, cst.Name)
    }
    for node in walk(fn.body):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value in ("to", "cuda", "type_as"):
                recv = node.func.value
                if read(recv) or (isinstance(recv, cst.Name) and recv.value in names):
                    return True
    return False
