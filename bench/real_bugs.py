"""Score mpcheck on real public model-parallel code: caught / missed / false per face.

The corpus is tests/realcode/manifest.json: real files of public projects, taken
at the release where a device bug was reported (kind "bug") or where the code is
correct (kind "correct"), each with the findings the evidence (the issue, the fix
diff) says a checker should report: rule code and line in that file. They were
written before mpcheck was run on the case.

Two faces are scored:

- lint: `mpcheck --output-format json --isolated --no-cache` on each case's file;
- dryrun: `mpcheck dryrun --gpus N` on the case's driver (tests/realcode/drivers/),
  a small program that runs the real library code on virtual GPUs and stubs only
  the network (models built from a config) and the data (random batches).

A finding counts as caught only with the expected rule on the expected line of
the case's file; every other finding is false (on a bug case too: a finding at
another line is a miss plus a false finding). Third-party code is not committed:
the files come from PyPI, fetched like bench/real_code.py does (`pip download
--no-deps`, unpacked under bench/.cache/src/), and each driver's library runs from
bench/.cache/realcode/site-<name>/ (`pip install --no-deps --target`).

    python bench/real_bugs.py                  # both faces, one row per case, totals
    python bench/real_bugs.py --face lint      # the linter only (no installs)
    python bench/real_bugs.py --show           # and each miss and false finding
    python bench/real_bugs.py --json out.json  # everything as JSON
    python bench/real_bugs.py -k gpt2          # only cases whose id contains gpt2

Needs a pip index the first time only; nothing is installed into the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_code  # noqa: E402  (the wheel cache and unpacking of bench/real_code.py)

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "tests" / "realcode" / "manifest.json"
SITES = real_code.CACHE / "realcode"
DRYRUN_TIMEOUT_S = 300

Key = tuple[str, int]  # (rule code, line)


@dataclass
class Score:
    """One face on one case: expected findings found, not found, and found but not expected."""

    caught: list[Key] = field(default_factory=list)
    missed: list[Key] = field(default_factory=list)
    false: list[dict] = field(default_factory=list)
    error: str | None = None


def load_manifest(path: Path = MANIFEST) -> dict:
    return json.loads(path.read_text())


def expected_keys(entries: list[dict]) -> set[Key]:
    return {(e["code"], e["line"]) for e in entries}


def score(expected: set[Key], findings: list[dict], file: str) -> Score:
    """Match findings to the expected (code, line) pairs of `file` (a path suffix)."""
    s = Score()
    found: set[Key] = set()
    for f in findings:
        key = (f["code"], f["line"])
        on_file = in_file(f, file)
        if on_file and key in expected:
            found.add(key)
        else:
            s.false.append(f)
    s.caught = sorted(found)
    s.missed = sorted(expected - found)
    return s


def in_file(finding: dict, file: str) -> bool:
    """Whether the finding is in `file` (a path inside the case's source: a suffix of the finding's path)."""
    path = finding.get("path", "").replace("\\", "/")
    return path.endswith("/" + file) or path == file


def split_spec(spec: str) -> tuple[str, str]:
    name, version = spec.split("==")
    return name, version


def github_file(repo: str, commit: str, path: str, dest: Path) -> None:
    """One file of a GitHub repository at a commit: from a local mirror if there is one, else raw.githubusercontent.com.

    $MPCHECK_REALCODE_MIRRORS names a folder of bare clones laid out as
    <owner>+<name>/repo (what a `git clone --mirror` per repository gives).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    mirrors = os.environ.get("MPCHECK_REALCODE_MIRRORS")
    if mirrors:
        git_dir = Path(mirrors) / repo.replace("/", "+") / "repo"
        proc = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], capture_output=True)
        if proc.returncode == 0:
            dest.write_bytes(proc.stdout)
            return
    url = f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            dest.write_bytes(resp.read())
    except OSError as exc:
        raise RuntimeError(
            f"could not fetch {url} ({exc}); set MPCHECK_REALCODE_MIRRORS to a folder of clones"
        ) from exc


