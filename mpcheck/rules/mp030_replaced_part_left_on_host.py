"""MP030: a part of a split model replaced after the split by a module built without a device (a fine-tuning
helper's new classifier head, `self.head = nn.Linear(dim, n_classes)`): the part it replaces was on a GPU, the new
one is on the CPU, and a forward that sends each part its input where the part is (`x.to(self.head.weight.device)`)
runs it there without a word: the head trains on the host, its gradients and the activations cross every step.

The device model knows the split and the old part's device (statements.py `PartReplacedOnHost`); the rule stays
silent when the function that replaces the part moves it (or its owner) after, or the file moves that part from
outside (`model.head.to(dev)`, which the model already follows).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import Mismatch, PartReplacedOnHost
from mpcheck.devices.moves import plain_device_move
from mpcheck.devices.names import dotted
from mpcheck.devices.values import made_by, show
from mpcheck.devices.walk import walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class ReplacedPartLeftOnHost(Rule):
    code = "MP030"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        # The new part called with its input on another device fails there: MP001 says so, naming it.
        met = {id(made_by(m.module)) for m in ctx.model.facts(Mismatch) if m.op == "module" and m.module is not None}
        for ev in once_per_node(ctx.model.facts(PartReplacedOnHost)):
            target = ev.node
            assert isinstance(target, cst.Attribute)
            if _moved_after(ctx, target) or id(ev.value) in met:
                continue
            part = ctx.code(target)
            yield self.finding(
                ctx,
                target,
                f"`{part}` was on {show(ev.old)}, a part of a model split over several GPUs, and this replaces it "
                f"with a module built without a device: the new part is on the CPU. Nothing fails where forward "
                f"sends it its input where it is; it then runs on the host, and its input and gradients cross "
                f"every step. Place it where the old one was: `{part} = ....to({show(ev.old)!r})` (or "
                f"`.to(<a neighbour's>.weight.device)`).",
                devices=[ev.old, "cpu"],
                modules=[ev.attr],
                suggestion=f"move the new `{part}` to {ev.old}",
            )


def _moved_after(ctx: FileContext, target: cst.Attribute) -> bool:
    """A move of the part (`self.head.to(dev)`) or of its owner (`self.to(dev)`, `self.cuda()`) in the function
    that replaces it, after the replacement."""
    fn = next(
        (n for n in walk(ctx.module) if isinstance(n, cst.FunctionDef) and any(m is target for m in walk(n.body))),
        None,
    )
    scope = fn.body if fn is not None else ctx.module
    line = ctx.line(target)
    names = {dotted(target), dotted(target.value)}
    for n in walk(scope):
        if (
            plain_device_move(n)
            and ctx.line(n) > line
            and isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and dotted(n.func.value) in names
        ):
            return True
    return False
