"""The one Finding type, shared by the linter, the runtime debug mode and the dry run.

Every reporter (text, full, json, sarif, github, runtime summary) takes Findings,
so a finding found statically and one caught on a GPU print the same way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Fix:
    """A textual replacement of the span [line:col, end_line:end_col) (1-based lines, 1-based columns)."""

    line: int
    column: int
    end_line: int
    end_column: int
    replacement: str
    safe: bool = True


@dataclass(frozen=True)
class Finding:
    code: str  # "MP001"
    name: str  # the code's kebab name, from mpcheck/codes.py
    path: str  # as given on the command line (or the user's source file at run time)
    line: int  # 1-based
    column: int  # 1-based, like ruff and flake8 print it
    message: str
    severity: str = "error"
    end_line: int | None = None
    end_column: int | None = None
    # What a user needs beyond the message: the devices and modules involved, and the fix in words.
    devices: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    suggestion: str | None = None
    fix: Fix | None = None
    # Extra data a face may attach (a runtime finding's second line for a round trip, counts, ...).
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.column, self.code, self.message)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["end_line"] = self.end_line if self.end_line is not None else self.line
        d["end_column"] = self.end_column if self.end_column is not None else self.column
        d["devices"] = list(self.devices)
        d["modules"] = list(self.modules)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        d = dict(d)
        fix = d.pop("fix", None)
        d["devices"] = tuple(d.get("devices", ()))
        d["modules"] = tuple(d.get("modules", ()))
        return cls(fix=Fix(**fix) if fix else None, **d)
