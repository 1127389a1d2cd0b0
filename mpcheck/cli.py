"""The `mpcheck` command: parses arguments and hands over to a face.

    mpcheck [PATH ...]            lint (the default)
    mpcheck rule MP003 | --all    the rule documentation
    mpcheck run ...               the runtime debug mode (mpcheck.runtime.commands.run)
    mpcheck dryrun ...            the dry run on virtual GPUs (mpcheck.runtime.commands.dryrun)

Exit codes: 0 no findings, 1 findings, 2 usage, configuration or internal error,
or a path that does not exist (named on stderr; the other paths are still checked).
No traceback ever reaches the user: an unexpected exception becomes one line
and exit code 2 (MPCHECK_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import mpcheck
from mpcheck.config import ConfigError, Settings

if TYPE_CHECKING:  # imported on use: `mpcheck --version` stays fast
    from mpcheck.finding import Finding
    from mpcheck.lint.rulemeta import RuleMeta

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

_RUNTIME_FACES = {
    "run": "mpcheck.runtime.commands.run",
    "dryrun": "mpcheck.runtime.commands.dryrun",
}


def _crash_hint() -> str:
    """Said once after the internal errors of a lint run, as ruff does after a panic."""
    debug = "" if os.environ.get("MPCHECK_DEBUG") else " MPCHECK_DEBUG=1 shows the traceback."
    return (
        "mpcheck: this is a bug in mpcheck, not in your code: please report it with the file (or a smaller "
        f"one that crashes the same way) and the output of `mpcheck --version`.{debug}"
    )


def _err(message: str) -> None:
    print(f"mpcheck: error: {message}", file=sys.stderr)


def _codes_arg(value: str) -> list[str]:
    return [c.strip() for c in value.split(",") if c.strip()]


def _lint_parser() -> argparse.ArgumentParser:
    from mpcheck.report import FORMATS

    p = argparse.ArgumentParser(
        prog="mpcheck",
        description="Find device-placement bugs in manually model-parallel PyTorch code.",
        epilog="Other commands: `mpcheck rule MP003` / `mpcheck rule --all` (rule docs), "
        "`mpcheck run script.py` (runtime debug mode), `mpcheck dryrun --gpus 4 script.py` (virtual GPUs). "
        "Exit codes: 0 clean, 1 findings, 2 usage/config/internal error or a missing path.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders to check (default: .); - reads stdin")
    p.add_argument(
        "--select",
        type=_codes_arg,
        action="append",
        metavar="CODES",
        help="codes or prefixes to check, or ALL (replaces the config's)",
    )
    p.add_argument(
        "--extend-select",
        type=_codes_arg,
        action="append",
        default=[],
        metavar="CODES",
        help="codes or prefixes to add",
    )
    p.add_argument(
        "--ignore", type=_codes_arg, action="append", default=[], metavar="CODES", help="codes or prefixes to skip"
    )
    p.add_argument(
        "--exclude",
        type=_codes_arg,
        action="append",
        metavar="PATTERNS",
        help="gitignore-style patterns to skip (replaces the defaults)",
    )
    p.add_argument(
        "--extend-exclude",
        type=_codes_arg,
        action="append",
        default=[],
        metavar="PATTERNS",
        help="patterns to skip as well as the defaults",
    )
    p.add_argument(
        "--gpus",
        metavar="COUNTS",
        help="GPU counts to assume for torch.cuda.device_count(), as 2,4,8 (replaces the config's; default 2,4,8)",
    )
    p.add_argument("--output-format", choices=FORMATS, default="text")
    p.add_argument(
        "--output-file", "-o", metavar="FILE", help="write the report to FILE instead of stdout (as ruff's -o)"
    )
    p.add_argument(
        "--statistics", action="store_true", help="print the number of findings per code instead of the findings"
    )
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    p.add_argument("--fix", action="store_true", help="apply safe fixes")
    p.add_argument("--unsafe-fixes", action="store_true", help="with --fix or --diff, apply unsafe fixes too")
    p.add_argument("--diff", action="store_true", help="print the fixes as a diff instead of writing them")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write .mpcheck_cache/")
    p.add_argument(
        "--jobs", "-j", type=int, default=None, metavar="N", help="worker processes (default: the number of cores)"
    )
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    p.add_argument("--stdin-filename", metavar="PATH", help="the name of the file read from stdin (with -)")
    p.add_argument("--isolated", action="store_true", help="ignore [tool.mpcheck] in pyproject.toml")
    p.add_argument("--version", action="version", version=f"mpcheck {mpcheck.__version__}")
    return p


def _flatten(groups: list[list[str]] | None) -> list[str] | None:
    if groups is None:
        return None
    return [c for group in groups for c in group]


def lint_main(argv: list[str]) -> int:
    from mpcheck.config import Layer, gpu_counts, project_root, resolve
    from mpcheck.lint import rulemeta
    from mpcheck.lint.cache import CACHE_DIR_NAME, ResultCache
    from mpcheck.lint.files import discover, missing_paths, stdin_source
    from mpcheck.lint.pipeline import lint

    args = _lint_parser().parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        raise ConfigError("--jobs must be at least 1")
    if importlib.util.find_spec("libcst") is None:
        # A broken install: said once, not as an internal error on every file it would parse.
        _err("the linter needs libcst, which this Python cannot import: pip install mpcheck (it brings libcst)")
        return EXIT_ERROR
    paths = args.paths or ["."]
    use_stdin = "-" in paths
    paths = [p for p in paths if p != "-"]
    if args.stdin_filename and not use_stdin:
        raise ConfigError("--stdin-filename needs - among the paths")

    start = Path(paths[0] if paths else (args.stdin_filename or os.getcwd()))
    cache_dir = None if args.no_cache else project_root(start) / CACHE_DIR_NAME

    rules = rulemeta.load(cache_dir)
    cli_layer = Layer(
        select=_flatten(args.select),
        extend_select=_flatten(args.extend_select) or [],
        ignore=_flatten(args.ignore) or [],
        exclude=_flatten(args.exclude),
        extend_exclude=_flatten(args.extend_exclude) or [],
        gpus=gpu_counts(args.gpus, "--gpus") if args.gpus is not None else None,
    )
    settings = resolve(cli_layer, rules.keys(), start=start, use_config=not args.isolated)

    # A path that names nothing is an error (exit 2), but the others are still checked.
    missing = missing_paths(paths)
    for path in missing:
        _err(f"path not found: {path}")
    files = discover([p for p in paths if p not in missing], settings)
    stdin = None
    if use_stdin:
        stdin = (stdin_source(args.stdin_filename, settings), sys.stdin.buffer.read())
    if not files and stdin is None:
        # Nothing to check (pre-commit may pass no Python file): quiet in the text
        # formats, an empty but valid document in the machine ones.
        _report(args, [], {}, 0, rules, settings, sys.stdout, checked=0)
        return EXIT_ERROR if missing else EXIT_OK

    cache = ResultCache(cache_dir, rulemeta.code_fingerprint()) if cache_dir is not None else None
    # A libcst tree is hundreds of thousands of objects, none garbage until its file is done: at the
    # default thresholds the collector scans them again and again (a sixth of linting torch's
    # _inductor/ir.py). Collections stay, rarer; the workers inherit this.
    gc.set_threshold(100_000, 50, 1000)
    outcome = lint(files, settings, rules, cache=cache, jobs=args.jobs, stdin=stdin)
    for message in outcome.errors:
        _err(message)
    if outcome.errors:
        print(_crash_hint(), file=sys.stderr)

    findings = outcome.findings
    fixed_count = 0
    if args.fix or args.diff:
        from mpcheck.lint.fix import fix_sources
        from mpcheck.lint.pipeline import Relint

        relint = Relint(files, settings, rules, cache, args.jobs, stdin, outcome.abspaths)
        result, new_texts = fix_sources(
            findings,
            outcome.sources,
            outcome.abspaths,
            unsafe=args.unsafe_fixes,
            write=args.fix and not args.diff,
            diff=args.diff,
            stdin_path=stdin[0].path if stdin else None,
            recheck=relint.one,
        )
        # A fix that would break the file, or add a finding, is the rule's problem, not the
        # user's: it is reported, the file is left alone and its finding stays in the output.
        for message in result.errors:
            print(f"mpcheck: warning: {message}", file=sys.stderr)
        # The report is that of the fixed files: what a fresh run over them finds.
        after = relint.all(new_texts) if new_texts else outcome
        if after is not outcome:
            for message in after.errors:
                _err(message)
            outcome.errors.extend(after.errors)
        if args.diff:
            sys.stdout.write("".join(result.diffs))
            if result.fixed:
                n = len(after.findings)
                print(
                    f"Would fix {len(result.fixed)} finding{'s' if len(result.fixed) != 1 else ''} ({n} would remain).",
                    file=sys.stderr,
                )
            if outcome.errors or missing:
                return EXIT_ERROR
            return EXIT_FINDINGS if result.diffs and not args.exit_zero else EXIT_OK
        findings = after.findings
        fixed_count = len(result.fixed)
        if stdin is not None and stdin[0].path in new_texts:
            sys.stdout.write(new_texts[stdin[0].path])
        outcome.sources.update(after.sources)
        outcome.sources.update(new_texts)

    # With `--fix -`, stdout carries the fixed source (for editors): the report goes to stderr.
    stream = sys.stderr if (args.fix and stdin is not None) else sys.stdout
    # A file that crashed was not checked: a run with internal errors never says "All checks passed".
    checked = 0 if outcome.errors else len(files) + (stdin is not None)
    if args.output_file:
        try:
            with open(args.output_file, "w", encoding="utf-8") as out:
                _report(args, findings, outcome.sources, fixed_count, rules, settings, out, checked)
        except OSError as e:
            _err(f"cannot write the report to {args.output_file}: {e.strerror}")
            return EXIT_ERROR
    else:
        _report(args, findings, outcome.sources, fixed_count, rules, settings, stream, checked)
    if outcome.errors or missing:
        return EXIT_ERROR
    if findings and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_OK


def _report(
    args: argparse.Namespace,
    findings: list[Finding],
    sources: dict[str, str],
    fixed_count: int,
    rules: Mapping[str, RuleMeta],
    settings: Settings,
    stream: TextIO,
    checked: int,
) -> None:
    from mpcheck.report import ReportContext, colour, render
    from mpcheck.report.text import all_passed

    human = args.output_format in ("text", "full")
    if args.statistics:
        from mpcheck.report.statistics import render as render_stats

        stream.write(render_stats(findings, "json" if args.output_format == "json" else "text"))
    else:
        color = human and colour.wanted(args.color, stream)
        if color:
            colour.enable_windows()
        ctx = ReportContext(sources=sources, color=color, fixed=fixed_count, root=os.getcwd())
        if args.output_format == "sarif":
            from mpcheck import catalogue

            docs = catalogue.load()
            for code, meta in rules.items():
                if code in settings.codes:
                    doc = docs.get(code)
                    ctx.rule_info[code] = (meta.name, meta.severity, meta.summary, doc.text if doc else "")
        stream.write(render(args.output_format, findings, ctx))
    # A clean run says so (as ruff does), so that one can tell that files were checked.
    if human and checked and not findings and not fixed_count:
        stream.write(all_passed(checked))
    stream.flush()


def rule_main(argv: list[str]) -> int:
    from mpcheck import catalogue, codes

    p = argparse.ArgumentParser(prog="mpcheck rule", description="Show a rule's documentation.")
    p.add_argument("code", nargs="?", help="a rule code, e.g. MP003 (or its name)")
    p.add_argument("--all", action="store_true", help="list every rule")
    args = p.parse_args(argv)
    docs = catalogue.load()
    if args.all or not args.code:
        if not args.all:
            p.print_usage(sys.stderr)
            _err("give a rule code (e.g. mpcheck rule MP003) or --all")
            return EXIT_ERROR
        width = max(len(c.name) for c in codes.CODES)
        for c in codes.CODES:
            print(f"{c.code}  {c.name:<{width}}  {c.severity:<7}  {c.summary}")
        return EXIT_OK
    wanted = args.code.strip()
    entry = codes.BY_CODE.get(wanted.upper()) or next((c for c in codes.CODES if c.name == wanted.lower()), None)
    doc = docs.get(entry.code) if entry else None
    if doc is None:
        _err(f"unknown rule {wanted!r} (known: {', '.join(c.code for c in codes.CODES)})")
        return EXIT_ERROR
    sys.stdout.write(doc.text if doc.text.endswith("\n") else doc.text + "\n")
    return EXIT_OK


def runtime_main(face: str, argv: list[str]) -> int:
    import importlib

    module_name = _RUNTIME_FACES[face]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == "torch":
            _err(f"`mpcheck {face}` needs PyTorch: pip install 'mpcheck[runtime]'")
        elif exc.name and module_name.startswith(exc.name):
            _err(f"`mpcheck {face}` is not available in this installation ({module_name} is missing)")
        else:
            _err(f"`mpcheck {face}` cannot start: module {exc.name!r} is missing")
        return EXIT_ERROR
    result = module.main(argv)
    return int(result or 0)


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] == "rule":
        return rule_main(argv[1:])
    if argv and argv[0] in _RUNTIME_FACES:
        return runtime_main(argv[0], argv[1:])
    return lint_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(argv)
    except ConfigError as exc:
        _err(str(exc))
        return EXIT_ERROR
    except SystemExit as exc:  # argparse: --help / --version (0) or a usage error (2)
        code = exc.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_ERROR)
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        # `mpcheck | head`: the reader left; not an error worth a traceback.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:  # the promise: no traceback, exit 2
        if os.environ.get("MPCHECK_DEBUG"):
            import traceback

            traceback.print_exc()
        _err(f"internal error: {type(exc).__name__}: {exc} (set MPCHECK_DEBUG=1 for the traceback)")
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
