"""What `mpcheck run` and `mpcheck dryrun` share on the command line: the report options,
the parse of their own options and the program (run_command), and writing the report."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from mpcheck.runtime.commands.launch import LaunchError, Program, parse_program, split_argv

# The options that name a file mpcheck writes after the program ran.
OUTPUT_PATHS = ("output", "trace", "html")


def add_report_options(ap: argparse.ArgumentParser, *, on_mismatch: str, on_mismatch_help: str) -> None:
    """--on-mismatch (default `on_mismatch`), --output-format, --output/-o, --trace, --html, --select,
    --color, then the program: add the face's own options before calling this."""
    ap.add_argument("--on-mismatch", choices=("raise", "warn", "move"), default=on_mismatch, help=on_mismatch_help)
    ap.add_argument("--output-format", choices=("text", "json"), default="text")
    ap.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stderr")
    ap.add_argument("--trace", metavar="FILE", help="write a Chrome trace (open in Perfetto) of transfers and steps")
    ap.add_argument(
        "--html",
        metavar="FILE",
        help="write the report as one self-contained HTML page: devices, their modules, memory, crossings, "
        "findings and the transfers' timeline",
    )
    ap.add_argument("--select", metavar="CODES", help="only these rule codes, comma-separated (e.g. MP001,MP011)")
    ap.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    ap.add_argument(
        "--recheck-every",
        type=int,
        metavar="N",
        default=None,
        help="a module call like one already checked clean (same devices and dtypes of its inputs, training "
        "flag, grad mode, autocast) runs without the per-call checks; every N-th step checks everything again "
        "(default 100, or MPCHECK_RECHECK_EVERY; 0: every call)",
    )
    ap.add_argument(
        "--every-call",
        action="store_true",
        help="check every call of every step (as --recheck-every 0; slower after the first step)",
    )
    ap.add_argument("program", nargs=argparse.REMAINDER, help="script.py [args] | -m module [args] | -c code [args]")


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, Program] | int:
    """Our options and the program to run, or the exit status (2, with the message printed)."""
    ours, program_argv = split_argv(parser, list(argv))
    try:
        opts = parser.parse_args(ours)
    except SystemExit as e:
        return int(e.code or 0)
    # The program may change the working folder (os.chdir): a relative output path means the one at launch.
    for name in OUTPUT_PATHS:
        if getattr(opts, name, None):
            setattr(opts, name, os.path.abspath(getattr(opts, name)))
    try:
        program = parse_program(program_argv)
    except LaunchError as e:
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 2
    return opts, program


def run_command(
    build_parser: Callable[[], argparse.ArgumentParser],
    body: Callable[[argparse.ArgumentParser, argparse.Namespace, Program], int],
    argv: list[str],
) -> int:
    """A face's `main`: its parser's options and the program from `argv`, then
    `body(parser, opts, program)`; a bad command line (or --help) returns its status unrun."""
    parser = build_parser()
    parsed = parse(parser, argv)
    if isinstance(parsed, int):
        return parsed
    opts, program = parsed
    return body(parser, opts, program)


def selected_codes(opts: argparse.Namespace) -> list[str] | None:
    return [c.strip().upper() for c in opts.select.split(",") if c.strip()] if opts.select else None


def needs_torch(prog: str, e: ImportError) -> int:
    print(f"{prog}: needs PyTorch ({e}); install it, e.g. pip install 'mpcheck[runtime]'", file=sys.stderr)
    return 2


def write_report(prog: str, opts: argparse.Namespace, write: Callable[..., None]) -> bool:
    """`write(stream=, color_mode=)` to --output FILE (no colour) or to stderr (--color);
    False, with the reason printed, when the file cannot be written."""
    try:
        if opts.output:
            with open(opts.output, "w", encoding="utf-8") as fh:
                write(stream=fh, color_mode="never")
        else:
            write(stream=sys.stderr, color_mode=opts.color)
    except OSError as e:
        print(f"{prog}: cannot write the report: {e}", file=sys.stderr)
        return False
    return True


def recheck_every(opts: argparse.Namespace) -> int | None:
    """--every-call / --recheck-every N as the faces take it, else MPCHECK_RECHECK_EVERY or the default;
    raise ValueError for a bad option or setting (read here, so that the command says it before it runs
    anything, not as a traceback from inside the run)."""
    if opts.every_call:
        return 0
    if opts.recheck_every is not None and opts.recheck_every < 0:
        raise ValueError(f"--recheck-every must be 0 (every call) or more, not {opts.recheck_every}")
    if opts.recheck_every is None:
        from mpcheck.runtime.capture.signatures import recheck_every_from_env

        return recheck_every_from_env()
    return opts.recheck_every
