"""`mpcheck run [options] script.py [args] | -m module [args] | -c code`.

Runs the program under the debug mode like python would, then prints the
report (to stderr, so the program's own stdout stays clean; `--output FILE`
writes it to a file). Exit status: the program's own; 1 if an error-level
finding was reported while the program itself succeeded; 2 for a bad command
line (a missing script is named), or no CUDA on this machine (the program does
not run: the message points to `mpcheck dryrun`, which needs no GPU).
"""

from __future__ import annotations

import argparse
import functools
import sys

from mpcheck.runtime.commands.launch import Program, run_program
from mpcheck.runtime.commands.options import (
    add_report_options,
    needs_torch,
    recheck_every,
    run_command,
    selected_codes,
    write_report,
)
from mpcheck.runtime.commands.ranks import announce, finish_rank, start_rank


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="mpcheck run",
        description="Run a PyTorch program under mpcheck's runtime debug mode, then report device "
        "mismatches, wasted transfers and what the transfers cost.",
        epilog="exit status: the program's own; 1 when an error-level finding was reported and the program "
        "succeeded; 2 for a bad command line, or on a machine without CUDA (the program is not run: check it on "
        "virtual GPUs with mpcheck dryrun --gpus N).",
    )
    ap.add_argument(
        "--strict",
        action="store_true",
        help="also check every aten op, forward and backward (slower: ~2x on small models)",
    )
    add_report_options(
        ap,
        on_mismatch="raise",
        on_mismatch_help="raise: stop at the first mismatch with mpcheck's error (default); warn: "
        "report it and let PyTorch act; move: move the tensor and go on, listing every mismatch",
    )
    return ap


def main(argv: list[str]) -> int:
    return run_command(build_parser, _run, argv)


def _run(parser: argparse.ArgumentParser, opts: argparse.Namespace, program: Program) -> int:
    try:
        from mpcheck.runtime.capture.session import Session
        from mpcheck.runtime.checks.face import prepare
        from mpcheck.runtime.checks.report import write_outputs
        from mpcheck.runtime.real.devices import CudaDevices
    except ImportError as e:
        return needs_torch(parser.prog, e)
    if not cuda_available():
        print(
            f"{parser.prog}: CUDA is not available on this machine (torch.cuda.is_available() is False), and the "
            f"debug mode checks a program on real GPUs; {program.display} was not run. To check it without a GPU, "
            f"run it on N virtual GPUs: mpcheck dryrun --gpus N {program.display}",
            file=sys.stderr,
        )
        return 2
    rank = start_rank(opts)
    try:
        session = Session(
            on_mismatch=opts.on_mismatch,
            strict=opts.strict,
            select=selected_codes(opts),
            devices=CudaDevices(),
            keep_trace=bool(opts.trace or opts.html),  # the page's timeline needs the transfers kept
            recheck_every=recheck_every(opts),
        )
    except ValueError as e:
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 2
    placement = prepare(session)
    session.start()
    try:
        status = run_program(program, on_stop=session.checker.on_program_stopped)
    finally:
        session.stop()
    write = functools.partial(write_outputs, session, output_format=opts.output_format, trace=opts.trace)
    announce(rank, opts)
    if not write_report(parser.prog, opts, write):
        return 2
    if opts.html and not write_page(parser.prog, opts.html, session, placement):
        return 2
    if rank is not None:
        from mpcheck.runtime.checks.report import report_dict

        finish_rank(report_dict(session), rank, opts)
    if status == 0 and any(f.severity == "error" for f in session.checker.findings):
        return 1
    return status


def write_page(prog: str, path: str, session, placement) -> bool:
    """The HTML report to `path`; False, with the reason printed, when it cannot be written."""
    from mpcheck.runtime.checks.html.write import RUN_SUBTITLE, RUN_TITLE, cuda_capacities, write_html
    from mpcheck.runtime.checks.report import report_dict

    try:
        write_html(
            path,
            session=session,
            placement=placement,
            report=report_dict(session),
            title=RUN_TITLE,
            subtitle=RUN_SUBTITLE,
            capacities=cuda_capacities(),
        )
    except OSError as e:
        print(f"{prog}: cannot write the HTML report: {e}", file=sys.stderr)
        return False
    return True


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()
