"""What the linter finds in a source snippet, for the device-model tests (test_devices_session*.py): every lint
rule, module `m`, the GPU counts 2, 4 and 8 assumed."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str, code: str | None = None) -> list:
    got = analyze("t.py", textwrap.dedent(src), ALL, "m", {}, (2, 4, 8)).findings
    return [f for f in got if code is None or f.code == code]


def lines(src: str, code: str | None = None) -> list[int]:
    return [f.line for f in findings(src, code)]
