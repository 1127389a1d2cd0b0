"""MP028: a tensor copied off its GPU on every pass of a loop, while only a branch taken every N-th pass reads the
copy (`preview = out.detach().cpu()` each step, logged when `step % LOG_EVERY == 0`): the other passes' copies
cross the link, and wait for the GPU, for nothing.

The loop body binds a name to a move (`.cpu()`, `.to(dev)`, `.cuda(k)`) of a tensor on a known GPU to another known
device, and every read of that name in the function is inside an `if` of the same loop body, after the move, whose
test is periodic (a `%`: `step % 10 == 0`) and does not read the copy. Moving the copy into the branch does the same
work on the passes that use it and none on the others. Device facts come from the device model (Transfer); the rest
is plain syntax.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst

from mpcheck.devices.events import Transfer
from mpcheck.devices.values import distinct, show, single
from mpcheck.devices.walk import is_periodic_test, scope_nodes, walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class CopiedEveryPassReadPeriodically(Rule):
    code = "MP028"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        moves = _moves_off_a_gpu(ctx)
        if not moves:
            return
        for scope in _scopes(ctx.module):
            for loop in _loops(scope):
                body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
                for i, stmt in enumerate(body):
                    bound = _bound_move(stmt, moves)
                    if bound is None:
                        continue
                    name, value, move, (src, dst) = bound
                    branch = _only_reader(scope, name, body[i + 1 :])
                    if branch is None:
                        continue
                    test = ctx.code(branch.test)
                    yield self.finding(
                        ctx,
                        move,
                        f"`{name}` is copied from {show(src)} to {show(dst)} on every pass of the loop at line "
                        f"{ctx.line(loop)}, but only the branch `if {test}:` (line {ctx.line(branch)}) reads it: on "
                        f"the other passes the copy crosses the link, and waits for the GPU, for nothing. Make the "
                        f"copy inside that branch.",
                        devices=[src, dst],
                        suggestion=f"move `{name} = {ctx.code(value)}` into `if {test}:`",
                    )


def _moves_off_a_gpu(ctx: FileContext) -> dict[int, tuple[str, str]]:
    """The moves whose source is one known GPU and whose destination is one other known device, by node id."""
    found: dict[int, tuple[str, str]] = {}
    for t in ctx.model.facts(Transfer):
        src, dst = single(t.value.devs), single(t.devs)
        if src is None or dst is None or not src.startswith("cuda:") or not distinct(src, dst):
            continue
        found.setdefault(id(t.node), (src, dst))
    return found


def _scopes(module: cst.Module) -> Iterator[cst.CSTNode]:
    """The module and every function in it: each reads its own names."""
    yield module
    for n in walk(module):
        if isinstance(n, cst.FunctionDef):
            yield n


def _loops(scope: cst.CSTNode) -> Iterator[cst.For | cst.While]:
    for n in scope_nodes(scope):
        if isinstance(n, (cst.For, cst.While)):
            yield n


def _bound_move(
    stmt: cst.BaseStatement, moves: dict[int, tuple[str, str]]
) -> tuple[str, cst.BaseExpression, cst.Call, tuple[str, str]] | None:
    """`name = <move>` (the move the whole value, or the first link of a chain of method calls on it:
    `x.detach().cpu().float()`), as one statement of the loop's body."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    assign = stmt.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if not isinstance(target, cst.Name):
        return None
    node: cst.BaseExpression = assign.value
    while isinstance(node, cst.Call):
        if id(node) in moves:
            return target.value, assign.value, node, moves[id(node)]
        if not isinstance(node.func, cst.Attribute):
            return None
        node = node.func.value
    return None


def _only_reader(scope: cst.CSTNode, name: str, after: Sequence[cst.BaseStatement]) -> cst.If | None:
    """The one `if` among the statements `after` the move whose body holds every other mention of `name` in the
    scope, when its test is periodic and does not read `name`; else None."""
    mentions = [n for n in scope_nodes(scope) if isinstance(n, cst.Name) and n.value == name]
    for stmt in after:
        if not isinstance(stmt, cst.If) or not is_periodic_test(stmt.test):
            continue
        inside = {id(n) for n in walk(stmt.body) if isinstance(n, cst.Name) and n.value == name}
        if not inside:
            continue
        # The move's own target is the one mention outside; any other (a read after the loop, in an `else`, an
        # earlier pass's value read before the move, a second binding) means the copy is needed elsewhere too.
        return stmt if len(mentions) == len(inside) + 1 else None
    return None