def source_root(manifest: dict, source: str, pip: list[str], files: list[str] = ()) -> Path:
    """The folder holding a source's files: an unpacked wheel, or files of a GitHub commit (fetched on first use)."""
    spec = manifest["sources"][source]
    if "github" in spec:
        root = SITES / "github" / spec["github"].replace("/", "+") / spec["commit"]
        # bench/.cache/ is gitignored, and mpcheck skips ignored files: an
        # empty .git makes the folder its own root, as in real_code.unpack.
        (root / ".git").mkdir(parents=True, exist_ok=True)
        for path in files:
            if not (root / path).exists():
                github_file(spec["github"], spec["commit"], path, root / path)
        return root
    name, version = split_spec(spec["pip"])
    roots = real_code.unpack(real_code.fetch(name, version, pip), name, version)
    return roots[0].parent


def site_dir(manifest: dict, site: str, pip: list[str]) -> Path:
    """A folder holding a driver's library and its dependencies (installed on first use)."""
    dest = SITES / f"site-{site}"
    marker = dest / ".installed"
    if not marker.exists():
        specs = manifest["sites"][site]
        cmd = [*pip, "install", "--quiet", "--no-deps", "--target", str(dest), *specs]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"could not install site {site}:\n{proc.stderr.strip()}")
        marker.touch()
    return dest


def run_lint(root: Path, files: list[str]) -> list[dict]:
    cmd = [*real_code.MPCHECK, "--output-format", "json", "--no-cache", "--isolated", *files]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"mpcheck failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout or "[]")


def lint_face(manifest: dict, cases: list[dict], pip: list[str]) -> dict[str, Score]:
    """One mpcheck process per source, over the files of its cases."""
    by_source: dict[str, list[dict]] = {}
    for case in cases:
        by_source.setdefault(case["source"], []).append(case)
    scores: dict[str, Score] = {}
    for source, group in by_source.items():
        # A case's `with` files are linted with its file: the callers of its helpers (lint/callers.py).
        files = sorted({c["file"] for c in group} | {w for c in group for w in c.get("with", [])})
        try:
            root = source_root(manifest, source, pip, files)
            findings = run_lint(root, files)
        except RuntimeError as exc:
            for case in group:
                scores[case["id"]] = Score(error=str(exc))
            continue
        for case in group:
            mine = [f for f in findings if f["path"].replace("\\", "/") == case["file"]]
            scores[case["id"]] = score(expected_keys(case["expected"]), mine, case["file"])
    return scores


def driver_args(driver: dict, site: Path, file: Path) -> list[str]:
    """The driver's arguments, with {site} (its library folder) and {file} (the case's cached file) filled in."""
    return [a.format(site=site, file=file) for a in driver.get("args", [])]


