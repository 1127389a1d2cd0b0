"""The corpus of real model-parallel code (tests/realcode/manifest.json) and the linter's precision on it.

The manifest is checked without network. The third-party files themselves are
not committed: `python bench/real_bugs.py --face lint` fetches them into
bench/.cache/ once; the tests that read them skip until then.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mpcheck import codes

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import real_bugs  # noqa: E402

MANIFEST = real_bugs.load_manifest()
CASES = MANIFEST["cases"]
CORRECT = [c for c in CASES if c["kind"] == "correct"]

# Findings mpcheck reports today on correct real code (precision bugs to route,
# not to hide): the case id and why it is not a bug.
KNOWN_FALSE: dict[str, str] = {}


def _finding_ok(entry: dict) -> bool:
    if "only_with_gpus" in entry:
        # A finding that exists with one GPU count only says which, and why not with the others.
        if set(entry) != {"code", "line", "only_with_gpus", "why"} or entry["only_with_gpus"] < 1 or not entry["why"]:
            return False
    elif set(entry) != {"code", "line"}:
        return False
    return entry["code"] in codes.BY_CODE and entry["line"] >= 1


def test_manifest_is_well_formed():
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    assert len(CASES) >= 30
    assert sum("driver" in c for c in CASES) >= 10
    for case in CASES:
        assert case["kind"] in ("bug", "correct"), case["id"]
        assert case["source"] in MANIFEST["sources"], case["id"]
        assert case["evidence"] and all(isinstance(e, str) for e in case["evidence"]), case["id"]
        assert case["upstream"].startswith("https://github.com/"), case["id"]
        assert all(_finding_ok(e) for e in case["expected"]), case["id"]
        assert all(isinstance(w, str) and w != case["file"] for w in case.get("with", [])), case["id"]
        # A bug case says where the bug is; a correct case expects silence.
        assert bool(case["expected"]) == (case["kind"] == "bug"), case["id"]
        if case["kind"] == "bug":
            assert case.get("how_expected"), f"{case['id']}: say how the expected lines follow from the evidence"
        driver = case.get("driver")
        if driver:
            assert (REPO / driver["script"]).is_file(), driver["script"]
            assert driver.get("site", "hf-4.28.0") in MANIFEST["sites"], case["id"]
            assert ("{site}" in driver["args"]) == ("site" in driver), case["id"]
            assert all(_finding_ok(e) for e in driver["expected"]), case["id"]
            # The driver runs part of the file: it can only expect what the evidence expects.
            assert real_bugs.expected_keys(driver["expected"]) <= real_bugs.expected_keys(case["expected"]), case["id"]
    for name, spec in MANIFEST["sources"].items():
        assert ("pip" in spec) != ("github" in spec), name
        assert spec.get("license"), name
        if "github" in spec:
            assert len(spec["commit"]) == 40, name


def test_score_counts_only_the_expected_rule_on_the_expected_line():
    expected = {("MP008", 10)}
    found = [
        {"code": "MP008", "line": 10, "path": "src/pkg/models/a.py"},
        {"code": "MP001", "line": 10, "path": "src/pkg/models/a.py"},  # another rule
        {"code": "MP008", "line": 11, "path": "src/pkg/models/a.py"},  # another line
        {"code": "MP008", "line": 10, "path": "src/pkg/models/b.py"},  # another file
    ]
    s = real_bugs.score(expected, found, "pkg/models/a.py")
    assert s.caught == [("MP008", 10)] and s.missed == []
    assert [(f["code"], f["line"], f["path"][-4:]) for f in s.false] == [
        ("MP001", 10, "a.py"),
        ("MP008", 11, "a.py"),
        ("MP008", 10, "b.py"),
    ]
    assert real_bugs.score(expected, [], "pkg/models/a.py").missed == [("MP008", 10)]


def test_knowable_total_counts_a_finding_of_one_gpu_count_apart():
    case = {
        "id": "c",
        "kind": "bug",
        "lint_knowable": True,
        "expected": [{"code": "MP001", "line": 5}, {"code": "MP006", "line": 9, "only_with_gpus": 4, "why": "w"}],
    }
    missed_both = real_bugs.Score(missed=[("MP001", 5), ("MP006", 9)])
    t = real_bugs.totals([case], {"c": missed_both})
    assert (t["knowable_caught"], t["knowable_expected"], t["count_dependent"]) == (0, 1, 1)
    assert t["missed"] == 2  # the plain totals still count it
    caught_one = real_bugs.Score(caught=[("MP001", 5)], missed=[("MP006", 9)])
    t = real_bugs.totals([case], {"c": caught_one})
    assert (t["knowable_caught"], t["knowable_expected"]) == (1, 1)


def _cached(case: dict) -> Path | None:
    """The case's file in bench/.cache/, or None when it was never fetched (no network in tests)."""
    spec = MANIFEST["sources"][case["source"]]
    if "github" in spec:
        root = real_bugs.SITES / "github" / spec["github"].replace("/", "+") / spec["commit"]
    else:
        name, version = real_bugs.split_spec(spec["pip"])
        root = real_code_src() / f"{name}-{version}"
    path = root / case["file"]
    return path if path.is_file() else None


def real_code_src() -> Path:
    return real_bugs.real_code.SOURCES


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_expected_lines_exist_in_the_cached_file(case):
    path = _cached(case)
    if path is None:
        pytest.skip("not fetched: run `python bench/real_bugs.py --face lint` once")
    lines = path.read_text(encoding="utf-8").splitlines()
    for e in case["expected"]:
        assert e["line"] <= len(lines) and lines[e["line"] - 1].strip(), f"{case['id']}: line {e['line']}"


@pytest.fixture(scope="module")
def correct_findings() -> dict[str, list[dict]]:
    """Lint findings per correct case, one mpcheck process per source (the cases are many, the sources few)."""
    by_root: dict[Path, list[dict]] = {}
    for case in CORRECT:
        path = _cached(case)
        if path is not None:
            by_root.setdefault(path.parents[len(Path(case["file"]).parts) - 1], []).append(case)
    found: dict[str, list[dict]] = {}
    for root, group in by_root.items():
        findings = real_bugs.run_lint(root, sorted({c["file"] for c in group}))
        for case in group:
            found[case["id"]] = [f for f in findings if f["path"].replace("\\", "/") == case["file"]]
    return found


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FALSE[c["id"]]))
        if c["id"] in KNOWN_FALSE
        else c
        for c in CORRECT
    ],
    ids=lambda c: c["id"],
)
def test_correct_real_code_has_no_lint_finding(case, correct_findings):
    if case["id"] not in correct_findings:
        pytest.skip("not fetched: run `python bench/real_bugs.py --face lint` once")
    findings = correct_findings[case["id"]]
    assert findings == [], "\n".join(real_bugs.where(f) for f in findings)
