"""MP020's facts: a tensor on a GPU whose elements Python reads on the host one at a time.

Iterating a tensor gives its elements as 0-dim tensors on its device. Python's `max(t)`, `min(t)` and
`sorted(t)` compare them pair by pair, and each comparison's truth is read on the host: a kernel launch
and a wait for the GPU per element. So does a loop whose body reads its element (`v.item()`, `int(v)`).
One reduction (`t.max()`) or one copy of the whole tensor (`t.tolist()`) waits once. `torch.tensor(losses)` of
a list of tensors on a GPU reads each one's value on the host the same way, where `torch.stack(losses)` keeps them
there (and `.cpu()` after it copies them once).

Only a tensor the model knows to be on a GPU counts; a list of tensors (`max(losses)`) is not one, and a
tensor of unknown device says nothing. Only code that runs every step counts, as for MP019: a forward, or
inside a loop (a script's last line that prints its predictions once waits a few times, once).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import libcst as cst

from mpcheck.devices.events import ElementSync
from mpcheck.devices.values import Devs, Obj, SeqV, Val, single

if TYPE_CHECKING:
    from mpcheck.devices.interp import Interp
    from mpcheck.devices.program import State

# Python builtins that order the items of what they are given (`max(t)` is `max(iter(t))`).
ORDERING_BUILTINS = frozenset({"max", "min", "sorted"})
# What reads one element on the host: `v.item()`, `v.tolist()`, `int(v)`, `float(v)`, `bool(v)`.
_READ_METHODS = frozenset({"item", "tolist"})
_READ_BUILTINS = frozenset({"int", "float", "bool"})


def gpu_devices(interp: Interp, v: Val | None) -> Devs:
    """The device of `v` when it is a tensor on one GPU (a known one, or one whose index the code only names:
    `torch.device("cuda", GPU)` with `GPU` from the environment), else None."""
    if isinstance(v, Obj) and v.kind == "tensor":
        dev = single(v.devs)
        if dev is not None and (dev.startswith("cuda") or dev[4:] in interp.cuda_symbols and dev.startswith("sym:")):
            return v.devs
    return None


def _every_step(interp: Interp, st: State) -> bool:
    return not st.in_init and bool(interp.moves.in_forward() or interp.in_unknown_loop or interp.loop_outer)


def note_ordering(interp: Interp, q: str, args: list[Val], node: cst.Call, st: State) -> None:
    """`max(t)` / `min(t)` / `sorted(t)`: one tensor, given alone (two arguments compare two values once)."""
    positional = [a for a in node.args if a.keyword is None]
    if q not in ORDERING_BUILTINS or len(args) != 1 or len(positional) != 1 or positional[0].star:
        return
    if not _every_step(interp, st):
        return
    devs = gpu_devices(interp, args[0])
    if devs is not None:
        interp.recorder.record(ElementSync(node=node, mode=st.mode, how=q, devs=devs, iterated=positional[0].value))


def note_from_values(interp: Interp, data: Val, node: cst.Call, st: State) -> None:
    """`torch.tensor([a, b, c])` / `torch.tensor(losses)` of tensors on a GPU (two or more, known), in code
    that runs every step: one wait per tensor."""
    if not isinstance(data, SeqV) or data.items is None or len(data.items) < 2 or not _every_step(interp, st):
        return
    devs = [gpu_devices(interp, item) for item in data.items]
    # On one GPU: `torch.stack` (the fix) needs them there; on two, the host is where they can meet.
    if all(d is not None and d == devs[0] for d in devs) and node.args:
        interp.recorder.record(
            ElementSync(node=node, mode=st.mode, how="tensor", devs=devs[0], iterated=node.args[0].value)
        )


def note_loop(
    interp: Interp,
    target: cst.BaseAssignTargetExpression,
    it: Val,
    iterated: cst.BaseExpression,
    body: cst.CSTNode,
    loop: cst.CSTNode,
    st: State,
) -> None:
    """A `for` (or a comprehension's `for`) over a GPU tensor: the first host read of its element in `body`."""
    devs = gpu_devices(interp, it)
    if devs is None or not isinstance(target, cst.Name) or not _every_step(interp, st):
        return
    for read, how in _host_reads(body, target.value):
        interp.recorder.record(ElementSync(node=read, mode=st.mode, how=how, devs=devs, iterated=iterated, loop=loop))
        return


def _host_reads(node: cst.CSTNode, name: str) -> Iterator[tuple[cst.Call, str]]:
    """The calls under `node` that read the value of `name` on the host, in source order; a nested
    function or class is another scope (its `name` is not the loop's), and so is a rebinding we do not follow."""
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        return
    if isinstance(node, cst.Call):
        how = _reads(node, name)
        if how is not None:
            yield node, how
            return
    for child in node.children:
        yield from _host_reads(child, name)


def _reads(call: cst.Call, name: str) -> str | None:
    """How `call` reads `name` on the host ("item", "int"...), or None."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in _READ_METHODS and not call.args:
        return func.attr.value if isinstance(func.value, cst.Name) and func.value.value == name else None
    if isinstance(func, cst.Name) and func.value in _READ_BUILTINS and len(call.args) == 1:
        arg = call.args[0]
        if arg.keyword is None and not arg.star and isinstance(arg.value, cst.Name) and arg.value.value == name:
            return func.value
    return None
