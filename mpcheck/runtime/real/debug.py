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
from collections.abc import Iterable
from typing import Any, Literal

from mpcheck.runtime.checks.face import Face

DISABLE_ENV = "MPCHECK_DISABLE"


def disabled_by_env() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


class debug(Face):
    """Check device placement and record transfers while the block runs.

    model: the model whose module paths name findings (`model.blocks.7.attn`);
        without it, each top-level module called is named after the variable holding it.
    on_mismatch: "raise" (DeviceMismatchError, a RuntimeError, before PyTorch's own
        error), "warn" (report, then let PyTorch act), "move" (move the tensor, record,
        go on: one run lists every mismatch).
    strict: also check every aten op, forward and backward (slower).
    report: where the summary goes on exit: "stderr" (default), None for none.
    html: a file for the HTML report, written on exit (also `write_html(path)` afterwards).
    recheck_every: a module call like one already checked clean (same module, devices and dtypes of
        its tensor inputs, training flag, grad mode, autocast) runs without the per-call checks; every
        recheck_every-th step checks everything again. 0: check every call. None: the environment's
        MPCHECK_RECHECK_EVERY, else 100.
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
        html: str | None = None,
        recheck_every: int | None = None,
    ) -> None:
        super().__init__(
            model,
            on_mismatch=on_mismatch,
            select=select,
            report=report,
            output_format=output_format,
            trace=trace,
            html=html,
            recheck_every=recheck_every,
        )
        self.strict = strict
        self.devices = devices
        self.disabled = False

    # -- context manager ---------------------------------------------------------------
    def __enter__(self) -> debug:
        if disabled_by_env():
            self.disabled = True
            return self
        # Imported here: `mpcheck.debug` is reachable without torch (MPCHECK_DISABLE, the decorator).
        from mpcheck.runtime.capture.session import Session
        from mpcheck.runtime.real.devices import CudaDevices

        devices = self.devices if self.devices is not None else CudaDevices()
        self._start_session(Session, devices=devices, strict=self.strict)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        if self.session is None:
            return False
        self.session.stop()
        if exc is not None and not isinstance(exc, (SystemExit, GeneratorExit, KeyboardInterrupt)):
            self.session.checker.on_program_stopped(exc)
        self._write_on_exit()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # A fresh session per call: a decorated function may be called many times.
            with debug(
                self.model,
                on_mismatch=self.on_mismatch,
                strict=self.strict,
                select=self.select,
                report=self.report,
                output_format=self.output_format,
                trace=self.trace,
                devices=self.devices,
                html=self.html,
                recheck_every=self.recheck_every,
            ):
                return fn(*args, **kwargs)

        return wrapper
