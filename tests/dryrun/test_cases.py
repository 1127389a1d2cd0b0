"""Held-out style cases for the dry run (tests/dryrun/cases/): small whole programs written from the
families of real reports, one bug each (`*_bad.py`) or correct (`*_good.py`). Each runs under
`mpcheck dryrun --gpus 2`; the set of (code, line) findings in the file must equal its `# <- MPNNN`
markers, nothing missing and nothing extra, and a correct program must run to its end."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

CASES = sorted((Path(__file__).parent / "cases").glob("*.py"))
_MARKER = re.compile(r"#\s*<-\s*((?:MP\d{3}\s*)+)$")


def _markers(path: Path) -> set[tuple[str, int]]:
    found = set()
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = _MARKER.search(line)
        if m:
            found |= {(code, i) for code in m.group(1).split()}
    return found


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_findings_equal_markers(case, tmp_path, capsys):
    from mpcheck.runtime.commands.dryrun import main

    # A case runs in this process: what it sets in os.environ (MASTER_ADDR for its process group) must
    # not reach the next test.
    env_before = dict(os.environ)
    out = tmp_path / "report.json"
    try:
        main(["--gpus", "2", "--output-format", "json", "-o", str(out), str(case)])
    finally:
        for key in set(os.environ) - set(env_before):
            del os.environ[key]
        os.environ.update(env_before)
    capsys.readouterr()
    report = json.loads(out.read_text())
    got = {(f["code"], f["line"]) for f in report["findings"] if Path(f["path"]).name == case.name}
    assert got == _markers(case)
    if case.name.endswith("_good.py"):
        assert report["stopped"] is None, report["stopped"]


def test_every_family_has_a_case():
    assert {c.name[0] for c in CASES if c.name.endswith("_bad.py")} >= set("ABCDEFGHIJ")
