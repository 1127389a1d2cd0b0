"""Real-case fixtures: every case in tests/fixtures/cases/ is run through the real
linter (`mpcheck --output-format json --no-cache`, in a subprocess, exactly as a
user runs it) and the set of (file, line, code) findings must equal the set of
`# <- MPNNN` markers in the case's files. Good cases carry no markers, so they
must give no finding at all. See tests/fixtures/cases/README.md.

Each case is copied to a temporary folder first, so neither the repo's
pyproject.toml nor a cache can change the result.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).parent / "fixtures" / "cases"

# `# <- MP001` or `# <- MP001 MP008` / `# <- MP001, MP008` at the end of a line.
_MARKER = re.compile(r"#\s*<-\s*((?:MP\d{3}[\s,]*)+)$")
_CODE = re.compile(r"MP\d{3}")
_CASE_NAME = re.compile(r"^(?:[A-J]_[a-z0-9_]+_(?:bad|good)|fp_[a-z0-9]+_[a-z0-9_]+)$")

# Runs the console script's entry point with the interpreter running the tests,
# so the test does not depend on where the `mpcheck` script was installed.
_CLI = [sys.executable, "-c", "import sys; from mpcheck.cli import main; sys.exit(main())"]


def _case_paths() -> list[Path]:
    found = []
    for p in sorted(CASES.iterdir()):
        if p.name.startswith((".", "_")) or p.name == "README.md":
            continue
        if p.is_dir() or p.suffix == ".py":
            found.append(p)
    return found


def _case_files(case: Path) -> list[Path]:
    if case.is_dir():
        return sorted(f for f in case.rglob("*.py") if "__pycache__" not in f.parts)
    return [case]


def _case_stem(case: Path) -> str:
    return case.name[:-3] if case.suffix == ".py" else case.name


def expected_markers(case: Path) -> set[tuple[str, int, str]]:
    """(path relative to the case, line, code) for every marker in the case."""
    root = case if case.is_dir() else case.parent
    expected = set()
    for f in _case_files(case):
        rel = f.relative_to(root).as_posix()
        for lineno, line in enumerate(f.read_text(encoding="utf-8").splitlines(), start=1):
            m = _MARKER.search(line.rstrip())
            if m:
                for code in _CODE.findall(m.group(1)):
                    expected.add((rel, lineno, code))
    return expected


def run_mpcheck(case: Path, tmp_path: Path) -> set[tuple[str, int, str]]:
    """Copy the case into tmp_path, lint it with the real CLI, return its findings."""
    if case.is_dir():
        target = tmp_path / case.name
        shutil.copytree(case, target, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        target = tmp_path / case.name
        shutil.copyfile(case, target)
    proc = subprocess.run(
        [*_CLI, "--output-format", "json", "--no-cache", target.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, 1), (
        f"mpcheck exited {proc.returncode} on {case.name}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    try:
        findings = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError as exc:  # pragma: no cover - a broken reporter
        raise AssertionError(f"json output did not parse ({exc}):\n{proc.stdout}") from exc
    assert isinstance(findings, list), f"json output is not a list: {proc.stdout[:500]}"
    root = target if case.is_dir() else tmp_path
    got = set()
    for f in findings:
        path = (tmp_path / f["path"]).resolve()
        got.add((path.relative_to(root.resolve()).as_posix(), int(f["line"]), f["code"]))
    # 0 exactly when nothing was found, 1 when something was.
    assert proc.returncode == (1 if got else 0), f"exit code {proc.returncode} with findings {sorted(got)}"
    return got


def _describe(items: set[tuple[str, int, str]]) -> str:
    return ", ".join(f"{p}:{line} {code}" for p, line, code in sorted(items)) or "none"


@pytest.mark.parametrize("case", _case_paths(), ids=lambda p: p.name)
def test_case_findings_equal_markers(case: Path, tmp_path: Path) -> None:
    expected = expected_markers(case)
    got = run_mpcheck(case, tmp_path)
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (
        f"{case.name}\n  missing (marked, not reported): {_describe(missing)}"
        f"\n  extra (reported, not marked):   {_describe(extra)}"
    )


# The checks below are about the fixtures themselves: a fixture that does not
# parse, a good case with a marker or a bad case without one would make the
# test above meaningless.


@pytest.mark.parametrize("case", _case_paths(), ids=lambda p: p.name)
def test_case_is_well_formed(case: Path) -> None:
    assert _CASE_NAME.match(_case_stem(case)), f"unexpected case name {case.name}"
    files = _case_files(case)
    assert files, f"{case.name} has no Python file"
    for f in files:
        text = f.read_text(encoding="utf-8")
        ast.parse(text, filename=str(f))
        first = text.splitlines()[0] if text else ""
        if f.name != "__init__.py" or text.strip():
            assert first.startswith("# "), f"{f}: the first line must name the real-cases family and pattern"
    markers = expected_markers(case)
    if _case_stem(case).endswith("_bad"):
        assert markers, f"{case.name} is a bad case without a `# <- MPNNN` marker"
    else:
        assert not markers, f"{case.name} is a good case but carries markers: {_describe(markers)}"


def test_every_bad_case_has_its_good_case() -> None:
    stems = {_case_stem(c) for c in _case_paths()}
    unpaired = sorted(s for s in stems if s.endswith("_bad") and s[: -len("_bad")] + "_good" not in stems)
    assert not unpaired, f"bad cases without a fixed version: {unpaired}"
