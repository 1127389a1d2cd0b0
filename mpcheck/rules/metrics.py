"""A mismatch in a metric: predictions compared with targets (`out.argmax(1) == y`), or any tensor
operation inside a function named for a metric (`dice_score`, `accuracy`: codes.is_metric_function);
and a mismatch with a loss's value (a per-element loss weighted by a mask or per-sample weights on another
device: `(F.cross_entropy(logits, y, reduction="none") * mask).sum()`). Its fix is a loss's: the targets
(the mask, the weights) follow the predictions, so MP008 reports it and MP001 leaves it alone.
A module's input is not a metric's operand: the missing transfer is at the module call (MP001)."""

from __future__ import annotations

import libcst as cst

from mpcheck.codes import is_metric_function
from mpcheck.devices.events import Mismatch
from mpcheck.devices.values import LOSS_OF, Obj
from mpcheck.rules.context import FileContext


def in_a_metric(ctx: FileContext, ev: Mismatch) -> bool:
    if ev.op == "module":
        return False
    if weighs_a_loss(ev):
        return True
    node = ev.node
    if isinstance(node, cst.Comparison) and any(
        isinstance(c.operator, (cst.Equal, cst.NotEqual)) for c in node.comparisons
    ):
        return True
    return is_metric_function(ctx.function_name(node))


def weighs_a_loss(ev: Mismatch) -> bool:
    """Does the mismatch meet a loss's value (what a loss returned, or computed from it) with something
    else? Two losses on two devices added up miss a transfer of one of them: MP001's."""
    return sum(isinstance(v, Obj) and v.origin == LOSS_OF for v in (ev.value, ev.other)) == 1
