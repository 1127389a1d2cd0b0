"""MP016: a tensor moved at a larger size than the data it carries needs: enlarged (`.expand()`,
`.repeat()`) before the move instead of after it, or reduced to one value (`.sum()`, `.all()`) right
after the move instead of before it."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import OversizedMove, Transfer
from mpcheck.devices.values import distinct, show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.mp011_repeated_transfer import repeated
from mpcheck.rules.words import FLOW_WORDS


class OversizedTransfer(Rule):
    code = "MP016"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        # A move MP011 reports (the same unchanging tensor copied on every call) is its finding alone: its
        # fix, keep the data on the destination, also ends the enlarged copy.
        every_call = {id(t.node) for t in ctx.model.facts(Transfer) if repeated(t)}
        for ev in once_per_node(
            ctx.model.facts(OversizedMove), lambda ev: bool(_crossed(ev)) and id(ev.node) not in every_call
        ):
            srcs, dst = _crossed(ev), single(ev.dst)
            assert dst is not None
            ends = f"from {' and '.join(map(show, srcs))} to {show(dst)}"
            moved = _receiver(ev.node)
            what = f"`{ctx.code(moved)}`" if moved is not None else "the tensor"
            if ev.reduction is not None:
                yield self._reduced(ctx, ev, ev.reduction, what, ends, srcs, dst)
            elif ev.enlarged is not None:
                yield self._enlarged(ctx, ev, ev.enlarged, what, ends, srcs, dst)

    def _reduced(
        self, ctx: FileContext, ev: OversizedMove, reduction: cst.Call, what: str, ends: str, srcs: list[str], dst: str
    ) -> Finding:
        steps = _steps_after(reduction, ev.node)
        moved = _receiver(ev.node)
        fix = (
            f"`{ctx.code(moved)}{steps}{ctx.code(ev.node)[len(ctx.code(moved)) :]}`"
            if moved is not None and len(ctx.code(moved)) < 80
            else f"`...{steps}` first, then the move"
        )
        return self.finding(
            ctx,
            ev.node,
            f"{what} is moved whole {ends} only to be reduced to one value there (`{steps}`): the link carries "
            f"every element for one. Reduce it where it is and move the result: {fix}.",
            devices=[*srcs, dst],
            suggestion=f"reduce before the move: {fix}",
        )

    def _enlarged(
        self,
        ctx: FileContext,
        ev: OversizedMove,
        enlarging: cst.Call,
        what: str,
        ends: str,
        srcs: list[str],
        dst: str,
    ) -> Finding:
        name = enlarging.func.attr.value if isinstance(enlarging.func, cst.Attribute) else "expand"
        how = (
            "it crosses at its expanded size (a copy writes out every repeated element)"
            if name in ("expand", "expand_as", "broadcast_to")
            else "the repeated copies cross, where the data itself would do"
        )
        line = ctx.line(enlarging)
        return self.finding(
            ctx,
            ev.node,
            f"{what} is moved {ends} after `.{name}()` enlarged it (line {line}): {how}. Move it before "
            f"`.{name}()` and enlarge it on {show(dst)}, and the link carries only the data"
            + (" (add `.contiguous()` after it where the result is written in place)." if name == "expand" else "."),
            devices=[*srcs, dst],
            suggestion=f"move the tensor before `.{name}()` at line {line}, and call `.{name}()` on {dst}",
        )


def _crossed(ev: OversizedMove) -> list[str]:
    """The known devices the moved value leaves for another known device ([] for none). The linter does
    not know sizes: between GPUs it reports what crosses the link; from the host only data enlarged to a
    batch's size (a WGAN-GP `alpha` expanded to the images, then moved), not a constant enlarged there
    (an index or a 3x3 matrix repeated per sample: a few bytes, mostly), nor a reduction to the host (a
    batch's counts, a logged value)."""
    dst = single(ev.dst)
    if dst is None or ev.src is None or (ev.reduction is not None and not _gpu(dst)):
        return []
    from_host = ev.reduction is None and not ev.constant
    return sorted(d for d in ev.src if (_gpu(d) or (from_host and d == "cpu")) and distinct(d, dst))


def _gpu(dev: str) -> bool:
    return dev.startswith("cuda:")


def _receiver(node: cst.CSTNode) -> cst.BaseExpression | None:
    """`x` in `x.to(d)`."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return node.func.value
    return None


def _steps_after(reduction: cst.Call, move: cst.CSTNode) -> str:
    """`.isfinite().all()`: the calls from just after `move` up to `reduction`, as written."""
    names = []
    node: cst.BaseExpression = reduction
    while isinstance(node, cst.Call) and node is not move and isinstance(node.func, cst.Attribute):
        names.append(f".{node.func.attr.value}()")
        node = node.func.value
    return "".join(reversed(names))
