"""Models that are provably never moved: `model = Net()` in a function (or a script) that does
nothing else with `model` than call it (`model(x)`, `model.eval()`, `model.parameters()`).
Then the parametered torch.nn modules that `Net.__init__` built without a device are on the
CPU when `forward` runs, not somewhere unknown; a forward that moves its input to `cuda:k`
before calling one of them is a mismatch (MP001, "never placed").

Anything that might move the model keeps the modules unknown: the name passed to a call,
stored, rebound, used in a nested function or as a global elsewhere, `device=` at
construction, a default device (`with torch.device(...)`, `set_default_device`), a class
that moves itself (`self.to(`, `self.cuda(`, `self.apply(`) or reaches its parts by a computed
name or a walk (`getattr(self, name).to(dev)` over a map read from a file, `self.children()`), or has a base other than
`nn.Module` (a library base may place itself). Returning it (`return scaler, nll`) is no move: the function's own
calls ran before, and a caller that moves it calls it in its own scope.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from mpcheck.devices import data_moves
from mpcheck.devices.names import dotted
from mpcheck.devices.program import ClassInfo
from mpcheck.devices.values import UNPLACED, DictV, Obj, SeqV, Val, is_moduleish, one
from mpcheck.devices.walk import attribute_assignments, children

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.interp import Interp

# What may be done to the model without moving it: call it, switch its mode, read its parameters.
_HARMLESS_METHODS = frozenset(
    {"eval", "train", "forward", "parameters", "named_parameters", "zero_grad", "state_dict", "load_state_dict"}
)  # (load_state_dict copies into the parameters where they are; with assign=True it does not: _Uses.walk)
MODULE_BASES = frozenset({"nn.Module", "torch.nn.Module", "Module"})
_SELF_MOVES = frozenset({"to", "cuda", "apply", "_apply", "to_empty"})  # self.<one of these>(...)
_SELF_WALKS = frozenset({"children", "named_children", "modules", "named_modules"})  # may move each part
NEVER_PLACED = "never placed, so on the CPU"
# An item of a plain list or tuple held by a module: no submodule, so no `.to()` of the module reaches it.
IN_A_PLAIN_LIST = "never placed (held in a plain list, which Module.to() does not reach), so on the CPU"


def never_placed_view(interp: Interp, mod: Obj, name: str | None) -> Obj | None:
    """`mod` (called as `name(...)`, or built and called at once, `Net()(x)`, when `name` is None)
    with its unplaced modules on the CPU, when the model is provably never moved; None otherwise.
    A temporary is never moved: nothing else can reach it."""
    cinfo = mod.cls
    if (
        cinfo is None
        or mod.attrs is None
        or mod.split
        or mod.dispatched
        or mod.devs is not None
        or interp.default_device_changed
        or mod not in cinfo.instances.values()  # a moved copy (moved_instance), or built elsewhere
    ):
        return None
    scope: cst.CSTNode = interp.stack[-1].node if interp.stack else interp.module
    built: cst.BaseExpression | None = None
    if name is not None:
        # Called in a closure (`def closure(): ... scaler(logits)` handed to `opt.step`): judged where it is built.
        for s in (*(frame.node for frame in reversed(interp.stack)), interp.module):
            built = _built_in(s, name, cinfo.name)
            if built is not None:
                scope = s
                break
    key = (id(scope), name or "", id(cinfo))
    if key not in interp.unmoved:
        only_called = name is None or _only_called(scope, name, cinfo.name)
        interp.unmoved[key] = only_called and _plain_module_class(cinfo)
    if not interp.unmoved[key]:
        return None
    attrs = {a: on_cpu(v, 0) for a, v in mod.attrs.items()}
    own = False
    for a, v in interp.cpu_as_built.get(id(mod), {}).items():
        # Its own Parameters and buffers made on the CPU (`self.log_t = nn.Parameter(torch.zeros(1))`), kept of
        # unknown device while a move of the whole model could come: none comes.
        held = attrs.get(a)
        if isinstance(held, Obj) and held.devs is None and isinstance(v, Obj) and v.kind in ("param", "buffer"):
            attrs[a] = v.with_(origin=NEVER_PLACED)
            own = True
    if all(attrs[a] is v for a, v in mod.attrs.items()):
        return None
    # (holding weights of its own on the CPU, it is itself never placed: the finding says to place it)
    if own:
        return mod.with_(attrs=attrs, origin=NEVER_PLACED, at=built if built is not None else mod.at)
    return mod.with_(attrs=attrs)


def on_cpu(v: Val, depth: int = 0, plain: bool = False, origin: str = NEVER_PLACED) -> Val:
    """`v` with the parametered torch.nn modules built without a device in it (itself, the items of
    an `nn.Sequential` / `ModuleList` / `ModuleDict`; `plain`: of a plain list or tuple too, said so in
    their origin) on the CPU, "never placed"."""
    if depth > 4:
        return v
    if isinstance(v, Obj) and v.kind == "module" and v.devs is None and v.origin == UNPLACED:
        return v.with_(devs=one("cpu"), origin=origin)
    if isinstance(v, Obj) and v.kind == "module" and v.cls is not None and v.attrs and v.devs is None and not v.split:
        if v.origin:
            return v  # moved somewhere not known (moves.py): its parts with it
        # an instance of a class of the file that placed none of its parts: its unplaced layers
        attrs = {a: on_cpu(i, depth + 1) for a, i in v.attrs.items()}
        if all(attrs[a] is i for a, i in v.attrs.items()):
            return v
        parts = [i for i in attrs.values() if is_moduleish(i)]
        whole = bool(parts) and all(isinstance(i, Obj) and i.devs == one("cpu") for i in parts)
        return v.with_(attrs=attrs, devs=one("cpu"), origin=origin) if whole else v.with_(attrs=attrs)
    if isinstance(v, SeqV) and (v.module or plain) and v.items is not None:
        if plain:
            origin = IN_A_PLAIN_LIST
        items = tuple(on_cpu(i, depth + 1, origin=origin) for i in v.items)
        return (
            v
            if all(a is b for a, b in zip(items, v.items))
            else SeqV(items, kind=v.kind, module=v.module, hooks=v.hooks)
        )
    if isinstance(v, DictV) and v.module:
        got = {k: on_cpu(i, depth + 1, origin=origin) for k, i in v.items.items()}
        return v if all(got[k] is i for k, i in v.items.items()) else DictV(got, module=True)
    return v


def parts_moved_from_outside(interp: Interp) -> frozenset[str]:
    """The attribute names X of `<owner>.X.to(...)` / `.cuda(...)` / `.cpu()` anywhere in the file,
    where the owner is not plain `self` (`block.norm.to(dev)`, `self.block.norm.cuda(1)`): a part
    placed from outside its class, after its __init__ left it unplaced (found in the file's one walk
    for its attributes: walk.attribute_assignments)."""
    return attribute_assignments(interp.module).moved_from_outside


def built_here(call: cst.Call, cls_name: str) -> bool:
    """`call` builds the class `cls_name` without device= (`Net()`, `models.Net(depth=2)`)."""
    name = dotted(call.func) or ""
    return name.rsplit(".", 1)[-1] == cls_name and not any(
        a.keyword is not None and a.keyword.value == "device" for a in call.args
    )


def _plain_module_class(cinfo: ClassInfo, depth: int = 0) -> bool:
    """A subclass of nn.Module (through classes of this file) that never moves itself."""
    if depth > 4 or _moves_itself(cinfo.node):
        return False
    local = {b.name: b for b in cinfo.local_bases}
    for b in cinfo.bases:
        if b in MODULE_BASES:
            continue
        if b not in local or not _plain_module_class(local[b], depth + 1):
            return False
    return bool(cinfo.bases)


def moved_by_a_method(cinfo: ClassInfo) -> bool:
    """Does a method of the class other than __init__ (of its lineage in this file) move the instance
    or reach its parts by a computed name (`self.to(dev)` in a `place()`)? Then its placement after
    __init__ is not what its methods meet once the caller has called that one."""
    return any(_moves_itself(m.node) for c in cinfo.lineage() for n, m in c.methods.items() if n != "__init__")


def _moves_itself(node: cst.CSTNode) -> bool:
    """Does `node` contain a call `self.to(...)`, `self.cuda(...)`, `self.apply(...)`..., or reach
    its parts by a computed name or by walking them (`getattr(self, name)`, `setattr(self, name, ...)`,
    `self.children()`), which may move any of them?"""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        if (
            isinstance(node.func.value, cst.Name)
            and node.func.value.value == "self"
            and node.func.attr.value in _SELF_MOVES | _SELF_WALKS
        ):
            return True
    if _by_computed_name(node):
        return True
    return any(_moves_itself(c) for c in children(node))


def reaches_parts_by_name(cinfo: ClassInfo) -> bool:
    """Does a method of the class (of its lineage in this file, __init__ included) reach its parts by
    a computed name (`getattr(self, name).to(dev)` over a map)? Where the map is not known, which
    parts that places is not known either: none of them is provably left on the CPU."""
    return any(_has_computed_name(m.node) for c in cinfo.lineage() for m in c.methods.values())


def _has_computed_name(node: cst.CSTNode) -> bool:
    return _by_computed_name(node) or any(_has_computed_name(c) for c in children(node))


def _by_computed_name(node: cst.CSTNode) -> bool:
    """`getattr(self, name)` / `setattr(self, name, ...)` with a name that is not a literal."""
    if not (
        isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("getattr", "setattr")
    ):
        return False
    args = node.args
    return (
        len(args) >= 2
        and isinstance(args[0].value, cst.Name)
        and args[0].value.value == "self"
        and not isinstance(args[1].value, cst.SimpleString)
    )


def _built_in(scope: cst.CSTNode, name: str, cls_name: str) -> cst.BaseExpression | None:
    """The call `cls_name(...)` by which `scope` binds `name` (in a function nested in it too), if it does."""
    uses = _Uses(name, cls_name)
    uses.walk(scope)
    return uses.call if uses.built > 0 else None


def _only_called(scope: cst.CSTNode, name: str, cls_name: str) -> bool:
    """In `scope` (a function, or the whole file for a script's global), `name` is bound once, by
    `name = cls_name(...)` without device=, and otherwise only called or asked a harmless method."""
    uses = _Uses(name, cls_name)
    uses.walk(scope)
    return not uses.other and uses.built == 1


class _Uses:
    """Every occurrence of a name, sorted into the construction, harmless uses and anything else."""

    def __init__(self, name: str, cls_name: str) -> None:
        self.name = name
        self.cls_name = cls_name
        self.built = 0
        self.other = False
        self.call: cst.BaseExpression | None = None  # the (first) construction: `Net()` of `name = Net()`

    def walk(self, node: cst.CSTNode) -> None:
        if self.other:
            return
        if isinstance(node, cst.Assign) and self._construction(node):
            self.built += 1
            self.call = self.call or node.value
            self.walk(node.value)
            return
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == self.name:
            for a in node.args:
                self.walk(a)
            return
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and isinstance(node.func.value, cst.Name)
            and node.func.value.value == self.name
            and node.func.attr.value in _HARMLESS_METHODS
            and not any(a.keyword is not None and a.keyword.value == "assign" for a in node.args)
        ):
            for a in node.args:
                self.walk(a)
            return
        if isinstance(node, cst.Return) and node.value is not None:
            # `return scaler, nll` after its use: the function's own calls ran before it could be moved (a caller
            # that moves it and calls it again does so in its own scope, judged there)
            parts = node.value.elements if isinstance(node.value, cst.Tuple) else (node.value,)
            for part in parts:
                value = part.value if isinstance(part, cst.BaseElement) else part
                if not (isinstance(value, cst.Name) and value.value == self.name):
                    self.walk(value)
            return
        if isinstance(node, cst.Name) and node.value == self.name:
            self.other = True
            return
        if isinstance(node, cst.With) and any(
            isinstance(i.item, cst.Call) and dotted(i.item.func) in ("torch.device", "device") for i in node.items
        ):
            self.other = True  # modules built under `with torch.device(...)` are placed there
            return
        if isinstance(node, cst.For) and (loop := data_moves.data_move_loop(node)) and dotted(loop.owner) == self.name:
            self.other = True  # `for p in model.parameters(): p.data = p.data.to(d)` moves it
            return
        for child in children(node):
            self.walk(child)

    def _construction(self, node: cst.Assign) -> bool:
        return (
            len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
            and node.targets[0].target.value == self.name
            and isinstance(node.value, cst.Call)
            and isinstance(node.value.func, cst.Name)
            and node.value.func.value == self.cls_name
            and not any(a.keyword is not None and a.keyword.value == "device" for a in node.value.args)
        )
