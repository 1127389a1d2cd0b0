"""Modules built inside `with torch.cuda.device(i):` and never moved there (MP004's form for module construction),
or moved after the block to the current device, which is no longer GPU i there.

`torch.cuda.device(i)` sets the current CUDA device: where CUDA work without an index goes (`.cuda()`,
`device="cuda"`). It is not a default device for new tensors (that is `with torch.device("cuda", i):`), so a
module built inside it, with no device and no `.cuda()`, is made on the CPU: a stage meant for GPU i trains on
the host. Syntax only: the `with` block, the constructions in it, and the moves of what they are bound to.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst

from mpcheck.devices.names import dotted
from mpcheck.devices.walk import walk
from mpcheck.rules.made_on_current import indexless

_CONTEXT = frozenset({"torch.cuda.device", "cuda.device"})
_MOVES = frozenset({"to", "cuda", "to_empty"})
# Words in a class's source that mean it may place itself or its parts (`self.cuda()` on the current device,
# `device=`, `.to(...)`): then where its parts land is not this check's to say.
_PLACES_ITSELF = (".cuda(", ".to(", "device=", ".to_empty(", "set_default_device")


def unplaced_in_cuda_device_blocks(module: cst.Module) -> Iterator[tuple[cst.Call, cst.Call]]:
    """(the construction, the `torch.cuda.device(...)` call) for each module built in such a block with no device
    and not moved in the block: a torch.nn layer (`nn.Linear(...)`), or a class of the file deriving from
    `nn.Module` that places nothing itself. The outermost construction of an expression only."""
    classes = _module_classes(module)
    moved = _moved_names(module)  # (anywhere in the file: a model built here and moved after the block is placed)
    for node in walk(module):
        if not isinstance(node, cst.With):
            continue
        contexts = _contexts(node)
        if not contexts:
            continue
        for call in _outermost_constructions(node.body, classes):
            if not _moved_where_built(node.body, call, moved):
                yield call, contexts[0]


def _module_classes(module: cst.Module) -> dict[str, bool]:
    """Class name -> whether it places nothing itself, for the file's classes deriving from nn.Module."""
    out: dict[str, bool] = {}
    for n in walk(module):
        if isinstance(n, cst.ClassDef) and any((dotted(b.value) or "").rsplit(".", 1)[-1] == "Module" for b in n.bases):
            source = cst.Module([]).code_for_node(n)
            out[n.name.value] = not any(w in source for w in _PLACES_ITSELF)
    return out


def _is_construction(call: cst.Call, classes: dict[str, bool]) -> bool:
    name = dotted(call.func) or ""
    if any(a.keyword is not None and a.keyword.value == "device" for a in call.args):
        return False
    if name.startswith(("nn.", "torch.nn.")) and name.rsplit(".", 1)[-1][:1].isupper():
        return True
    return classes.get(name, False)


def _outermost_constructions(body: cst.CSTNode, classes: dict[str, bool]) -> list[cst.Call]:
    found: list[cst.Call] = []
    inside: set[int] = set()
    for n in walk(body):
        if isinstance(n, cst.Call) and id(n) not in inside and _is_construction(n, classes):
            found.append(n)
            inside.update(id(m) for m in walk(n) if m is not n)
    return found


def _moved_names(body: cst.CSTNode) -> set[str]:
    """Names moved somewhere: `m.cuda()`, `m.to(...)`, `m = m.cuda()`."""
    return {
        n.func.value.value
        for n in walk(body)
        if isinstance(n, cst.Call)
        and isinstance(n.func, cst.Attribute)
        and n.func.attr.value in _MOVES
        and isinstance(n.func.value, cst.Name)
    }


def _moved_where_built(body: cst.CSTNode, call: cst.Call, moved: set[str]) -> bool:
    """Is the construction moved at once (`Net().cuda()`), or bound to a name the block moves?"""
    for n in walk(body):
        if (
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value in _MOVES
            and n.func.value is call
        ):
            return True
        if isinstance(n, cst.Assign) and n.value is call:
            names = {t.target.value for t in n.targets if isinstance(t.target, cst.Name)}
            if names & moved or not names:
                return True  # (bound to an attribute or an item: followed elsewhere, not here)
    return False


def moved_to_current_after_block(module: cst.Module) -> Iterator[tuple[str, cst.Call, cst.Call]]:
    """(a name, the `torch.cuda.device(...)` call, a move) for each name bound inside such a block (`decoder =
    Decoder(...)`) that a later statement of the same block of code moves to the current CUDA device (`decoder =
    decoder.cuda()`, `.to("cuda")`) outside any such block: the block's GPU is no longer current there. Not in a
    file that calls `set_device` (another device made current), nor for a block that enters GPU 0 by a literal."""
    if any(isinstance(n, cst.Call) and (dotted(n.func) or "").endswith("set_device") for n in walk(module)):
        return
    for block in walk(module):
        if not isinstance(block, (cst.IndentedBlock, cst.Module)):
            continue
        for i, stmt in enumerate(block.body):
            if not isinstance(stmt, cst.With):
                continue
            contexts = [c for c in _contexts(stmt) if not _literal_gpu_zero(c)]
            if not contexts:
                continue
            bound = _names_bound(stmt.body)
            for name in bound:
                move = _first_move_after(block.body[i + 1 :], name)
                if move is not None:
                    yield name, contexts[0], move


def _contexts(node: cst.With) -> list[cst.Call]:
    """The `torch.cuda.device(...)` calls a `with` enters."""
    return [item.item for item in node.items if isinstance(item.item, cst.Call) and dotted(item.item.func) in _CONTEXT]


def _literal_gpu_zero(context: cst.Call) -> bool:
    """`torch.cuda.device(0)` / `("cuda:0")`: the GPU that is current anyway where nothing sets another."""
    if len(context.args) != 1:
        return False
    value = context.args[0].value
    if isinstance(value, cst.Integer):
        return value.evaluated_value == 0
    return isinstance(value, cst.SimpleString) and value.evaluated_value == "cuda:0"


def _names_bound(body: cst.BaseSuite) -> list[str]:
    """Names a block binds by plain assignment (`decoder = Decoder(...)`), in order."""
    found: list[str] = []
    for n in walk(body):
        if isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name):
            name = n.targets[0].target.value
            if name not in found:
                found.append(name)
    return found


def _first_move_after(rest: Sequence[cst.BaseStatement], name: str) -> cst.Call | None:
    """The first statement after the block that uses `name`: its move to the current device (`name.cuda()`,
    `name.to("cuda")`), or None where that statement does anything else with it first (or enters another
    `torch.cuda.device`)."""
    for stmt in rest:
        uses = [n for n in walk(stmt) if isinstance(n, cst.Name) and n.value == name]
        if isinstance(stmt, cst.With) and _contexts(stmt):
            return None
        if not uses:
            continue
        for n in walk(stmt):
            if (
                isinstance(n, cst.Call)
                and isinstance(n.func, cst.Attribute)
                and isinstance(n.func.value, cst.Name)
                and n.func.value.value == name
                and indexless(n)  # `.cuda()`, `.to("cuda")`: whatever CUDA device is current there
            ):
                return n
        return None
    return None
