"""Run `script.py args | -m module args | -c code` exactly as `python` would.

sys.argv, sys.path[0], `__main__`, the exit status (SystemExit, uncaught
exception -> 1 with the traceback printed) are those of `python`. The caller
wraps `run_program` in its session, so the report can be printed after the
program, however it ended. Used by `mpcheck run` and `mpcheck dryrun`.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from dataclasses import dataclass


@dataclass
class Program:
    kind: str  # "script", "module" or "code"
    target: str  # path, module name or code text
    args: list[str]

    @property
    def display(self) -> str:
        return {"script": self.target, "module": f"-m {self.target}", "code": "-c <code>"}[self.kind]


class LaunchError(Exception):
    """Bad command line: the message says what is wrong; exit status 2."""


def split_argv(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str]]:
    """(the tool's options, the program's argv): the tool's options stop at the program, the
    first non-option, `--`, or -m/-c. Which options take a value is read off `parser`; a long
    option may be abbreviated as argparse allows (`--out FILE` is `--output FILE`)."""
    takes_value = {s for a in parser._actions if a.nargs != 0 and a.option_strings for s in a.option_strings}
    long_options = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv[:i], argv[i + 1 :]
        if a in ("-m", "-c") or (a.startswith(("-m", "-c")) and not a.startswith("--")):
            return argv[:i], argv[i:]
        if not a.startswith("-"):
            return argv[:i], argv[i:]
        if a.startswith("--") and "=" not in a and a not in long_options and parser.allow_abbrev:
            matches = [s for s in long_options if s.startswith(a)]
            a = matches[0] if len(matches) == 1 else a  # ambiguous or unknown: argparse says so
        i += 2 if a in takes_value else 1
    return argv, []


def parse_program(argv: list[str]) -> Program:
    """argv after the tool's own options: `script.py args`, `-m mod args` or `-c code args`."""
    if not argv:
        raise LaunchError("no program given: expected script.py [args], -m module [args] or -c code")
    head = argv[0]
    if head in ("-m", "-c"):
        if len(argv) < 2:
            raise LaunchError(f"argument expected for the {head} option")
        return Program("module" if head == "-m" else "code", argv[1], argv[2:])
    if head.startswith("-m") and len(head) > 2:
        return Program("module", head[2:], argv[1:])
    if head.startswith("-c") and len(head) > 2:
        return Program("code", head[2:], argv[1:])
    if not os.path.exists(head):
        raise LaunchError(f"can't open file {head!r}: no such file")
    if os.path.isdir(head) and not os.path.exists(os.path.join(head, "__main__.py")):
        raise LaunchError(f"can't find '__main__' module in {head!r}")
    return Program("script", head, argv[1:])


def run_program(
    program: Program, *, brief: tuple[type[BaseException], ...] = (), on_stop=None, interrupted_by=None
) -> int:
    """Run it in this process; return the exit status python would give.

    `brief`: exception types that are a tool's own clear stop (the dry run's
    documented limits): their message is printed without a traceback, and the
    status is 1, as for any uncaught exception. `on_stop` is handed the exception
    that stopped the program, if one did (SystemExit is an ordinary end).
    `interrupted_by`: called on a KeyboardInterrupt, it gives the tool's own stop that
    interrupted the program (commands/stall.py), reported as a brief one; None for the user's."""
    saved_argv = sys.argv[:]
    saved_path = sys.path[:]
    saved_main = sys.modules.get("__main__")
    try:
        if program.kind == "script":
            sys.argv = [program.target, *program.args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(program.target)))
            runpy.run_path(program.target, run_name="__main__")
        elif program.kind == "module":
            sys.argv = [program.target, *program.args]  # runpy sets argv[0] to the module's path
            sys.path.insert(0, os.getcwd())
            runpy.run_module(program.target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *program.args]
            sys.path.insert(0, "")
            import types

            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = __builtins__
            sys.modules["__main__"] = main
            exec(compile(program.target, "<string>", "exec"), main.__dict__)
        return 0
    except SystemExit as e:
        return _exit_code(e.code)
    except KeyboardInterrupt as e:
        stop = interrupted_by() if interrupted_by is not None else None
        if stop is not None:
            print(f"mpcheck: {stop} (the program caught this, then waited without progress: ended)", file=sys.stderr)
            _stopped(on_stop, stop)
            return 1
        traceback.print_exc()
        _stopped(on_stop, e)
        return 130
    except brief as e:
        print(f"mpcheck: {e}", file=sys.stderr)
        _stopped(on_stop, e)
        return 1
    except BaseException as e:  # noqa: BLE001 - a user program's crash, printed as python prints it
        _print_user_traceback(e)
        _stopped(on_stop, e)
        return 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


def _stopped(on_stop, exc: BaseException) -> None:
    if on_stop is not None:
        on_stop(exc)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback python would print, without the launcher's own frames on top."""
    tb = exc.__traceback__
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # mpcheck/runtime/
    while tb is not None and (
        os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(here)
        or tb.tb_frame.f_code.co_filename.endswith("runpy.py")
        or "<frozen runpy>" in tb.tb_frame.f_code.co_filename
    ):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
