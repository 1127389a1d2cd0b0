"""`mpcheck dryrun --gpus N [options] script.py [args] | -m module [args] | -c code`.

Runs the program like python would, with N virtual GPUs (no GPU needed),
under the debug mode's checks with on_mismatch=move, then prints the report
(stderr, or --output FILE). Exit status: 1 if an error-level finding was
reported, else the program's own (a dry-run limit or a crash: 1, as python);
2 for a bad command line.
"""

from __future__ import annotations

import argparse
import sys

from mpcheck.runtime.launch import LaunchError, parse_program, run_program, split_argv


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="mpcheck dryrun",
        description="Run a model-parallel PyTorch program on virtual GPUs (no GPU needed): report device "
        "mismatches and wasted transfers with your source lines, each device's estimated memory against its "
        "capacity, and the transfers' estimated time on the chosen link.",
    )
    ap.add_argument("--gpus", type=int, default=2, metavar="N", help="number of virtual GPUs, cuda:0..N-1 (default 2)")
    ap.add_argument("--backing", choices=("cpu", "meta"), default="cpu",
                    help="cpu: real values (small models); meta: shapes only, any size, no values "
                    "(code that needs one, like .item(), stops with a message) (default cpu)")
    ap.add_argument("--device-memory", default="80GiB", metavar="SIZE",
                    help="memory of each virtual GPU for the fit check, e.g. 80GiB, 141GB (default 80GiB)")
    ap.add_argument("--link", default="nvlink", metavar="LINK",
                    help="nvlink (400 GB/s, measured on H200), pcie5 (50 GB/s), pcie4 (25 GB/s) or a bandwidth "
                    "in GB/s (default nvlink)")
    ap.add_argument("--on-mismatch", choices=("raise", "warn", "move"), default="move",
                    help="move: move the tensor and go on, listing every mismatch (default); raise: stop at the "
                    "first; warn: report and let PyTorch act")
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
    if opts.gpus < 1:
        print(f"mpcheck dryrun: --gpus must be at least 1, got {opts.gpus}", file=sys.stderr)
        return 2
    try:
        program = parse_program(program_argv)
    except LaunchError as e:
        print(f"mpcheck dryrun: {e}", file=sys.stderr)
        return 2
    select = [c.strip().upper() for c in opts.select.split(",") if c.strip()] if opts.select else None
    try:
        from mpcheck.runtime.dryrun import dryrun
        from mpcheck.runtime.virtual import DryRunLimitError
    except ImportError as e:
        print(f"mpcheck dryrun: needs PyTorch ({e}); install it, e.g. pip install 'mpcheck[runtime]'",
              file=sys.stderr)
        return 2
    try:
        dr = dryrun(opts.gpus, backing=opts.backing, device_memory=opts.device_memory, link=opts.link,
                    on_mismatch=opts.on_mismatch, select=select, report=None, trace=opts.trace)
    except ValueError as e:
        print(f"mpcheck dryrun: {e}", file=sys.stderr)
        return 2
    stopped: list[BaseException] = []

    def on_limit(e: BaseException) -> None:
        stopped.append(e)

    with dr:
        status = run_program(program, brief=(DryRunLimitError,), on_brief=on_limit)
    if stopped:
        dr.stopped = str(stopped[0])
    try:
        if opts.output:
            with open(opts.output, "w", encoding="utf-8") as fh:
                dr.write(output_format=opts.output_format, stream=fh, color_mode="never")
        else:
            dr.write(output_format=opts.output_format, stream=sys.stderr, color_mode=opts.color)
    except OSError as e:
        print(f"mpcheck dryrun: cannot write the report: {e}", file=sys.stderr)
        return 2
    if any(f.severity == "error" for f in dr.findings):
        return 1
    return status
