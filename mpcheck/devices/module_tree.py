"""A module's submodules as `Module.modules()` and `Module.children()` give them, and `isinstance` of a
module against a torch.nn class, where the model knows them for certain.

`[m.weight for m in model.modules() if isinstance(m, nn.Linear)]` over a model split by hand holds
weights on each GPU: summing their norms adds tensors of two devices. That needs the submodules in
order, and the filter decided for each. Both are answered only where every part is known: an
instance of a class of the file (its registered parts are its attributes, in the order __init__
assigned them), an `nn.Sequential` / `nn.ModuleList` / `nn.ModuleDict` of known items, and torch.nn
layers that hold no submodule. Anything else (a class of another file, an argument, a torch.nn layer
with submodules of its own such as `MultiheadAttention`) leaves the whole answer unknown: a list with
a module missing would tell a loop over it that the module is not there.
"""

from __future__ import annotations

from mpcheck.devices import torchapi as T
from mpcheck.devices.program import ClassInfo
from mpcheck.devices.values import Const, DeviceV, DictV, Obj, SeqV, Val

_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})
# The torch.nn classes whose instances the model tells apart: an `isinstance` against one is decided.
_KNOWN_CLASSES = T.PARAMETERED | T.PARAMETERLESS | _CONTAINERS
_MODULE_BASES = frozenset({"nn.Module", "torch.nn.Module", "Module"})
_MAX_MODULES = 64  # more than a loop unrolls (MAX_UNROLL): a list that long is of no use here
_NOT_A_PART = (Const, DeviceV)


def modules(v: Val) -> list[Val] | None:
    """`v.modules()`: `v`, then every submodule, depth first in registration order; None if not known."""
    out: list[Val] = []
    return out if _walk(v, out, 0) and len(out) <= _MAX_MODULES else None


def children(v: Val) -> list[Val] | None:
    """`v.children()`: the direct submodules, in registration order; None if not known."""
    parts = _parts(v)
    return list(parts) if parts is not None and len(parts) <= _MAX_MODULES else None


def submodule(v: Val, path: str, overrides: dict[str, Val]) -> Val | None:
    """`v.get_submodule("h.0.attn")`: the part at that dotted path, or None where it is not known. Each atom is
    an attribute of a module (as the code reads it now: `overrides`, the environment's `<id>.<attr>` entries
    for a module's attributes rebound since it was built), an index of an nn.Sequential / ModuleList or a key of
    an nn.ModuleDict, as torch's own walk reads them (getattr on each)."""
    cur: Val | None = v
    for atom in path.split(".") if path else ():
        if isinstance(cur, Obj) and cur.kind == "module" and cur.attrs is not None:
            cur = overrides.get(f"{id(cur)}.{atom}", cur.attrs.get(atom))
        elif isinstance(cur, SeqV) and cur.module and cur.items is not None and atom.isdigit():
            cur = cur.items[int(atom)] if int(atom) < len(cur.items) else None
        elif isinstance(cur, DictV) and cur.module:
            cur = cur.items.get(atom)
        else:
            return None
    return cur if cur is not None and _is_module(cur) else None


def _walk(v: Val, out: list[Val], depth: int) -> bool:
    parts = _parts(v)
    if parts is None or depth > 8 or len(out) >= _MAX_MODULES:
        return False
    out.append(v)
    return all(_walk(p, out, depth + 1) for p in parts)


def _parts(v: Val) -> tuple[Val, ...] | None:
    """The direct submodules of the module `v`, or None where they are not known."""
    if isinstance(v, SeqV):
        if not v.module or v.items is None:
            return None
        return v.items if all(_is_module(i) for i in v.items) else None
    if isinstance(v, DictV):
        if not v.module:
            return None
        items = tuple(v.items.values())
        return items if all(_is_module(i) for i in items) else None
    if not isinstance(v, Obj):
        return None
    if v.kind in ("passthrough", "loss"):
        return ()
    if v.kind != "module":
        return None
    if v.cls is None or v.attrs is None:
        return () if v.nn_class and v.nn_class in T.PARAMETERED and v.nn_class not in T.WITH_SUBMODULES else None
    parts = []
    for a in v.attrs.values():
        if isinstance(a, _NOT_A_PART) or (isinstance(a, Obj) and a.kind in ("tensor", "param", "buffer")):
            continue  # a setting, a device, a tensor: no submodule
        if isinstance(a, (SeqV, DictV)) and not a.module:
            continue  # a plain list or dict: what it holds is not registered
        if not _is_module(a):
            return None  # anything else may be a module (an argument, an object of another file's class)
        parts.append(a)
    return tuple(parts)


def _is_module(v: Val) -> bool:
    if isinstance(v, (SeqV, DictV)):
        return v.module
    return isinstance(v, Obj) and v.kind in ("module", "passthrough", "loss")


def is_instance(v: Val, name: str) -> bool | None:
    """`isinstance(v, torch.nn.<name>)`, or None where not certain."""
    if name == "Module":
        if _is_module(v):
            return True
        return False if isinstance(v, _NOT_A_PART) or (isinstance(v, Obj) and v.kind == "tensor") else None
    if name not in _KNOWN_CLASSES:
        return None
    if isinstance(v, _NOT_A_PART) or (isinstance(v, Obj) and v.kind in ("tensor", "param", "buffer")):
        return False
    if isinstance(v, SeqV) and v.module:
        return None if name in ("Sequential", "ModuleList") else False
    if isinstance(v, DictV) and v.module:
        return name == "ModuleDict"
    if not isinstance(v, Obj):
        return None
    if v.kind == "passthrough":
        return False if name not in T.PARAMETERLESS else None  # which parameterless layer it is is not kept
    if v.kind == "module" and v.cls is not None:
        return _class_is(v.cls, name, 0)
    if v.kind == "module" and v.nn_class in _KNOWN_CLASSES:
        return v.nn_class == name
    return None


def _class_is(cls: ClassInfo, name: str, depth: int) -> bool | None:
    """Is a class of the file a subclass of torch.nn.<name>? None where a base is not known."""
    local = {b.name: b for b in cls.local_bases}
    verdict: bool | None = False
    for base in cls.bases:
        last = base.rsplit(".", 1)[-1]
        if base in local and depth < 6:
            sub = _class_is(local[base], name, depth + 1)
        elif last == name and (base.startswith(("nn.", "torch.nn.")) or base == name):
            sub = True
        elif base in _MODULE_BASES:
            sub = False
        else:
            sub = None
        if sub is True:
            return True
        if sub is None:
            verdict = None
    return verdict if cls.bases else None
