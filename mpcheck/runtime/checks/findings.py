"""Recording a finding, the one way every check reports: `emit` (a Checker method), and what a
finding does under `on_mismatch`: a fatal one raises DeviceMismatchError under "raise", a new one
warns under "warn" (under "move" the check that found it moves the tensors, mismatch.py).

Kept apart from the checks so that every finding is counted in one place: a module call that
emits nothing ran clean, which is what the signature cache (capture/signatures.py) trusts.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mpcheck import codes
from mpcheck.finding import Finding
from mpcheck.runtime.checks.sites import UNKNOWN, Site, column_now

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

ON_MISMATCH = ("raise", "warn", "move")

# The codes this core reports, named and graded as mpcheck/codes.py says: a runtime finding
# prints exactly like a static one. The fatal ones mean the program is about to crash and follow
# `on_mismatch`; the others (wasted transfers, a collapsed split) are recorded and reported.
RULE_NAMES = {c.code: c.name for c in codes.on_face(codes.RUN)}
_FATAL = frozenset(c.code for c in codes.on_face(codes.RUN) if c.fatal)
# Codes reported once per line whatever the devices (emit): a mismatch there is one bug.
_ONE_PER_LINE = frozenset({"MP001", "MP004", "MP008"})
_MAX_MODULES = 8  # modules listed on one finding


class DeviceMismatchError(RuntimeError):
    """Raised (on_mismatch="raise") before PyTorch's own "Expected all tensors..." error."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(format_finding(finding))
        self.finding = finding


class MpcheckRuntimeWarning(RuntimeWarning):
    pass


def format_finding(f: Finding) -> str:
    where = f"{f.path}:{f.line}" if f.line else f.path
    text = f"{where}: {f.code} {f.message}"
    if f.modules:
        text += f" [module {', '.join(f.modules)}]"
    if f.suggestion:
        text += f"\n  fix: {f.suggestion}"
    return text


def withdraw(self: Checker, code: str, site: Site, devices: tuple[str, ...]) -> bool:
    """Take back the finding `emit` made once for this code, line and devices, when what followed showed it
    was not one (MP005's round trip that only started a loop); False when there is none, or it recurred."""
    key = (code, site.path, site.line, () if code in _ONE_PER_LINE else devices)
    with self._lock:
        idx = self._by_key.get(key)
        if idx is None or self.findings[idx].extra.get("count", 1) != 1:
            return False
        del self.findings[idx]
        del self._by_key[key]
        for k, i in self._by_key.items():
            if i > idx:
                self._by_key[k] = i - 1
    return True


def emit(
    self: Checker,
    code: str,
    site: Site | None,
    message: str,
    *,
    devices: Iterable[str] = (),
    modules: Iterable[str] = (),
    suggestion: str | None = None,
    severity: str | None = None,
    extra: dict[str, Any] | None = None,
    fatal: bool | None = None,
) -> Finding | None:
    """Record a finding (once per code, line, devices and modules; later hits count up)
    and apply `on_mismatch` to the fatal ones."""
    if not self.wants(code):
        return None
    if fatal is None:
        fatal = code in _FATAL
    if fatal and severity is None:
        # The cause of a call that fails (an MP004 tensor made on the current device inside a stage on
        # another GPU) is an error here whatever its code's default: the program would stop on real GPUs,
        # and a dry run that moved the tensor for it must not exit 0.
        severity = "error"
    site = site or UNKNOWN
    devices = tuple(devices)
    modules = tuple(m for m in modules if m)
    # One finding per code, line and devices: the same line reached from several modules
    # (a loop over blocks) lists the modules instead of repeating itself.
    # A mismatch is one bug per line however many device pairs meet there (a mask on cuda:0 used by
    # layers on cuda:1..3): its devices are listed, not repeated as findings.
    key = (code, site.path, site.line, () if code in _ONE_PER_LINE else devices)
    with self._lock:
        self.emitted += 1
        idx = self._by_key.get(key)
        if idx is not None:
            f = self.findings[idx]
            new_modules = tuple(m for m in modules if m not in f.modules)
            new_devices = tuple(d for d in devices if d not in f.devices)
            if new_modules and len(f.modules) < _MAX_MODULES:
                f = replace(f, modules=f.modules + new_modules)
            if new_devices:
                f = replace(f, devices=f.devices + new_devices)
            self.findings[idx] = f
            f.extra["count"] = f.extra.get("count", 1) + 1
            first = False
        else:
            extra = {"count": 1, "source": "runtime", **(extra or {})}
            if site.context:  # the user's line called into a library: name the library's line too
                message = f"{message} (in {site.context})"
                extra["library_site"] = site.context
            f = Finding(
                code=code,
                name=RULE_NAMES.get(code, code.lower()),
                path=site.path,
                line=site.line,
                column=column_now(site),
                message=message,
                severity=severity or codes.get(code).severity,
                devices=devices,
                modules=modules,
                suggestion=suggestion,
                extra=extra,
            )
            self._by_key[key] = len(self.findings)
            self.findings.append(f)
            first = True
    if fatal and self.on_mismatch == "raise":
        raise DeviceMismatchError(f)
    if first and self.on_mismatch == "warn":
        warnings.warn(format_finding(f), MpcheckRuntimeWarning, stacklevel=2)
    return f
