"""`mpcheck.debug`: the runtime debug mode as a context manager or a decorator.

    with mpcheck.debug(model, on_mismatch="move") as dbg:
        train()
    dbg.findings, dbg.ledger

MPCHECK_DISABLE=1 in the environment turns every in-code `mpcheck.debug()`
into a no-op, so it can stay in code that also runs in production.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Iterable

DISABLE_ENV = "MPCHECK_DISABLE"


def disabled_by_env() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


class debug:
    """Check device placement and record transfers while the block runs.

    model: the model whose module paths name findings (`model.blocks.7.attn`);
        without it, each top-level module called is named after the variable holding it.
    on_mismatch: "raise" (DeviceMismatchError, a RuntimeError, before PyTorch's own
        error), "warn" (report, then let PyTorch act), "move" (move the tensor, record,
        go on: one run lists every mismatch).
    strict: also check every aten op, forward and backward (slower).
    report: where the summary goes on exit: "stderr" (default), None for none.
    """

    def __init__(
        self,
        model: Any = None,
        *,
        on_mismatch: str = "raise",
        strict: bool = False,
        select: Iterable[str] | None = None,
        report: str | None = "stderr",
        output_format: str = "text",
        trace: str | None = None,
        devices: Any = None,
    ) -> None:
        from mpcheck.runtime.core import ON_MISMATCH

        if on_mismatch not in ON_MISMATCH:
            raise ValueError(f"on_mismatch must be one of {', '.join(ON_MISMATCH)}, not {on_mismatch!r}")
        self.model = model
        self.on_mismatch = on_mismatch
        self.strict = strict
        self.select = select
        self.report = report
        self.output_format = output_format
        self.trace = trace
        self.devices = devices
        self.session = None
        self.disabled = False

    # -- results --------------------------------------------------------------------
    @property
    def findings(self) -> list:
        return list(self.session.checker.findings) if self.session else []

    @property
    def ledger(self):
        return self.session.checker.ledger if self.session else None

    def step(self) -> None:
        """End a training step explicitly (steps also end at optimizer.step())."""
        if self.session is not None and self.session.active:
            self.session.step()

    # -- context manager ---------------------------------------------------------------
    def __enter__(self) -> "debug":
        if disabled_by_env():
            self.disabled = True
            return self
        from mpcheck.runtime.session import Session

        self.session = Session(self.model, on_mismatch=self.on_mismatch, strict=self.strict, select=self.select,
                               devices=self.devices, keep_trace=self.trace is not None)
        self.session.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        session = self.session
        if session is None:
            return False
        session.stop()
        if self.report is not None or self.trace is not None:
            from mpcheck.runtime.report import write_outputs

            write_outputs(session, output_format=self.output_format, stream=sys.stderr if self.report else None,
                          trace=self.trace)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # A fresh session per call: a decorated function may be called many times.
            with debug(self.model, on_mismatch=self.on_mismatch, strict=self.strict, select=self.select,
                       report=self.report, output_format=self.output_format, trace=self.trace,
                       devices=self.devices):
                return fn(*args, **kwargs)

        return wrapper
