"""`mpcheck dryrun --gpus N [options] script.py [args] | -m module [args] | -c code`.

Runs the program like python would, with N virtual GPUs (no GPU needed),
under the debug mode's checks with on_mismatch=move, then prints the report
(stderr, or --output FILE). Exit status (EXIT_STATUS): 1 if an error-level
finding was reported or a virtual GPU does not fit in --device-memory (a dry
run gates CI), else the program's own (a dry-run limit or a crash: 1, as
python); 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import functools
import sys

from mpcheck.runtime.checks.ranks import RankEnv
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

EXIT_STATUS = (
    "exit status: 1 when an error-level finding was reported or a virtual GPU's estimated memory does not fit "
    "in --device-memory; else the program's own (a crash or a dry-run limit: 1); 2 for a bad command line."
)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="mpcheck dryrun",
        description="Run a model-parallel PyTorch program on virtual GPUs (no GPU needed): report device "
        "mismatches and wasted transfers with your source lines, each device's estimated memory against its "
        "capacity, and the transfers' estimated time on the chosen link.",
        epilog=EXIT_STATUS,
    )
    ap.add_argument("--gpus", type=int, default=2, metavar="N", help="number of virtual GPUs, cuda:0..N-1 (default 2)")
    ap.add_argument(
        "--backing",
        choices=("cpu", "meta"),
        default="cpu",
        help="cpu: real values (small models); meta: shapes only, any size, no values "
        "(code that needs one, like .item(), stops with a message) (default cpu)",
    )
    ap.add_argument(
        "--device-memory",
        default="80GiB",
        metavar="SIZE",
        help="memory of each virtual GPU for the fit check, e.g. 80GiB, 141GB (default 80GiB); a GPU that does "
        "not fit makes the exit status 1",
    )
    ap.add_argument(
        "--link",
        default="nvlink",
        metavar="LINK",
        help="nvlink (400 GB/s, measured on H200), pcie5 (50 GB/s), pcie4 (25 GB/s) or a bandwidth "
        "in GB/s (default nvlink)",
    )
    ap.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="run N processes of one job, as torchrun would (RANK, LOCAL_RANK, WORLD_SIZE; use the gloo "
        "backend): each owns --gpus/N of the virtual GPUs (rank r: cuda:r*G/N ..) and writes its own report "
        "(rank in the file names), then the reports are merged (default 1)",
    )
    add_report_options(
        ap,
        on_mismatch="move",
        on_mismatch_help="move: move the tensor and go on, listing every mismatch (default); "
        "raise: stop at the first; warn: report and let PyTorch act",
    )
    return ap


def main(argv: list[str]) -> int:
    return run_command(build_parser, functools.partial(_run, argv=argv), argv)


def _run(parser: argparse.ArgumentParser, opts: argparse.Namespace, program: Program, *, argv: list[str]) -> int:
    if opts.gpus < 1:
        print(f"mpcheck dryrun: --gpus must be at least 1, got {opts.gpus}", file=sys.stderr)
        return 2
    if opts.nproc < 1 or opts.nproc > opts.gpus:
        print(f"mpcheck dryrun: --nproc must be 1 to --gpus ({opts.gpus}), got {opts.nproc}", file=sys.stderr)
        return 2
    if opts.nproc > 1 and RankEnv.from_env() is None:
        from mpcheck.runtime.commands.launch import split_argv
        from mpcheck.runtime.commands.nproc import launch

        ours, program_argv = split_argv(parser, list(argv))
        return launch(opts.nproc, ours, program_argv, opts)
    rank = start_rank(opts)
    try:
        from mpcheck.runtime.checks.thresholds import repeat_min_bytes_from_env
        from mpcheck.runtime.commands.stall import StallWatch
        from mpcheck.runtime.virtual.devices import DryRunLimitError
        from mpcheck.runtime.virtual.dryrun import dryrun
    except ImportError as e:
        return needs_torch(parser.prog, e)
    try:
        repeat_min_bytes_from_env()  # a bad MPCHECK_REPEAT_MIN_BYTES, said before the run as recheck_every() does
        dr = dryrun(
            opts.gpus,
            backing=opts.backing,
            device_memory=opts.device_memory,
            link=opts.link,
            on_mismatch=opts.on_mismatch,
            select=selected_codes(opts),
            report=None,
            trace=opts.trace,
            html=opts.html,
            recheck_every=recheck_every(opts),
        )
    except ValueError as e:
        print(f"mpcheck dryrun: {e}", file=sys.stderr)
        return 2
    stopped: list[BaseException] = []
    with dr, StallWatch() as watch:
        status = run_program(
            program, brief=(DryRunLimitError,), on_stop=stopped.append, interrupted_by=lambda: watch.fired
        )
        if stopped:  # said before leaving `dr`, so that the trace and the page written then say it too
            dr.stop_on(stopped[0])
    # The trace and the page were written on leaving `dr` (trace=, html=); the report follows here.
    announce(rank, opts)
    if not write_report(parser.prog, opts, functools.partial(dr.write, output_format=opts.output_format)):
        return 2
    if rank is not None:
        finish_rank(dr.report_dict(), rank, opts)
    if any(f.severity == "error" for f in dr.findings):
        return 1
    if any(not m["fits"] for m in dr.memory.values()):
        return 1
    return status
