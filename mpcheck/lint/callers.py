"""Caller contexts across the linted files (the pipeline's half of devices/callers.py).

The analysis of a file returns the calls it makes to functions of other modules with
arguments whose devices it knows (analysis.FileResult.calls, stored with the file's
cached result). After every file has its result, each such call whose module is a
file of this run becomes a caller context of that file: the function's name, the
encoded arguments and the call's place (display path, line, text). A file with
contexts is analysed again with them (its findings then include what the calls
prove inside its functions) and that result replaces the one without.

Callers are looked up only among the files of the run, as ruff sees a run's
files: linting `utils.py` alone knows of no caller and invents none; linting the
project (or `main.py utils.py`) runs `utils.train_one_epoch` with what `main.py`
passes it.

Several levels (codes.CALLER_DEPTH): the analysis of a file run with contexts
returns the calls its context runs made in turn (`engine.train`, run with main.py's
model and device, calls `utils.step(model, batch, dev)`), each with the chain of
calls that led there; those are contexts of the next level, and the files they reach
are analysed again with all their contexts (`add`). A context adds nothing when one with
the same function and arguments is there already (whatever the chain): the work is
bounded by MAX_CONTEXTS per function and codes.CALLER_DEPTH levels.

A call that the caller's run under an assumed GPU count made with other arguments than its
run with the count unknown carries that count and the counts the caller allows (`gpus`,
`allowed`: rules/gpucounts.counted_calls); the callee takes it in its run under that count
only. A method of another file's class carries the arguments its instance was built with
(`init`).

The cached result of a file with contexts is keyed by them too (`digest`): editing
the caller so that it passes other devices changes the key, and the callee is
analysed again; the caller's own entry is keyed by its content as always.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from mpcheck.lint.cache import content_hash

# A function called from more places than this with known devices is run for the first ones only
# (in path and line order): each context is a whole run of the function.
MAX_CONTEXTS = 8


# (display path of the calling file, the calls its analysis returned, module name -> absolute path)
Caller = tuple[str, list[dict[str, Any]], Callable[[str], str | None]]


def contexts(callers: Iterable[Caller], linted: set[str], own: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Absolute path of a linted file -> the contexts its functions are called with by the other
    linted files, each once (the first call in path and line order names it), in a stable order.
    `own`: display path of a caller -> its absolute path (a call of its own module is not one)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    add(found, callers, linted, own)
    return ordered(found)


def ordered(found: dict[str, dict[str, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The contexts `add` gathered, per file in a stable order (their keys')."""
    return {target: [by_key[k] for k in sorted(by_key)] for target, by_key in found.items()}


def add(
    found: dict[str, dict[str, dict[str, Any]]], callers: Iterable[Caller], linted: set[str], own: dict[str, str]
) -> set[str]:
    """Add to `found` (absolute path -> context key -> context) the contexts these calls make;
    returns the paths that got a new one. A context already there keeps the call that named it."""
    grown: set[str] = set()
    for path, calls, resolve in sorted(callers, key=lambda c: c[0]):
        for call in sorted(calls, key=lambda c: (c.get("line", 0), c.get("code", ""))):
            target = resolve(call.get("module", ""))
            if target is None or target not in linted or target == own.get(path):
                continue
            ctx = {"func": call["func"], "args": call.get("args", []), "kwargs": call.get("kwargs", {})}
            if "init" in call:  # a method: what the caller built its instance with (devices/callers.py)
                ctx["init"] = call["init"]
            if "moved" in call:  # ... and the device it then moved the instance to, whole
                ctx["moved"] = call["moved"]
            if "within" in call:  # called by a method of a split class of the caller's file
                ctx["within"] = call["within"]
            if "gpus" in call:  # made under an assumed GPU count (rules/gpucounts.counted_calls)
                ctx.update(gpus=call["gpus"], allowed=call["allowed"])
            key = json.dumps(ctx, sort_keys=True)
            mine = found.setdefault(target, {})
            if key in mine or sum(c["func"] == ctx["func"] for c in mine.values()) >= MAX_CONTEXTS:
                continue
            mine[key] = {**ctx, "via": {"path": path, "line": call.get("line", 0), "code": call.get("code", "")}}
            if call.get("chain"):  # made in a context run of the caller: the calls that led to it
                mine[key]["chain"] = call["chain"]
            grown.add(target)
    return grown


def digest(ctxs: list[dict[str, Any]]) -> str:
    """What a cached result of a file analysed with these contexts is keyed by, besides the file."""
    return content_hash(json.dumps(ctxs, sort_keys=True).encode("utf-8"))
