"""MP016: a tensor moved at a larger size than the data it carries needs: enlarged (`.expand()`,
`.repeat()`) before the move instead of after it, or reduced to one value (`.sum()`, `.all()`) right
after the move instead of before it."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.describe import moved_tensor
from mpcheck.devices.events import OversizedMove, Transfer
from mpcheck.devices.torchapi import ENLARGING_FUNCTIONS
from mpcheck.devices.values import distinct, show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.mp011_repeated_transfer import certainly_small, repeats
from mpcheck.rules.words import FLOW_WORDS


class OversizedTransfer(Rule):
    code = "MP016"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        # A move MP011 reports (the same unchanging tensor copied on every call) is its finding alone: its
        # fix, keep the data on the destination, also ends the enlarged copy.
        how_of = repeats(ctx)
        every_call = {id(t.node) for t in ctx.model.facts(Transfer) if how_of(t)}
        for ev in once_per_node(
            ctx.model.facts(OversizedMove),
            # (a reduced tensor whose size the code spells out small: its copy costs about one launch)
            lambda ev: bool(_crossed(ev)) and id(ev.node) not in every_call and not certainly_small(ev.made_at),
        ):
            srcs, dst = _crossed(ev), single(ev.dst)
            assert dst is not None
            moved = moved_tensor(ev.node)
            what = f"`{ctx.code(moved)}`" if moved is not None else "the tensor"
            ends = f"from {' and '.join(map(show, srcs))} to {show(dst)}"
            if ev.reduction is not None:
                message, suggestion = _reduced(ctx, ev.node, moved, ev.reduction, f"{what} is moved whole {ends}")
            elif ev.pooled is not None:
                fix = f"`{ctx.code(ev.pooled.func)}({ctx.code(moved)})` first, then the move" if moved else "pool first"
                message = (
                    f"{what} is moved whole {ends} only to be pooled there (`{ctx.code(ev.pooled)}`, line "
                    f"{ctx.line(ev.pooled)}): pooling gives fewer elements than it gets (a 2x2 output of a 16x16 map "
                    f"is 64 times fewer), and a pooling layer has no weights to keep it on {show(dst)}. Pool where the "
                    f"tensor is and move the result: {fix}."
                )
                suggestion = f"pool before the move: {fix}"
            elif ev.indexed is not None:
                message, suggestion = _indexed(ctx, ev.node, moved, ev.indexed, f"{what} is moved whole {ends}")
            elif ev.enlarged is not None:
                message, suggestion = _enlarged(ctx, ev.enlarged, f"{what} is moved {ends}", dst)
            else:
                continue
            yield self.finding(ctx, ev.node, message, devices=[*srcs, dst], suggestion=suggestion)


def _reduced(
    ctx: FileContext, move: cst.CSTNode, moved: cst.BaseExpression | None, reduction: cst.Call, subject: str
) -> tuple[str, str]:
    """The message and fix of a move reduced right after: the same chain with the move last. A reduction made
    elsewhere (in a helper given the moved tensor, or after steps of its own) is named with its line."""
    steps = _steps_after(reduction, move)
    if steps is None:
        where = f"`{_short(ctx.code(reduction))}`, line {ctx.line(reduction)}"
        return (
            f"{subject} only to be reduced to one value there ({where}), computed from it alone: the link "
            "carries every element for one. Compute that value where the tensor is and move the result.",
            "reduce before the move: compute the value on the tensor's own device, then move it",
        )
    fix = _move_last(ctx, move, moved, steps)
    return (
        f"{subject} only to be reduced to one value there (`{steps}`): the link carries every element for one. "
        f"Reduce it where it is and move the result: {fix}.",
        f"reduce before the move: {fix}",
    )


def _short(code: str) -> str:
    return code if len(code) <= 60 else f"...{code[-57:]}"


def _move_last(ctx: FileContext, move: cst.CSTNode, moved: cst.BaseExpression | None, steps: str) -> str:
    """The fix that does `steps` (`.isfinite().all()`, `[idx]`) where the tensor is, then the move."""
    if moved is not None and len(ctx.code(moved)) < 80:
        return f"`{ctx.code(moved)}{steps}{ctx.code(move)[len(ctx.code(moved)) :]}`"
    return f"`...{steps}` first, then the move"


def _indexed(
    ctx: FileContext, move: cst.CSTNode, moved: cst.BaseExpression | None, indexed: cst.Subscript, subject: str
) -> tuple[str, str]:
    """The message and fix of a move indexed right after: index where it is, then move the rows."""
    index = ctx.code(indexed)[len(ctx.code(indexed.value)) :]
    fix = _move_last(ctx, move, moved, _index_at_source(ctx, indexed, index))
    return (
        f"{subject} only to be indexed there (`{index}`): the link carries all of it for the part the index keeps. "
        f"Index it where it is and move that part: {fix}.",
        f"index before the move: {fix}",
    )


def _index_at_source(ctx: FileContext, indexed: cst.Subscript, index: str) -> str:
    """The index as it reads where the tensor is: `[idx]` for `[idx.to(dev)]`, an index moved beside the tensor."""
    if len(indexed.slice) == 1 and isinstance(indexed.slice[0].slice, cst.Index):
        value = indexed.slice[0].slice.value
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in ("to", "cuda")
        ):
            return f"[{ctx.code(value.func.value)}]"
    return index


def _enlarged(ctx: FileContext, enlarging: cst.Call, subject: str, dst: str) -> tuple[str, str]:
    """The message and fix of a move of an enlarged tensor: move first, enlarge on the destination."""
    func = enlarging.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    line = ctx.line(enlarging)
    if _one_hot(enlarging):
        call = ctx.code(enlarging.func)
        return (
            f"{subject} after `{call}()` encoded it (line {line}): each id crosses as a row of one value per class, "
            f"where the ids alone would do. Move the ids and call `{call}()` on {show(dst)}.",
            f"move the ids before `{call}()` at line {line}, and encode them on {dst}",
        )
    if name in ENLARGING_FUNCTIONS:
        call = ctx.code(enlarging.func)
        did = "unfolded it into patches" if name == "unfold" else "upsampled it"
        return (
            f"{subject} after `{call}()` {did} (line {line}): it crosses at its enlarged size, where the "
            f"tensor it was made from would do. Move that tensor and call `{call}()` on {show(dst)}.",
            f"move the input of `{call}()` at line {line}, and call `{call}()` on {dst}",
        )
    how = (
        "it crosses at its expanded size (a copy writes out every repeated element)"
        if name in ("expand", "expand_as", "broadcast_to")
        else "the repeated copies cross, where the data itself would do"
    )
    written = " (add `.contiguous()` after it where the result is written in place)" if name == "expand" else ""
    return (
        f"{subject} after `.{name}()` enlarged it (line {line}): {how}. Move it before `.{name}()` and enlarge it "
        f"on {show(dst)}, and the link carries only the data{written}.",
        f"move the tensor before `.{name}()` at line {line}, and call `.{name}()` on {dst}",
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
    # (a one-hot from the host: per-sample labels encoded are a few KiB, a copy's fixed cost whatever the encoding,
    # and the linter cannot tell them from a batch of encoded sequences)
    from_host = ev.reduction is None and not ev.constant and not _one_hot(ev.enlarged)
    return sorted(d for d in ev.src if (_gpu(d) or (from_host and d == "cpu")) and distinct(d, dst))


def _one_hot(enlarging: object) -> bool:
    """`F.one_hot(...)` / `one_hot(...)`: ids encoded, not a tensor expanded or repeated."""
    if not isinstance(enlarging, cst.Call):
        return False
    func = enlarging.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return name == "one_hot"


def _gpu(dev: str) -> bool:
    return dev.startswith("cuda:")


def _steps_after(reduction: cst.Call, move: cst.CSTNode) -> str | None:
    """`.isfinite().all()`: the argument-less calls from just after `move` up to `reduction`, as written; None
    when the reduction is not such a chain on the move itself."""
    names = []
    node: cst.BaseExpression = reduction
    while isinstance(node, cst.Call) and node is not move and isinstance(node.func, cst.Attribute) and not node.args:
        names.append(f".{node.func.attr.value}()")
        node = node.func.value
    return "".join(reversed(names)) if node is move else None
