"""A tensor made on the index-less current device inside a class (a stage's forward, an init_hidden,
a cached table), or placed index-less after a `set_device(k)` anywhere (`batch.cuda()` in a training
function), that meets tensors or modules on an explicit GPU: the mismatch's root cause is the line
that made it, so MP004 reports it there (as the run-time face does) and MP001 leaves it alone.
The same for a stage of a split class placed index-less while set_device(k) made cuda:k current, whose
input arrives from another GPU (`stage_placed_on_current`)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from mpcheck.devices.events import IndexlessPlacement, Mismatch, StagesPlacedOnCurrent
from mpcheck.devices.values import CURRENT, Obj, single
from mpcheck.rules.context import FileContext


@dataclass(frozen=True)
class MadeOnCurrent:
    made: cst.CSTNode  # the `.cuda()` / `device='cuda'` / factory under a default device
    value: Obj  # the tensor made there
    stage: str  # the explicit GPU it meets ("cuda:1")
    # the set_device(k) that made cuda:k current, when the tensor was placed after it (anywhere: a
    # training function too); None for a tensor made on the current device inside a class
    after: IndexlessPlacement | None = None


def made_on_current(ctx: FileContext, ev: Mismatch) -> MadeOnCurrent | None:
    """The tensor of `ev` (either side) made on the current device inside a class of this file, or placed
    index-less after a set_device(k) anywhere in it, meeting one on an explicit cuda:N; None for any
    other mismatch."""
    for made, stage in ((ev.value, single(ev.target)), (ev.other, single(ev.value.devs))):
        if (
            not isinstance(made, Obj)
            or stage is None
            or stage == single(made.devs)
            or not stage.startswith("cuda:")
            or not isinstance(made.at, cst.Call)
        ):
            continue
        after = ctx.tensors_placed_after_set_device.get(made.at)
        if after is not None and ctx.owns(made.at):
            return MadeOnCurrent(made.at, made, stage, after)
        if (single(made.devs) == CURRENT or indexless(made.at)) and _in_a_class(ctx, made.at):
            return MadeOnCurrent(made.at, made, stage)
    return None


def indexless(node: cst.CSTNode) -> bool:
    """`x.cuda()`, `x.to("cuda")`, `torch.zeros(n, device="cuda")`: a placement that names no index (the
    device model may know the current device from a set_device, and call it cuda:k)."""
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
        return not node.args
    if isinstance(func, cst.Attribute) and func.attr.value == "to":
        first = node.args[0].value if node.args else None
        return isinstance(first, cst.SimpleString) and first.raw_value == "cuda"
    for a in node.args:
        if a.keyword is not None and a.keyword.value == "device" and isinstance(a.value, cst.SimpleString):
            return a.value.raw_value == "cuda"
    return False


def _in_a_class(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is `node` a node of this file's tree, inside a class body (a method)?"""
    if not ctx.owns(node):
        return False
    line = ctx.line(node)
    return any(start <= line <= end for start, end in ctx.class_lines)


def stage_placed_on_current(ctx: FileContext, ev: Mismatch) -> IndexlessPlacement | None:
    """The index-less placement of the module of a mismatch at its input (`self.embed = nn.Embedding(...)
    .cuda()` after `set_device(1)`, its input on cuda:0), when it landed on the current cuda:k of a split
    class and the input is on another GPU; None for any other mismatch."""
    if ev.op != "module" or not isinstance(ev.module, Obj) or ev.module.at is None:
        return None
    here = single(ev.value.devs)
    if here is None or not here.startswith("cuda:"):
        return None
    for fact in ctx.model.facts(StagesPlacedOnCurrent):
        for p in fact.placements:
            if p.node is ev.module.at and p.dev != here:
                return p
    return None
