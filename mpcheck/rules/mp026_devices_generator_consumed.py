"""MP026: a generator of devices read twice: the first reader consumes it, the placement gets nothing.

`devices = (torch.device("cuda", i) for i in range(n))` is a generator, not a list: it yields its devices once.
A log line that joins them (`", ".join(str(d) for d in devices)`) empties it, and the placement that zips the
stages with it afterwards (`for dev, stage in zip(devices, stages)`) places nothing, with no error: the model
stays where it was built, on the host or on one GPU. Plain syntax: the binding, the statements of the same block
that read the name after it, and whether the generator makes devices.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst

from mpcheck.devices.names import dotted
from mpcheck.devices.walk import assigned, target_names, walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS

_DEVICE_WORDS = ("cuda", "device", "gpu")
# Calls that read an iterable through to its end.
_CONSUMERS = frozenset({"list", "tuple", "set", "sorted", "sum", "any", "all", "max", "min", "dict"})
# Lazy wrappers: they read the generator through only when a `for` walks them (`for i, d in enumerate(devices)`).
_LAZY = frozenset({"enumerate", "zip"})


class DevicesGeneratorConsumed(Rule):
    code = "MP026"
    needs = FLOW_WORDS  # (a split names a second device: words.py)

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for block in walk(ctx.module):
            if isinstance(block, (cst.Module, cst.IndentedBlock)):
                yield from self._in_block(ctx, block.body)

    def _in_block(self, ctx: FileContext, stmts: Sequence[cst.BaseStatement]) -> Iterator[Finding]:
        for i, stmt in enumerate(stmts):
            name, gen = _generator_of_devices(stmt)
            if name is None or gen is None:
                continue
            consumed: cst.CSTNode | None = None  # the read that emptied it
            taken: list[cst.Call] = []  # `next(devices)` before: the devices it took
            for later in stmts[i + 1 :]:
                if name in _bound_by(later) and not _takes_one(later, name):
                    break  # bound anew: a fresh generator (or another value) from here on
                reads = [n for n in walk(later) if isinstance(n, cst.Name) and n.value == name]
                if not reads:
                    continue
                if consumed is None and (took := _takes_one(later, name)) is not None:
                    taken.append(took)  # `input_device = next(iter(devices))`: the first device is gone
                    continue
                if taken and consumed is None:
                    through = next((c for r in reads if (c := _consumer_of(later, r)) is not None), None)
                    if through is not None:
                        n = len(taken)
                        yield self.finding(
                            ctx,
                            reads[0],
                            f"`{name}` is a generator (line {ctx.line(gen)}), and line {ctx.line(taken[0])} already "
                            f"took {'its first device' if n == 1 else f'its first {n} devices'} "
                            f"(`{_short(ctx.code(taken[0]))}`): what this line places over it starts at the "
                            f"{_ORDINALS.get(n + 1, f'{n + 1}th')} device, so each part lands one GPU later than "
                            "meant and the last finds none when there are as many GPUs as parts (it stays where it "
                            f"was built), with no error. Make it a list: `{name} = [{_short(ctx.code(gen)[1:-1])}]`.",
                            suggestion=f"bind `{name}` to a list comprehension and index it (`{name}[0]`)",
                        )
                    break
                if consumed is not None:
                    yield self.finding(
                        ctx,
                        reads[0],
                        f"`{name}` is a generator (line {ctx.line(gen)}), and line {ctx.line(consumed)} already read "
                        f"it to its end (`{_short(ctx.code(consumed))}`): it yields nothing here, so whatever this "
                        "line places over its devices places nothing, with no error. Make it a list: "
                        f"`{name} = [{_short(ctx.code(gen)[1:-1])}]`.",
                        suggestion=f"bind `{name}` to a list comprehension instead of a generator expression",
                    )
                    break
                consumed = next((c for r in reads if (c := _consumer_of(later, r)) is not None), None)
                if consumed is None:
                    break  # read some other way first (passed to a function that may keep it): not followed


def _generator_of_devices(stmt: cst.CSTNode) -> tuple[str | None, cst.GeneratorExp | None]:
    """(`devices`, the generator) for `devices = (torch.device("cuda", i) for i in ...)`."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None, None
    assign = stmt.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None, None
    target, value = assign.targets[0].target, assign.value
    if not isinstance(target, cst.Name) or not isinstance(value, cst.GeneratorExp):
        return None, None
    made = value.elt
    says_device = any(
        (isinstance(n, cst.Name) and any(w in n.value.lower() for w in _DEVICE_WORDS))
        or (isinstance(n, cst.SimpleString) and "cuda" in n.value)
        or (isinstance(n, cst.Attribute) and n.attr.value == "device")
        for n in walk(made)
    )
    return (target.value, value) if says_device else (None, None)


_ORDINALS = {2: "second", 3: "third", 4: "fourth"}


def _takes_one(stmt: cst.CSTNode, name: str) -> cst.Call | None:
    """`next(devices)` or `next(iter(devices))` in `stmt` (without a default: the generator's next device)."""
    for n in walk(stmt):
        if isinstance(n, cst.Call) and dotted(n.func) == "next" and len(n.args) == 1:
            arg = n.args[0].value
            if isinstance(arg, cst.Call) and dotted(arg.func) == "iter" and len(arg.args) == 1:
                arg = arg.args[0].value
            if isinstance(arg, cst.Name) and arg.value == name:
                return n
    return None


def _bound_by(stmt: cst.CSTNode) -> set[str]:
    names: set[str] = set()
    for n in walk(stmt):
        for t in assigned(n):
            names.update(target_names(t))
        if isinstance(n, (cst.For, cst.CompFor)):
            names.update(target_names(n.target))
    return names


def _consumer_of(stmt: cst.CSTNode, read: cst.Name) -> cst.CSTNode | None:
    """The expression of `stmt` that reads `read` to its end: a `for` over it, a comprehension over it, `list(...)`,
    `", ".join(...)`, or a generator over it that one of these reads; None when the name is read otherwise."""
    for n in walk(stmt):
        if isinstance(n, cst.For) and n.iter is read:
            return n.iter
        if (
            isinstance(n, cst.For)
            and isinstance(n.iter, cst.Call)
            and dotted(n.iter.func) in _LAZY
            and any(a.value is read for a in n.iter.args)
        ):
            return n.iter
        if isinstance(n, (cst.ListComp, cst.SetComp, cst.DictComp)) and n.for_in.iter is read:
            return n
        if isinstance(n, cst.Call) and n.args and any(a.value is read for a in n.args):
            if dotted(n.func) in _CONSUMERS or (isinstance(n.func, cst.Attribute) and n.func.attr.value == "join"):
                return n
        if isinstance(n, cst.Call) and n.args and isinstance(n.args[0].value, cst.GeneratorExp):
            inner = n.args[0].value
            if inner.for_in.iter is read and (
                dotted(n.func) in _CONSUMERS or (isinstance(n.func, cst.Attribute) and n.func.attr.value == "join")
            ):
                return n
    return None


def _short(code: str, limit: int = 60) -> str:
    return code if len(code) <= limit else code[: limit - 3] + "..."
