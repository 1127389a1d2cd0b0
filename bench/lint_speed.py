"""How fast is `mpcheck PATH`? Cold (empty cache) and cached wall time of the real
command, beside a bare single-process `libcst.parse_module` and `ast.parse` of
the same .py files, as ratios.

    python bench/lint_speed.py PATH [PATH ...] [--repeat 3] [--jobs N]
    python bench/lint_speed.py --case torch-ir      # torch's _inductor/ir.py alone
    python bench/lint_speed.py --case torch         # torch's whole package (2,285 files)
    python bench/lint_speed.py --case torchvision   # torchvision's models/
    python bench/lint_speed.py --case torch-ir --against /path/to/other/checkout  # alternated

Each mpcheck run is a fresh process (start-up included, as a user sees it),
run in a temporary folder so that its `.mpcheck_cache/` starts empty for the
cold runs. Times are medians. The machine should be otherwise idle.

Goals (issue 2, on a 2-core machine): torchvision 0.29.1 `models/` cold <= 1.0x
the bare libcst parse and cached <= 0.25x; transformers 5.24.0 `models/` plus
torchvision's: cold <= 10 s, cached <= 2 s. Issue 12: `--case torch-ir` (one file
that imports 100+ project modules) cold <= 2 s; `--case torch` cold <= 30 s,
cached <= 1 s; `--case torchvision` stays cold <= 1.0x the bare libcst parse.
Where each goal stands: the README's "Lint speed" table; every run, with its load and
the code it was alternated with: docs/measurements.md.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def case_paths(case: str) -> list[str]:
    """The installed packages a named case lints (found where this Python imports them from)."""
    import importlib.util

    package, _, under = {
        "torch-ir": "torch:_inductor/ir.py",
        "torch": "torch:",
        "torchvision": "torchvision:models",
    }[case].partition(":")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        # Not installed: the copy bench/real_code.py downloads, when there is one.
        import glob

        here = os.path.dirname(os.path.abspath(__file__))
        found = sorted(glob.glob(os.path.join(here, ".cache", "src", f"{package}-*", package, under)))
        if not found:
            raise SystemExit(f"{package} is not installed here")
        return found[-1:]
    return [os.path.join(list(spec.submodule_search_locations)[0], under)]


def python_files(paths: list[str]) -> list[str]:
    """The files mpcheck itself would check (same discovery, same excludes)."""
    from mpcheck.config import Layer, resolve
    from mpcheck.lint.files import discover

    settings = resolve(Layer(), (), start=Path(paths[0]))
    return [f.abspath for f in discover(paths, settings)]


def time_parse(files: list[str], parse) -> float:
    sources = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as fh:
            sources.append(fh.read())
    start = time.perf_counter()
    for src in sources:
        try:
            parse(src)
        except Exception:
            pass
    return time.perf_counter() - start


def run_mpcheck(paths: list[str], cwd: str, extra: list[str], code: str | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the command and its workers, --statistics output); `code`:
    the checkout of mpcheck to run (PYTHONPATH), this one when None."""
    import resource

    cmd = [sys.executable, "-m", "mpcheck", *extra, "--statistics", *paths]
    env = dict(os.environ, PYTHONPATH=code or str(Path(__file__).resolve().parent.parent))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in (0, 1):
        raise SystemExit(f"mpcheck failed ({r.returncode}):\n{r.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, r.stdout


def load() -> str:
    """The 1-minute load average: on a shared machine wall times mean little without it."""
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "?"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*")
    p.add_argument("--case", choices=("torch-ir", "torch", "torchvision"), help="a named case instead of PATHs")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--jobs", type=int, default=None, help="passed to mpcheck --jobs")
    p.add_argument(
        "--against",
        metavar="CHECKOUT",
        help="another checkout of mpcheck (a folder holding mpcheck/) run alternately with this one, "
        "in the same minutes: on a shared machine the only fair before/after",
    )
    args = p.parse_args()
    if bool(args.case) == bool(args.paths):
        p.error("give PATHs or --case, not both")
    shown = args.paths or case_paths(args.case)
    paths = [os.path.abspath(x) for x in shown]

    files = python_files(paths)
    from mpcheck.config import project_root

    home = project_root(Path(paths[0]))
    if (home / "pyproject.toml").is_file():
        # mpcheck keeps its cache beside the corpus's pyproject.toml, not in the temporary
        # folder: the "cold" runs would be served by a cache an earlier run left there.
        print(f"warning: {home} holds a pyproject.toml: cold runs may use its .mpcheck_cache/; copy the corpus out")
    lines = 0
    for f in files:
        with open(f, "rb") as fh:
            lines += fh.read().count(b"\n")
    import libcst  # imported here so that its import time is not counted as parse time

    from mpcheck.lint.pipeline import available_cpus

    t_ast = statistics.median(time_parse(files, ast.parse) for _ in range(args.repeat))
    t_cst = statistics.median(time_parse(files, libcst.parse_module) for _ in range(max(1, args.repeat - 1)))

    extra = ["--jobs", str(args.jobs)] if args.jobs else []
    here = str(Path(__file__).resolve().parent.parent)
    codes = [(args.against, "before (--against)"), (here, "this checkout")] if args.against else [(here, "")]
    runs: dict[str, dict[str, list[tuple[float, float]]]] = {c: {"cold": [], "cached": []} for c, _ in codes}
    stats = ""
    loads = [load()]
    for _ in range(args.repeat):
        for code, _ in codes:  # alternated: each repeat runs every checkout once, in turn
            work = tempfile.mkdtemp(prefix="mpcheck-bench-")
            try:
                wall, cpu, stats = run_mpcheck(paths, work, extra, code)
                runs[code]["cold"].append((wall, cpu))
                for _ in range(2):
                    wall, cpu, _ = run_mpcheck(paths, work, extra, code)
                    runs[code]["cached"].append((wall, cpu))
            finally:
                shutil.rmtree(work, ignore_errors=True)
        loads.append(load())

    print(
        f"{len(files)} files, {lines:,} lines ({', '.join(shown)}); {available_cpus()} cores; median of {args.repeat}; "
        f"load average {' -> '.join(loads)}"
    )
    print(f"{'':48} {'seconds':>8} {'x libcst parse':>15} {'CPU s':>7}")
    rows: list[tuple[str, float, float | None]] = [
        ("ast.parse, 1 process", t_ast, None),
        ("libcst.parse_module, 1 process", t_cst, None),
    ]
    each: list[str] = []
    for code, label in codes:
        for kind, name in (("cold", "mpcheck, cold (empty cache)"), ("cached", "mpcheck, cached")):
            got = runs[code][kind]
            wall, cpu = statistics.median(w for w, _ in got), statistics.median(c for _, c in got)
            rows.append((f"{name} {label}".rstrip(), wall, cpu))
            each.append(f"  {name} {label}: " + ", ".join(f"{w:.2f} s ({c:.2f} CPU s)" for w, c in got))
    for name, t, cpu_s in rows:
        print(f"{name:48} {t:8.2f} {t / t_cst:14.2f}x {'' if cpu_s is None else f'{cpu_s:7.2f}'}")
    print("every run, wall (CPU: user+sys of mpcheck and its workers):")
    print("\n".join(each))
    if stats.strip():
        print("findings by code (mpcheck --statistics):")
        print("".join("  " + line + "\n" for line in stats.splitlines()), end="")


if __name__ == "__main__":
    main()
