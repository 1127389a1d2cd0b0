"""mpcheck/codes.py is the one table of codes: the README's rule table says what it
says, and no other module of mpcheck spells a code's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpcheck import codes

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mpcheck"


def _readme_table() -> dict[str, dict[str, str]]:
    """The README's rule table: code -> {column: cell}."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| code | name |"))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        # Split on the column separators only: a cell's code span may hold a `|`.
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        assert len(cells) == len(header), line
        row = dict(zip(header, cells))
        assert row["code"] not in rows, f"{row['code']} twice in the README table"
        rows[row["code"]] = row
    return rows


def test_the_readme_rule_table_is_the_codes_table():
    table = _readme_table()
    assert list(table) == [c.code for c in codes.CODES]
    assert {"code", "name", "severity", "faces"} <= set(next(iter(table.values()))), "a column is missing"
    for c in codes.CODES:
        row = table[c.code]
        assert row["name"] == c.name, c.code
        assert row["severity"] == c.severity, c.code
        assert tuple(f.strip() for f in row["faces"].split(",")) == c.faces, c.code


def test_every_name_is_spelt_once_in_the_package():
    """`grep -rn '"collapse-split-model"' mpcheck` finds codes.py only: a name
    written anywhere else is a second source that can drift."""
    sources = {p: p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
    for c in codes.CODES:
        quoted = f'"{c.name}"'
        hits = [
            f"{p.relative_to(ROOT)}:{n}"
            for p, text in sources.items()
            for n, line in enumerate(text.splitlines(), 1)
            if quoted in line
        ]
        assert hits == [f"mpcheck/codes.py:{_line_of(quoted)}"], hits


def _line_of(text: str) -> int:
    lines = (PACKAGE / "codes.py").read_text(encoding="utf-8").splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


def test_the_runtime_core_reads_the_table():
    pytest.importorskip("torch")
    from mpcheck.runtime.checks import findings as core

    assert core.RULE_NAMES == {c.code: c.name for c in codes.CODES if codes.RUN in c.faces}
    assert core._FATAL == {"MP001", "MP002", "MP008", "MP009", "MP012"}


def test_mp007_is_one_error_everywhere_and_never_stops_the_program():
    mp007 = codes.get("MP007")
    assert mp007.severity == "error" and not mp007.fatal
    assert set(mp007.faces) == set(codes.FACES)


def test_a_bad_entry_is_refused():
    with pytest.raises(ValueError, match="severity"):
        codes.Code("MP990", "x", "fatal", "s", (codes.LINT,))
    with pytest.raises(ValueError, match="faces"):
        codes.Code("MP990", "x", "error", "s", ("gpu",))
    with pytest.raises(ValueError, match="fatal"):
        codes.Code("MP990", "x", "error", "s", (codes.LINT,), fatal=True)
    with pytest.raises(KeyError):
        codes.get("MP990")


def test_codes_imports_neither_torch_nor_libcst():
    import subprocess
    import sys

    script = "import sys, mpcheck.codes; print(sorted(m for m in ('torch', 'libcst') if m in sys.modules))"
    r = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