def run_dryrun(driver: dict, args: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = [*real_code.MPCHECK, "dryrun", "--gpus", str(driver.get("gpus", 2)), "--output-format", "json"]
        cmd += ["-o", str(out), str(REPO / driver["script"]), *args]
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=DRYRUN_TIMEOUT_S, env=env)
        if not out.exists():
            raise RuntimeError(f"no report (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        report = json.loads(out.read_text())
    if report.get("stopped") or "Traceback (most recent call last)" in proc.stderr:
        # The driver did not run to its end: what comes after was not looked at.
        raise RuntimeError(f"the driver crashed: {report.get('stopped') or proc.stderr.strip().splitlines()[-1][:300]}")
    return report["findings"]


def dryrun_face(manifest: dict, cases: list[dict], pip: list[str]) -> dict[str, Score]:
    scores: dict[str, Score] = {}
    for case in cases:
        driver = case.get("driver")
        if not driver:
            continue
        try:
            root = source_root(manifest, case["source"], pip, [case["file"], *case.get("with", [])])
            # A driver that needs only torch has no site of its own.
            site = site_dir(manifest, driver["site"], pip) if "site" in driver else Path()
            findings = run_dryrun(driver, driver_args(driver, site, root / case["file"]))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            scores[case["id"]] = Score(error=str(exc))
            continue
        # As in the lint face, only the case's file is scored: its `with` files (the callers it runs
        # under) are other files of the project, whose findings other cases score.
        findings = [f for f in findings if not any(in_file(f, w) for w in case.get("with", []))]
        scores[case["id"]] = score(expected_keys(driver["expected"]), findings, case["file"])
    return scores


def cell(s: Score | None) -> str:
    if s is None:
        return "-"
    if s.error:
        return "error"
    return f"{len(s.caught)}/{len(s.caught) + len(s.missed)} +{len(s.false)}"


def totals(cases: list[dict], scores: dict[str, Score]) -> dict[str, int]:
    t = {"cases": 0, "expected": 0, "caught": 0, "missed": 0, "false": 0, "errors": 0}
    t.update({"bug_cases_caught": 0, "bug_cases": 0, "correct_cases": 0, "correct_cases_flagged": 0})
    t.update({"knowable_caught": 0, "knowable_expected": 0, "count_dependent": 0})
    for case in cases:
        s = scores.get(case["id"])
        if s is None:
            continue
        t["cases"] += 1
        if s.error:
            t["errors"] += 1
            continue
        t["caught"] += len(s.caught)
        t["missed"] += len(s.missed)
        t["expected"] += len(s.caught) + len(s.missed)
        t["false"] += len(s.false)
        if case.get("lint_knowable"):
            # Bugs whose devices one file shows (issue 10's goal for the linter), under every GPU
            # count the code allows: a finding that exists with one count only (`only_with_gpus`)
            # is one the linter must not report by default, so it is counted apart.
            only = {(e["code"], e["line"]) for e in case["expected"] if e.get("only_with_gpus")}
            t["knowable_caught"] += len(set(s.caught) - only)
            t["knowable_expected"] += len(set(s.caught) - only) + len(set(s.missed) - only)
            t["count_dependent"] += len(only)
        if case["kind"] == "bug":
            t["bug_cases"] += 1
            t["bug_cases_caught"] += bool(s.caught)
        else:
            t["correct_cases"] += 1
            t["correct_cases_flagged"] += bool(s.false)
    return t


def where(f: dict) -> str:
    return f"{f.get('path', '?')}:{f.get('line', '?')}: {f['code']} {f.get('message', '')[:160]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--face", choices=("lint", "dryrun", "all"), default="all")
    ap.add_argument("-k", dest="select", help="only cases whose id contains this")
    ap.add_argument("--pip", default=f"{sys.executable} -m pip", help="the pip command (default: %(default)s)")
    ap.add_argument("--show", action="store_true", help="print each miss and false finding")
    ap.add_argument("--json", type=Path, help="write every score to this file")
    args = ap.parse_args(argv)

    manifest = load_manifest()
    pip = args.pip.split()
    cases = [c for c in manifest["cases"] if not args.select or args.select in c["id"]]
    faces: dict[str, dict[str, Score]] = {}
    if args.face in ("lint", "all"):
        faces["lint"] = lint_face(manifest, cases, pip)
    if args.face in ("dryrun", "all"):
        faces["dryrun"] = dryrun_face(manifest, cases, pip)

    names = list(faces)
    print("caught/expected +false per face (caught = expected rule on the expected line)\n")
    print("| case | kind | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for case in cases:
        print(f"| {case['id']} | {case['kind']} | " + " | ".join(cell(faces[n].get(case["id"])) for n in names) + " |")
    print()
    summary = {n: totals(cases, faces[n]) for n in names}
    for n, t in summary.items():
        print(
            f"{n}: caught {t['caught']} / missed {t['missed']} / false {t['false']} "
            f"(of {t['expected']} expected findings in {t['cases']} cases; "
            f"bug cases with a catch {t['bug_cases_caught']}/{t['bug_cases']}, "
            f"correct cases with a false finding {t['correct_cases_flagged']}/{t['correct_cases']}, "
            f"errors {t['errors']})"
        )
        if n == "lint":
            print(
                f"lint on bugs whose devices the file shows (lint_knowable): "
                f"caught {t['knowable_caught']} of {t['knowable_expected']} "
                f"(apart: {t['count_dependent']} that exist with one GPU count only, `only_with_gpus`)"
            )

    if args.show:
        for n in names:
            for case in cases:
                s = faces[n].get(case["id"])
                if s is None:
                    continue
                if s.error:
                    print(f"{n} ERROR {case['id']}: {s.error}")
                for code, line in s.missed:
                    print(f"{n} MISSED {case['id']}: {case['file']}:{line} {code}")
                for f in s.false:
                    print(f"{n} FALSE {case['id']}: {where(f)}")
    if args.json:
        out = {
            n: {
                cid: {"caught": s.caught, "missed": s.missed, "false": s.false, "error": s.error}
                for cid, s in faces[n].items()
            }
            for n in names
        }
        args.json.write_text(json.dumps({"scores": out, "totals": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
