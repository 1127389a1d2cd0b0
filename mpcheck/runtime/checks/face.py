"""What `mpcheck.debug` and `mpcheck.dryrun` share: the checked options, one debug session,
its results, and the report written on exit. Each face adds what it runs on (real GPUs or
virtual ones) and what its report adds (`_report_dict`, `_render_text`, `_trace_data`)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Protocol, TextIO

from mpcheck.finding import Finding
from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.findings import ON_MISMATCH
from mpcheck.runtime.checks.ledger import Ledger


class CheckedSession(Protocol):
    """What the faces and the report use of capture's Session (capture sits above this package)."""

    checker: Checker
    notes: list[str]
    active: bool
    threads: Any  # the modes entered in the program's threads (capture/threads.py's ThreadModes), once started

    def start(self) -> object: ...

    def step(self) -> None: ...

    def stop(self) -> None: ...


def prepare(session: Any) -> Any:
    """What both faces and `mpcheck run` add to a session before it starts: the module placement
    for the HTML report (returned; before start(), as the model given is a root from the start),
    and, in a process of a multi-process job, MP013 on the GPUs of other ranks."""
    from mpcheck.runtime.checks.html.placement import Placement, watch
    from mpcheck.runtime.checks.ranks import RankEnv, watch_owned_devices

    placement = Placement()
    watch(session, placement)
    env = RankEnv.from_env()
    if env is not None:
        watch_owned_devices(session.checker, env)
    return placement


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
        html: str | None = None,
        recheck_every: int | None = None,
    ) -> None:
        if on_mismatch not in ON_MISMATCH:
            raise ValueError(f"on_mismatch must be one of {', '.join(ON_MISMATCH)}, not {on_mismatch!r}")
        self.model = model
        self.on_mismatch = on_mismatch
        self.select = select
        self.report = report
        self.output_format = output_format
        self.trace = trace
        self.html = html
        self.recheck_every = recheck_every
        self.session: CheckedSession | None = None
        self._placement: Any = None  # html.placement.Placement, once the session starts

    # -- results ------------------------------------------------------------------------
    @property
    def findings(self) -> list[Finding]:
        return list(self.session.checker.findings) if self.session else []

    @property
    def ledger(self) -> Ledger | None:
        return self.session.checker.ledger if self.session else None

    def _started(self) -> CheckedSession:
        """The session, once the face has been entered (its report needs one)."""
        if self.session is None:
            raise RuntimeError("no report before the run: enter the context manager first")
        return self.session

    def step(self) -> None:
        """End a training step explicitly (steps also end at optimizer.step())."""
        if self.session is not None and self.session.active:
            self.session.step()

    # -- for the faces ------------------------------------------------------------------------
    def _start_session(self, session_type: Any, *, devices: Any, strict: bool = False) -> None:
        """session_type: capture's Session, handed in by the face (this package sits below capture)."""
        session: CheckedSession = session_type(
            self.model,
            on_mismatch=self.on_mismatch,
            strict=strict,
            select=self.select,
            devices=devices,
            keep_trace=self.trace is not None or self.html is not None,  # the page's timeline
            recheck_every=self.recheck_every,
        )
        self.session = session
        self._placement = prepare(session)
        session.start()

    def _write_on_exit(self) -> None:
        if self.report is not None or self.trace is not None:
            self.write(output_format=self.output_format, stream=sys.stderr if self.report else None, trace=self.trace)
        if self.html is not None:
            self.write_html(self.html)

    def write_html(self, path: str) -> None:
        """The HTML report (one self-contained page) to the file `path`. Its timeline needs the
        transfers kept from the start: pass `html=` (or `trace=`) when creating the face."""
        from mpcheck.runtime.checks.html.write import write_html

        write_html(
            path,
            session=self._started(),
            placement=self._placement,
            report=self._report_dict(),
            title=self._html_title(),
            subtitle=self._html_subtitle(),
            capacities=self._capacities(),
        )

    def write(
        self,
        *,
        output_format: str = "text",
        stream: TextIO | None = None,
        trace: str | None = None,
        color_mode: str = "auto",
    ) -> None:
        """The report to `stream` and the Chrome trace to the file `trace`."""
        from mpcheck.runtime.checks.report import write_report_and_trace

        self._started()  # no report before the run, even an empty one
        write_report_and_trace(
            report=self._report_dict,
            text=lambda color: self._render_text(color=color),
            trace_data=self._trace_data,
            output_format=output_format,
            stream=stream,
            trace=trace,
            color_mode=color_mode,
        )

    # The report's three parts, the session's own: a face that adds to them overrides these.
    def _report_dict(self) -> dict[str, Any]:
        from mpcheck.runtime.checks.report import report_dict

        return report_dict(self._started())

    def _render_text(self, *, color: bool) -> str:
        from mpcheck.runtime.checks.report import render_text

        return render_text(self._started(), color=color)

    def _trace_data(self) -> dict[str, Any]:
        from mpcheck.runtime.checks.report import chrome_trace

        return chrome_trace(self._started())

    def _html_title(self) -> str:
        from mpcheck.runtime.checks.html.write import RUN_TITLE

        return RUN_TITLE

    def _html_subtitle(self) -> str:
        from mpcheck.runtime.checks.html.write import RUN_SUBTITLE

        return RUN_SUBTITLE

    def _capacities(self) -> dict[str, int]:
        """Each device's memory, for the page's bars (the dry run's are in its memory report)."""
        from mpcheck.runtime.checks.html.write import cuda_capacities

        return cuda_capacities()
