"""`mpcheck run [options] script.py [args] | -m module [args] | -c code`.

Runs the program under the debug mode like python would, then prints the
report (to stderr, so the program's own stdout stays clean; `--output FILE`
writes it to a file). Exit status: the program's own; 1 if an error-level
finding was reported while the program itself succeeded; 2 for a bad command
line (a missing script is named).
"""

from __future__ import annotations

import argparse
import sys

from mpcheck.runtime.launch import LaunchError, parse_program, run_program, split_argv


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="mpcheck run",
        description="Run a PyTorch program under mpcheck's runtime debug mode, then report device "
        "mismatches, wasted transfers and what the transfers cost.",
    )
    ap.add_argument("--on-mismatch", choices=("raise", "warn", "move"), default="raise",
                    help="raise: stop at the first mismatch with mpcheck's error (default); warn: report it "
                    "and let PyTorch act; move: move the tensor and go on, listing every mismatch")
    ap.add_argument("--strict", action="store_true",
                    help="also check every aten op, forward and backward (slower: ~2x on small models)")
    ap.add_argument("--output-format", choices=("text", "json"), default="text")
    ap.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stderr")
    ap.add_argument("--trace", metavar="FILE", help="write a Chrome trace (open in Perfetto) of transfers and steps")
    ap.add_argument("--select", metavar="CODES", help="only these rule codes, comma-separated (e.g. MP001,MP011)")
    ap.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    ap.add_argument("program", nargs=argparse.REMAINDER,
                    help="script.py [args] | -m module [args] | -c code [args]")
    return ap


def main(argv: list[str]) -> int:
    parser = build_parser()
    ours, program_argv = split_argv(parser, list(argv))
    try:
        opts = parser.parse_args(ours)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        program = parse_program(program_argv)
    except LaunchError as e:
        print(f"mpcheck run: {e}", file=sys.stderr)
        return 2
    select = [c.strip().upper() for c in opts.select.split(",") if c.strip()] if opts.select else None
    try:
        from mpcheck.runtime.session import Session
    except ImportError as e:
        print(f"mpcheck run: needs PyTorch ({e}); install it, e.g. pip install 'mpcheck[runtime]'", file=sys.stderr)
        return 2
    session = Session(on_mismatch=opts.on_mismatch, strict=opts.strict, select=select, keep_trace=bool(opts.trace))
    session.start()
    try:
        status = run_program(program)
    finally:
        session.stop()
    from mpcheck.runtime.report import write_outputs

    try:
        if opts.output:
            with open(opts.output, "w", encoding="utf-8") as fh:
                write_outputs(session, output_format=opts.output_format, stream=fh, trace=opts.trace,
                              color_mode="never")
        else:
            write_outputs(session, output_format=opts.output_format, stream=sys.stderr, trace=opts.trace,
                          color_mode=opts.color)
    except OSError as e:
        print(f"mpcheck run: cannot write the report: {e}", file=sys.stderr)
        return 2
    if status == 0 and any(f.severity == "error" for f in session.checker.findings):
        return 1
    return status
