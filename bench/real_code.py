"""Run mpcheck over the code of five real PyTorch packages and report what it finds.

Correct code must stay silent (issue 3, "Limits"): every finding on these
packages is either a real bug or a false positive to fix. This script fetches
the pinned wheels with `pip download --no-deps` into bench/.cache/ (gitignored),
unzips them, runs `mpcheck --output-format json --no-cache --isolated` over each
package and prints one row per package: files, lines, findings, seconds.

    python bench/real_code.py                 # the table
    python bench/real_code.py --show          # and every finding, one per line
    python bench/real_code.py --json out.json # all findings as JSON
    python bench/real_code.py -p timm -p accelerate

Needs network (or a pip index) the first time only; nothing is installed.
Timings are wall seconds of the mpcheck process (start-up included), cold: no cache.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

# Pinned so that the numbers (and the list of findings judged by hand) can be
# reproduced. torchvision and transformers are the versions issue 2 measures.
PACKAGES = {
    "torchvision": "0.29.1",
    "transformers": "5.24.0",
    "timm": "1.0.31",
    "accelerate": "1.15.0",
    "diffusers": "0.42.1",
}

CACHE = Path(__file__).resolve().parent / ".cache"
WHEELS = CACHE / "wheels"
SOURCES = CACHE / "src"

# The console script's entry point, run with this interpreter (works without
# knowing where the `mpcheck` script was installed).
MPCHECK = [sys.executable, "-c", "import sys; from mpcheck.cli import main; sys.exit(main())"]


def wheel_path(name: str, version: str) -> Path | None:
    prefix = f"{name.replace('-', '_')}-{version}-"
    for whl in sorted(WHEELS.glob("*.whl")):
        if whl.name.startswith(prefix):
            return whl
    return None


def fetch(name: str, version: str, pip: list[str]) -> Path:
    whl = wheel_path(name, version)
    if whl is None:
        WHEELS.mkdir(parents=True, exist_ok=True)
        cmd = [*pip, "download", "--no-deps", "--quiet", "--dest", str(WHEELS), f"{name}=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        whl = wheel_path(name, version)
        if proc.returncode != 0 or whl is None:
            raise SystemExit(f"could not download {name}=={version}:\n{proc.stderr.strip()}")
    return whl


def unpack(whl: Path, name: str, version: str) -> list[Path]:
    """The wheel's top-level package folders (not its .dist-info)."""
    dest = SOURCES / f"{name}-{version}"
    marker = dest / ".unpacked"
    if not marker.exists():
        with zipfile.ZipFile(whl) as zf:
            zf.extractall(dest)
        # bench/.cache/ is gitignored in this repo, and mpcheck (like ruff)
        # skips gitignored files up to the repository root. An empty .git
        # makes the unpacked wheel its own root, so its files are checked as
        # they would be in the package's own checkout.
        (dest / ".git").mkdir(exist_ok=True)
        marker.touch()
    return sorted(p for p in dest.iterdir() if p.is_dir() and not p.name.endswith((".dist-info", ".data")))


def count(roots: list[Path]) -> tuple[int, int]:
    files = lines = 0
    for root in roots:
        for f in root.rglob("*.py"):
            files += 1
            with open(f, "rb") as fh:
                lines += sum(1 for _ in fh)
    return files, lines


def lint(roots: list[Path], jobs: int | None) -> tuple[list[dict], float]:
    cmd = [*MPCHECK, "--output-format", "json", "--no-cache", "--isolated"]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    cmd += [r.name for r in roots]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=roots[0].parent, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"mpcheck failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    findings = json.loads(proc.stdout or "[]")
    base = roots[0].parent
    for f in findings:
        f["path"] = (base / f["path"]).resolve().relative_to(base.resolve()).as_posix()
    return findings, seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-p", "--package", action="append", choices=sorted(PACKAGES), help="only these packages")
    ap.add_argument("--pip", default=f"{sys.executable} -m pip", help="the pip command (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=None, help="passed to mpcheck --jobs")
    ap.add_argument("--show", action="store_true", help="print every finding")
    ap.add_argument("--json", type=Path, help="write every finding to this file")
    args = ap.parse_args(argv)

    pip = args.pip.split()
    rows, everything = [], []
    for name in args.package or PACKAGES:
        version = PACKAGES[name]
        roots = unpack(fetch(name, version, pip), name, version)
        files, lines = count(roots)
        findings, seconds = lint(roots, args.jobs)
        for f in findings:
            f["package"] = f"{name}-{version}"
        everything.extend(findings)
        rows.append((f"{name} {version}", files, lines, len(findings), seconds))

    header = ("package", "files", "lines", "findings", "seconds")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * 4) + "|")
    for pkg, files, lines, n, seconds in rows:
        print(f"| {pkg} | {files:,} | {lines:,} | {n} | {seconds:.1f} |")
    total = [sum(r[i] for r in rows) for i in (1, 2, 3, 4)]
    print(f"| total | {total[0]:,} | {total[1]:,} | {total[2]} | {total[3]:.1f} |")

    if args.show:
        for f in everything:
            print(f"{f['package']}/{f['path']}:{f['line']}:{f['column']}: {f['code']} {f['message']}")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
