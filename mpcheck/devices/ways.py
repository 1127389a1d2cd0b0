"""Tensors whose device depends on which way an `if` went that the analysis could not decide.

Scheduled teacher forcing feeds the decoder the target on some steps and its own prediction on the others:

    if target is not None and random.random() < tf_ratio:
        inp = target[:, t]        # on the encoder's GPU when the targets were moved there
    else:
        inp = pred.detach()       # on the decoder's GPU
    ...
    state = self.cell(inp, state) # the next step: a crash whenever the first way was taken

After the join `inp` is on one of two devices, which no rule compares (values.conflict needs one known device
on each side). Here each tensor that the two ways leave on different known devices keeps its value on each way
(`Obj.paths`), and a use that needs one device (a module's input, an operand: calls.py, expressions.py) is
reported on the way that brings the other (`path_off`), naming the test (MP001).

Precision: a test about devices or the split (`if h.device != self.dev:`, `if self.model_parallel:`) decides
the devices of what it guards together with those of what follows, so its ways are not kept. A use under a test
of its own (`if use_cache:` after `if use_cache: past = past.to(dev)`) may only run on the matching way: only a
use under no other test than those around the `if` is reported. Any op's result is a value of its own (`with_`
drops the ways), so only the tensor as the `if` left it is followed, through joins (a loop's next pass).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeGuard

import libcst as cst

from mpcheck.devices.values import MAX_PATHS, Devs, Obj, Val, conflict, single
from mpcheck.devices.walk import walk

if TYPE_CHECKING:
    from mpcheck.devices.program import State


# Names in a test about devices or the split (`self.last_dev != self.first_dev`, `torch.cuda.device_count() > 1`,
# `self.model_parallel`): what it guards is placed together with what follows it.
_DEVICE_WORDS = ("dev", "gpu", "cuda", "rank", "parallel", "split", "pipe", "stage", "shard", "distributed", "world")


@dataclass(frozen=True, eq=False)
class Path:
    """One way through an `if` whose test the analysis could not decide: the value a name holds after it that
    way, the test, and whether it held. `outer`: the ids of the undecided tests around that `if` (Statements.
    open_tests), so that a use under a test of its own, which may go with this one (`if use_cache:` twice), is
    not taken for a use on every way."""

    value: Obj
    test: Any
    taken: bool
    outer: frozenset[int]


def path_off(v: Val, need: Devs, open_tests: Iterable[Any]) -> Path | None:
    """The way through an `if` on which `v` is certainly not on `need` (one known device), when its use is on
    every way that `if` can go (no test around the use but those around the `if`); else None."""
    if not isinstance(v, Obj) or not v.paths or single(need) is None:
        return None
    around = {id(t) for t in open_tests}
    for p in v.paths:
        if conflict(p.value.devs, need) and around <= p.outer:
            return p
    return None


def note_ways(
    joined: State,
    then: list[State],
    other: list[State],
    test: cst.BaseExpression,
    outer: frozenset[int],
    before: dict[str, Any],
) -> None:
    """Tensors the two ways of an `if` leave on different known devices: after the join (`joined`) each holds
    its value on each way. `then`/`other`: the states each way ends in; `outer`: the tests around the `if`;
    `before`: the names as the `if` found them. Only a tensor that each way binds anew counts: `if flag: h =
    h.to(dev)` leaves `h` as it was on the other way, and the code may know when that way is taken."""
    if asks_about_devices(test):
        return
    for name, j in joined.env.items():
        if not _on_several(j):
            continue
        found = _ways_of(name, then, other, test, outer, before.get(name))
        if found is not None:
            joined.env[name] = replace(j, paths=found)


def ways_of_choice(choice: cst.IfExp, body: Val, orelse: Val, joined: Val, outer: frozenset[int]) -> Val:
    """`a if c else b`: the joined value, with the value on each way when they are tensors on different known
    devices, each computed there (not a name as it was)."""
    test = choice.test
    if not _on_several(joined) or asks_about_devices(test):
        return joined
    ways: list[Path] = []
    for v, e, taken in ((body, choice.body, True), (orelse, choice.orelse, False)):
        # (`x.to(d) if c else x`: the value as it was on one way, as for an `if`)
        if isinstance(e, (cst.Name, cst.Attribute)) or not _add_way(ways, v, test, taken, outer):
            return joined
    return replace(joined, paths=tuple(ways)) if len(ways) <= MAX_PATHS else joined


def _ways_of(
    name: str, then: list[State], other: list[State], test: cst.BaseExpression, outer: frozenset[int], before: Any
) -> tuple[Path, ...] | None:
    """The value of `name` on each way, or None when on some way it is no tensor of one known device, or the
    value the `if` found (`before`)."""
    ways: list[Path] = []
    for states, taken in ((then, True), (other, False)):
        for s in states:
            v = s.env.get(name)
            if v is before or not _add_way(ways, v, test, taken, outer):
                return None
    return tuple(ways) if 2 <= len(ways) <= MAX_PATHS else None


def _on_several(v: Val) -> TypeGuard[Obj]:
    """A tensor the join left on several known devices."""
    return isinstance(v, Obj) and v.kind == "tensor" and v.devs is not None and len(v.devs) > 1


def _add_way(ways: list[Path], v: Val | None, test: cst.BaseExpression, taken: bool, outer: frozenset[int]) -> bool:
    """Add the way(s) `v` came by: its own ways (an `if` inside this one, with its own test), or this way when
    it is a tensor of one known device; False when it is neither."""
    if not (isinstance(v, Obj) and v.kind == "tensor"):
        return False
    if v.paths:
        ways.extend(v.paths)
        return True
    if single(v.devs) is None:
        return False
    ways.append(Path(v, test, taken, outer))
    return True


def asks_about_devices(test: cst.BaseExpression) -> bool:
    """Does the test read a device, a GPU count, a rank or a split flag (by the names it reads, or a device
    string)?"""
    for n in walk(test):
        word = n.attr.value if isinstance(n, cst.Attribute) else n.value if isinstance(n, cst.Name) else None
        if word is not None and any(w in word.lower() for w in _DEVICE_WORDS):
            return True
        if isinstance(n, cst.SimpleString) and any(w in n.value.lower() for w in ("cuda", "cpu")):
            return True
    return False
