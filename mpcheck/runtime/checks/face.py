"""What `mpcheck.debug` and `mpcheck.dryrun` share: the checked options, one debug session,
its results, and the report written on exit. Each face adds what it runs on (real GPUs or
virtual ones) and how its report reads (`write`)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from mpcheck.runtime.checks.checker import ON_MISMATCH


class Face:
    def __init__(
        self,
        model: Any,
        *,
        on_mismatch: str,
        select: Iterable[str] | None,
        report: str | None,
        output_format: str,
        trace: str | None,
    ) -> None:
        if on_mismatch not in ON_MISMATCH:
            raise ValueError(f"on_mismatch must be one of {', '.join(ON_MISMATCH)}, not {on_mismatch!r}")
        self.model = model
        self.on_mismatch = on_mismatch
        self.select = select
        self.report = report
        self.output_format = output_format
        self.trace = trace
        self.session = None

    # -- results ------------------------------------------------------------------------
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

    # -- for the faces ------------------------------------------------------------------------
    def _start_session(self, session_type: Any, *, devices: Any, strict: bool = False) -> None:
        """session_type: capture's Session, handed in by the face (this package sits below capture)."""
        self.session = session_type(
            self.model,
            on_mismatch=self.on_mismatch,
            strict=strict,
            select=self.select,
            devices=devices,
            keep_trace=self.trace is not None,
        )
        self.session.start()

    def _write_on_exit(self) -> None:
        if self.report is not None or self.trace is not None:
            self.write(output_format=self.output_format, stream=sys.stderr if self.report else None, trace=self.trace)

    def write(
        self,
        *,
        output_format: str = "text",
        stream: TextIO | None = None,
        trace: str | None = None,
        color_mode: str = "auto",
    ) -> None:
        raise NotImplementedError
