"""One missing move, one finding: a variable left on its device that meets the other device at several
lines of one function (`temb` given unmoved to three blocks, `labels` to a loss in each direction) is
reported at its first line, naming the others; one `x = x.to(...)` before that line mends them all, so
the finding offers no `--fix` (a `.to()` at the first line alone would leave the others failing).
Used by MP001 (Mismatch) and MP008 (LossMismatch): both facts name the value, its expression and the
device it meets (`target`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import libcst as cst

from mpcheck.devices.describe import and_list
from mpcheck.devices.events import LossMismatch, Mismatch
from mpcheck.devices.values import Obj, single
from mpcheck.rules.context import FileContext


def _key(ctx: FileContext, ev: Mismatch | LossMismatch) -> tuple[Any, ...] | None:
    """The variable of a fact whose expression is that variable itself: its function, name, value (where it got
    its device), both devices and the call that ran the function. None for any other expression."""
    v = ev.value
    if not isinstance(ev.expr, cst.Name) or not isinstance(v, Obj) or v.at is None:
        return None
    here, there = single(v.devs), single(ev.target)
    if here is None or there is None:
        return None
    return (ctx.function_name(ev.node), ev.expr.value, id(v.at), here, there, ev.via)


class OneMove:
    """The lines of each variable's facts among `events` (those a rule reports)."""

    def __init__(self, ctx: FileContext, events: Iterable[Mismatch | LossMismatch]) -> None:
        self._ctx = ctx
        lines: dict[tuple[Any, ...], set[int]] = {}
        for ev in events:
            key = _key(ctx, ev)
            if key is not None:
                lines.setdefault(key, set()).add(ctx.line(ev.node))
        self._lines = {k: sorted(ls) for k, ls in lines.items() if len(ls) > 1}

    def lines(self, ev: Mismatch | LossMismatch) -> list[int]:
        """All lines of this fact's variable, first first, when there are several; [] otherwise."""
        if not self._lines:
            return []
        key = _key(self._ctx, ev)
        return self._lines.get(key, []) if key is not None else []

    def later(self, ev: Mismatch | LossMismatch) -> bool:
        """Is this fact a later line of a variable reported at its first?"""
        lines = self.lines(ev)
        return bool(lines) and lines[0] != self._ctx.line(ev.node)


def later_lines(lines: list[int]) -> str:
    """'line 53' / 'lines 53 and 55': the lines after the first."""
    rest = [str(n) for n in lines[1:]]
    return f"{'line' if len(rest) == 1 else 'lines'} {and_list(rest)}"
