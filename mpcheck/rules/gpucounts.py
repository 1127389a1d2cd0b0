"""Findings under assumed GPU counts: which to keep, and how to say the assumption.

analysis.py runs the rules on a file once with `torch.cuda.device_count()` unknown
(the base run) and, when the file asks it, once per assumed count
(devices/gpucount.py). `merge` keeps the base findings, and adds a finding of the
count runs when the fewest GPUs the code allows gives it: the program fails (or
wastes the link) on a machine with that many, the usual 2, even if it would not on
8. Its message starts with the counts that give it ("With 2, 4 or 8 GPUs: ...",
"With 2 or 8 GPUs: ...", "With 4 GPUs or more: ..." where the code refuses fewer).
MP009 (a GPU index past the last) is kept only when every allowed count gives it.

A count is not allowed when its run met an `assert` that fails or an
`if ...: raise` that is taken (the program stops there under that count).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mpcheck.finding import Finding

# Codes whose finding, when it names the same devices under every count, holds only if the
# code also bounds the count from above: a literal `cuda:7` exists on a machine with 8 GPUs
# or more, so without an upper bound it is no error (`devices[n]` names cuda:n, which changes).
NEEDS_UPPER_BOUND = frozenset({"MP009"})


@dataclass
class CountRun:
    count: int
    findings: list[Finding]
    refuted: bool  # the code refuses this count (a failing assert, a taken `if ...: raise`)


def _key(f: Finding) -> tuple[str, int, int]:
    return (f.code, f.line, f.column)


def _counts(counts: Sequence[int]) -> str:
    words = [str(c) for c in counts]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def assumption(runs: Sequence[CountRun]) -> str:
    """'with 2, 4 or 8 GPUs', or 'with 4 GPUs or more' when the code refuses exactly the fewer counts."""
    allowed = [r.count for r in runs if not r.refuted]
    refused = [r.count for r in runs if r.refuted]
    low = min(allowed)
    if refused and all(c < low for c in refused) and len(allowed) > 1:
        return f"with {low} GPUs or more"
    if len(allowed) == 1:
        return f"with {low} GPU{'s' if low != 1 else ''}"
    return f"with {_counts(allowed)} GPUs"


def worth_going_on(base: list[Finding], runs: Sequence[CountRun]) -> bool:
    """False once the fewest GPUs the code allows gave no finding that the base run lacks: a finding is kept
    only when that count gives it (merge), so the larger counts, which only word it, need not run."""
    first = next((r for r in runs if not r.refuted), None)
    if first is None:
        return True
    return bool({_key(f) for f in first.findings} - {_key(f) for f in base})


def merge(base: list[Finding], runs: Sequence[CountRun]) -> list[Finding]:
    """The base findings, plus those the fewest GPUs the code allows gives (base ones are not repeated):
    a program that fails on a machine with that many GPUs has the bug there, whatever it does on larger ones.
    The message names every count that gives it."""
    allowed = [r for r in runs if not r.refuted]
    if not allowed:
        return base  # the code refuses every assumed count: nothing is known of it
    bounded_above = any(r.refuted and r.count > max(a.count for a in allowed) for r in runs)
    out = list(base)
    seen = {_key(f) for f in base}
    later = [(r.count, {_key(f): f for f in r.findings}) for r in allowed[1:]]
    said = assumption(runs)
    for f in allowed[0].findings:
        k = _key(f)
        if k in seen:
            continue
        others = [(count, idx[k]) for count, idx in later if k in idx]
        group = [f] + [o for _, o in others]
        counts = [allowed[0].count] + [c for c, _ in others]
        same_devices = all(g.devices == f.devices for g in group)
        if f.code in NEEDS_UPPER_BOUND and (len(group) < len(allowed) or (same_devices and not bounded_above)):
            continue
        seen.add(k)
        every = len(group) == len(allowed)
        out.append(_assumed(group, counts, said if every else f"with {_counts(counts)} GPUs", fixable=every))
    return out


def _assumed(group: list[Finding], counts: list[int], said: str, fixable: bool = True) -> Finding:
    """One finding for the group (one per count that gives it), its message prefixed by the assumption;
    a fix only when every allowed count gives it (`fixable`: an edit made for 2 GPUs may break the code with 4,
    where there was nothing to fix) and every count's fix is the same edit."""
    first = group[0]
    if all(g.message == first.message for g in group):
        message = f"{said[0].upper()}{said[1:]}: {first.message}"
    else:
        likewise = f" (likewise with {_counts(counts[1:])})" if len(counts) > 1 else ""
        if said.endswith("or more"):
            likewise = f" (the fewest the code allows; likewise with {_counts(counts[1:])})"
        message = f"With {counts[0]} GPUs{likewise}: {first.message}"
    fix = first.fix if fixable and all(g.fix == first.fix for g in group) else None
    return replace(first, message=message, fix=fix)


# ------------------------------------------------------------ across files (lint/callers.py)


def counted_calls(
    base: list[dict[str, Any]], by_count: dict[int, list[dict[str, Any]]], runs: Sequence[CountRun]
) -> list[dict[str, Any]]:
    """The calls of other files' functions that a caller's runs under assumed counts made with
    other arguments than its run with the count unknown (`model.devices[0]` of a class whose
    devices come from `torch.cuda.device_count()`), each tagged with its count (`gpus`) and the
    counts the caller allows (`allowed`): the callee runs each under that count only (for_count),
    and keeps a finding when the fewest allowed count gives it (analysis.analyze, merge)."""
    allowed = [r.count for r in runs if not r.refuted]
    if not allowed:
        return []
    seen = {_call_key(c) for c in base}
    out = []
    for count in allowed:
        for call in by_count.get(count, []):
            if _call_key(call) not in seen:
                out.append({**call, "gpus": count, "allowed": allowed})
    return out


def _call_key(call: dict[str, Any]) -> str:
    return json.dumps([call.get("line"), call.get("module"), call.get("func"), call.get("args"), call.get("kwargs")])


def for_count(callers: Sequence[Mapping[str, Any]], count: int | None) -> list[Mapping[str, Any]]:
    """The caller contexts a callee's run under `count` takes: those made with the count unknown,
    and those of the callers' runs under that same count."""
    return [c for c in callers if "gpus" not in c or (count is not None and c["gpus"] == count)]


def refused_by_callers(counted: Sequence[Mapping[str, Any]], count: int) -> bool:
    """Whether no caller that passes count-dependent devices allows `count` (each refuses it with
    an `assert n >= 4` or a class of a file that does): then the callee's run under it is no run
    the program makes. Used only for a callee that does not ask the count itself."""
    return bool(counted) and all(count not in c.get("allowed", ()) for c in counted)
