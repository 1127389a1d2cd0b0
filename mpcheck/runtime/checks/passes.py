"""Where the program's run stands: forward passes outside any module end at a loss or a backward
(`end_top_pass`) or when the outermost module is called again (`on_top_call`); MP006 chains its
transfers per pass, and MP011 asks whether a repeat recurs in the model's work (`_run_mark`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.recurrence import Mark

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def end_top_pass(self: Checker) -> None:
    """A loss ran, or a backward: the forward pass of code outside any module (a training loop's
    own transfers, chained per step for MP006) is over; the next transfer starts a new chain.
    Without it, a loop with no optimizer step reads as one chain over all its passes."""
    tls = self._tls
    tls.top_pass_over = True
    tls.passes_ended += 1
    tls.top_calls.clear()
    self.model_runs += 1


def on_top_call(self: Checker, module: Any) -> None:
    """An outermost module call. A module the current pass already called starts the next pass
    (a generation loop with no loss or step: the new token goes back to the first stage, a way
    back that is the loop's, not a layer's ping-pong)."""
    if self._offloads:  # a model moved to the host and back, about to run again? (model_round_trip.py)
        self.judge_model_round_trips(starting=1)  # (this call is counted in model_runs already: hooks.py)
    if self._pending_collapses:  # a move left a split model on one device: does it run so? (split_model.py)
        self.judge_pending_collapses(module)
    calls = self._tls.top_calls
    if id(module) in calls:
        self.end_top_pass()
    calls.add(id(module))


def _run_mark(self: Checker) -> Mark:
    """Where the program's run stands for MP011 (recurrence.py)."""
    tls = self._tls
    return (
        tls.serial,
        tls.forwards,
        tls.passes_ended,
        self.ledger.step_index,
        bool(tls.stack),
        self.model_runs,
    )
