"""A mismatch in a metric: predictions compared with targets (`out.argmax(1) == y`), or any tensor
operation inside a function named for a metric (`dice_score`, `accuracy`: codes.is_metric_function).
Its fix is a loss's: the targets follow the predictions, so MP008 reports it and MP001 leaves it alone.
A module's input is not a metric's operand: the missing transfer is at the module call (MP001)."""

from __future__ import annotations

import libcst as cst

from mpcheck.codes import is_metric_function
from mpcheck.devices.events import Mismatch
from mpcheck.rules.context import FileContext


def in_a_metric(ctx: FileContext, ev: Mismatch) -> bool:
    if ev.op == "module":
        return False
    node = ev.node
    if isinstance(node, cst.Comparison) and any(
        isinstance(c.operator, (cst.Equal, cst.NotEqual)) for c in node.comparisons
    ):
        return True
    return is_metric_function(ctx.function_name(node))
