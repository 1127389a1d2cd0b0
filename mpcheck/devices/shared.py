"""Module objects shared by two stages: one list of blocks in two `nn.Sequential`s, or a
default argument (`act=nn.PReLU()`) that every block holds. `Module.to()` moves the object,
so placing the second stage moves the parts the first one holds: an
`events.SharedModuleMoved` at that second move.

Identity comes from Obj.ident (a module built in an __init__, or a default argument); the
parts an instance's own __init__ built are its own (Obj.built_idents), so two
constructions of one class share only what they were given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import libcst as cst

from mpcheck.devices.events import SharedModuleMoved
from mpcheck.devices.names import dotted
from mpcheck.devices.values import Devs, DictV, Obj, SeqV, Val, distinct, single

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.interp import Interp
    from mpcheck.devices.program import State

_MAX_DEPTH = 4

# (identity key, ident, depth below the moved value)
Held = tuple[Any, int, int]


def parts(interp: Interp, v: Val) -> list[Held]:
    """The module objects `v` holds (itself included), each with a key that tells objects apart."""
    out: list[Held] = []
    _walk(interp, v, None, 0, out)
    return out


def _walk(
    interp: Interp, v: Val, owner: tuple[Any, tuple[int, int] | None] | None, depth: int, out: list[Held]
) -> None:
    if depth > _MAX_DEPTH:
        return
    if isinstance(v, Obj) and v.some_of_many:
        return  # which objects of the list: not known (`blocks[:k]` and `blocks[k:]` of a list of unknown length)
    if isinstance(v, Obj):
        key: Any
        if v.ident is not None:
            key = v.ident
            if owner is not None and owner[1] is not None and owner[1][0] <= v.ident < owner[1][1]:
                key = (owner[0], v.ident)  # built by the owner's __init__: one per construction of the owner
            out.append((key, v.ident, depth))
        elif v.attrs is not None:
            # An instance built outside an __init__ and passed in (`CutModel(Backbone())`): itself of
            # unknown identity, but the parts its own __init__ built are its own.
            # (Its parts' range is its identity: the same in every copy of it, one per construction.)
            key = ("instance", v.built_idents if v.built_idents is not None else id(v.attrs))
        else:
            return  # identity unknown (a plain layer built outside an __init__, or passed in): nothing to say
        if v.attrs is not None:
            rng = v.built_idents
            refs = v.cls.refs if v.cls is not None else ()  # held by reference, not a child: .to() leaves it
            for name, a in v.attrs.items():
                if name not in refs:
                    _walk(interp, a, (key, rng), depth + 1, out)
    elif isinstance(v, SeqV) and v.module:
        for item in v.items if v.items is not None else (v.elem,):
            _walk(interp, item, owner, depth + 1, out)
    elif isinstance(v, DictV) and v.module:
        for item in v.items.values():
            _walk(interp, item, owner, depth + 1, out)


def _owners(interp: Interp, st: State) -> dict[int, set[Any]]:
    """For each object the module being built holds, the instances among its parts whose own
    __init__ built it (the owner keys of shared._walk)."""
    out: dict[int, set[Any]] = {}
    if not isinstance(st.self_obj, Obj) or st.self_obj.attrs is None:
        return out
    held: list[Held] = []
    for v in st.self_obj.attrs.values():
        _walk(interp, v, None, 1, held)
    for key, ident, _ in held:
        if isinstance(key, tuple):
            out.setdefault(ident, set()).add(key[0])
    return out


def _alias(key: Any, ident: int, owners: dict[int, set[Any]]) -> Any:
    """The other key of an object that one instance among the parts holds: its owner's scoped key for a
    bare one, the bare one for a scoped key; else the key itself."""
    if len(owners.get(ident, ())) != 1:
        return key
    (owner,) = owners[ident]
    return ident if isinstance(key, tuple) else (owner, ident)


def _held_by(moved: dict[Any, tuple[str, cst.CSTNode, int]], move: cst.CSTNode) -> set[Any]:
    """The objects inside the value `move` moved (not that value itself)."""
    return {key for key, (_, node, depth) in moved.items() if node is move and depth >= 1}


def _refines(moved: dict[Any, tuple[str, cst.CSTNode, int]], first: cst.CSTNode, here: set[Any]) -> bool:
    """This move takes a strict part of what `first` moved (`self.encoder.to(d0)` and then
    `self.tail.to(d1)` of some of its layers): placing a part elsewhere after its whole, on purpose."""
    return here < _held_by(moved, first)


def _stored_name(move: cst.CSTNode) -> str | None:
    """`self.part1` for `self.part1.cuda(0)`: the name the moved module is reached by, when the
    receiver is a stored reference rather than a value built right there (`nn.Sequential(*blocks)`)."""
    if isinstance(move, cst.Call) and isinstance(move.func, cst.Attribute):
        return dotted(move.func.value)
    return None


def note_move(interp: Interp, recv: Val, devs: Devs, node: cst.Call, st: State) -> None:
    """A move of a module (or a container of modules) in an __init__: if it holds an object that an
    earlier move through another expression put on another device, and the object is a part of one
    of the two moved values (not the value itself moved again), record the sharing."""
    dev = single(devs)
    if not st.in_init or dev is None or dev.startswith("sym:") or recv is st.self_obj:
        return
    moved = st.scope.moved_objects
    found: list[tuple[str, str, cst.CSTNode]] = []  # (class name, first device, first move) of each shared object
    held_by = _stored_name(node)
    owners = _owners(interp, st)
    mine = parts(interp, recv)
    # the objects inside the moved value (not itself), by both keys
    here = {k for key, ident, depth in mine if depth >= 1 for k in (key, _alias(key, ident, owners))}
    noted: dict[Any, tuple[str, cst.CSTNode, int]] = {}  # this move's, kept apart until the others are read
    for key, ident, depth in mine:
        if key in noted:
            continue  # held twice by what this move takes (one default PReLU in two blocks): once
        before = moved.get(key)
        if before is None and _alias(key, ident, owners) != key:
            # The same object reached another way: one stage holds another's layers by a slice
            # (`self.tail = nn.ModuleList(backbone.layers[cut:])`), which loses which construction
            # they came from. When one instance among the parts holds that object, it is that one.
            before = moved.get(_alias(key, ident, owners))
        if before is not None and before[1] is node:
            continue  # the items of a container this move already noted (Moves.move recurses)
        if before is not None:
            first_dev, first_node, first_depth = before
            if held_by is not None and _stored_name(first_node) == held_by:
                pass  # one stage placed twice (`self.part1.cuda(0)`, `self.part1.cuda(1)`): events.PlacedTwice's
            elif max(depth, first_depth) >= 1 and distinct(first_dev, dev) and not _refines(moved, first_node, here):
                found.append((interp.ident_names.get(ident, "module"), first_dev, first_node))
        noted[key] = noted[_alias(key, ident, owners)] = (dev, node, depth)
    # This move holds everything the first one placed, and more: a part placed before its whole.
    undoes = bool(found) and _held_by(moved, found[0][2]) < here
    moved.update(noted)
    if found:
        name, first_dev, first_node = found[0]
        interp.recorder.record(
            SharedModuleMoved(
                node=node,
                mode=st.mode,
                name=name,
                count=sum(1 for n, d, f in found if n == name and d == first_dev and f is first_node),
                devs=devs,
                first=first_node,
                first_devs=frozenset((first_dev,)),
                undoes=undoes,
            )
        )
