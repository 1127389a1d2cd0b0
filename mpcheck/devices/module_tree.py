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

from collections.abc import Callable

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
    found = named_modules(v)
    return [m for _, m in found] if found is not None else None


def named_modules(v: Val) -> list[tuple[str, Val]] | None:
    """`v.named_modules()`: ("", v), then ("stages.0", part) for every submodule, depth first in registration
    order (the dotted path torch gives it); None if not known."""
    out: list[tuple[str, Val]] = []
    return out if _walk(v, "", out, 0) and len(out) <= _MAX_MODULES else None


def children(v: Val) -> list[Val] | None:
    """`v.children()`: the direct submodules, in registration order; None if not known."""
    found = named_children(v)
    return [m for _, m in found] if found is not None else None


def named_children(v: Val) -> list[tuple[str, Val]] | None:
    """`v.named_children()`: (attribute name, or index or key in a container, part)."""
    parts = _named_parts(v)
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


def _walk(v: Val, path: str, out: list[tuple[str, Val]], depth: int) -> bool:
    parts = _named_parts(v)
    if parts is None or depth > 8 or len(out) >= _MAX_MODULES:
        return False
    out.append((path, v))
    return all(_walk(p, f"{path}.{name}" if path else name, out, depth + 1) for name, p in parts)


def _parts(v: Val) -> tuple[Val, ...] | None:
    """The direct submodules of the module `v`, or None where they are not known."""
    named = _named_parts(v)
    return tuple(p for _, p in named) if named is not None else None


def _named_parts(v: Val) -> tuple[tuple[str, Val], ...] | None:
    """The direct submodules of the module `v` with the names torch gives them, or None where not known."""
    if isinstance(v, SeqV):
        if not v.module or v.items is None:
            return None
        return tuple((str(i), p) for i, p in enumerate(v.items)) if all(_is_module(i) for i in v.items) else None
    if isinstance(v, DictV):
        if not v.module:
            return None
        items = tuple((str(k), p) for k, p in v.items.items())
        return items if all(_is_module(p) for _, p in items) else None
    if not isinstance(v, Obj):
        return None
    if v.kind in ("passthrough", "loss"):
        return ()
    if v.kind != "module":
        return None
    if v.cls is None or v.attrs is None:
        return () if v.nn_class and v.nn_class in T.PARAMETERED and v.nn_class not in T.WITH_SUBMODULES else None
    parts = []
    for name, a in v.attrs.items():
        if isinstance(a, _NOT_A_PART) or (isinstance(a, Obj) and a.kind in ("tensor", "param", "buffer")):
            continue  # a setting, a device, a tensor: no submodule
        if isinstance(a, (SeqV, DictV)) and not a.module:
            continue  # a plain list or dict: what it holds is not registered
        if not _is_module(a):
            return None  # anything else may be a module (an argument, an object of another file's class)
        parts.append((name, a))
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


def is_instance_of(v: Val, cls: ClassInfo) -> bool | None:
    """`isinstance(v, C)` for a class C of the project (`layer.to(a if isinstance(layer, FFN) else b)` over a
    model's blocks), or None where not certain: True when v's class is C or derives from it through classes the
    model knows; False when every base of v's class is known and none is C, or v is a torch.nn layer or not a
    module at all."""
    if isinstance(v, _NOT_A_PART) or (isinstance(v, Obj) and v.kind in ("tensor", "param", "buffer")):
        return False
    if not isinstance(v, Obj) or v.kind != "module":
        return None
    if v.cls is None:
        return False if v.nn_class in _KNOWN_CLASSES else None
    return _derives(v.cls, cls)


def _derives(sub: ClassInfo, cls: ClassInfo) -> bool | None:
    def leaf(base: str) -> bool | None:
        # torch.nn's own classes derive from no class of the project
        nn_class = base.startswith(("nn.", "torch.nn.")) and base.count(".") <= 2
        return False if base in _MODULE_BASES or nn_class else None

    return _reaches(sub, lambda c: c is cls, leaf, 0)


def _class_is(cls: ClassInfo, name: str, depth: int) -> bool | None:
    """Is a class of the file a subclass of torch.nn.<name>? None where a base is not known."""

    def leaf(base: str) -> bool | None:
        if base.rsplit(".", 1)[-1] == name and (base.startswith(("nn.", "torch.nn.")) or base == name):
            return True
        return False if base in _MODULE_BASES else None

    return _reaches(cls, lambda c: False, leaf, depth)


def _reaches(
    cls: ClassInfo, found: Callable[[ClassInfo], bool], leaf: Callable[[str], bool | None], depth: int
) -> bool | None:
    """Does `cls` or a base of it satisfy `found` (the project's classes, through `local_bases`) or `leaf` (a base
    written by name that is no class of the project)? False when no base does and all are known; None where a
    base is not known."""
    if found(cls):
        return True
    local = {b.name: b for b in cls.local_bases}
    verdict: bool | None = False
    for base in cls.bases:
        sub = _reaches(local[base], found, leaf, depth + 1) if base in local and depth < 6 else leaf(base)
        if sub is True:
            return True
        if sub is None:
            verdict = None
    return verdict if cls.bases else None
