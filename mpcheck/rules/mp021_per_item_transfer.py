"""MP021 (the linter's form): a loop over a tensor's rows that moves each row to another device, one copy per row;
a loop that moves each pass's tensor to another GPU only to collect it in a list stacked after the loop."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import Transfer
from mpcheck.devices.names import dotted
from mpcheck.devices.values import conflict, show, single
from mpcheck.devices.walk import assigned, target_names, walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class PerItemTransfer(Rule):
    code = "MP021"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        yield from self._rows_moved(ctx)
        yield from self._collected_then_gathered(ctx)

    def _rows_moved(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in once_per_node(ctx.model.facts(Transfer), lambda ev: ev.rows_of is not None):
            walked = ev.rows_of
            src, dst = single(ev.value.devs), single(ev.devs)
            if walked is None or not ctx.owns(walked) or src is None or dst is None:
                continue
            if src.startswith("sym:") or dst.startswith("sym:") or not conflict(ev.value.devs, ev.devs):
                continue  # to where it is: no copy
            if not (dst.startswith("cuda") or src.startswith("cuda")):
                continue
            node = ev.node
            row = (
                ctx.code(node.func.value)
                if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                else "it"
            )
            whole = ctx.code(walked)
            piece = "row"
            if isinstance(walked, cst.Call) and isinstance(walked.func, cst.Attribute):
                # `feats.split(sizes)` walked by a comprehension that only moves each chunk: one copy of `feats`
                if walked.func.attr.value in ("split", "chunk", "tensor_split", "unbind"):
                    whole, piece = ctx.code(walked.func.value), "chunk"
            # (from a GPU to the host each copy is also a wait: the host reads the row as soon as it lands)
            cost = "each paying a copy's fixed cost" if dst.startswith("cuda") else "each a copy the host waits for"
            yield self.finding(
                ctx,
                node,
                f"`{row}` is a {piece} of `{whole}` (line {ctx.line(walked)}), moved from {show(src)} to {show(dst)} on "
                f"every pass of the loop over its {piece}s: one copy per {piece}, {cost}, where one copy of `{whole}` "
                f"before the loop would do. Move it once and walk the copy (`{whole}.to(...)` before the loop).",
                devices=[src, dst],
                suggestion=f"move `{whole}` to {dst} once, before the loop",
            )

    def _collected_then_gathered(self, ctx: FileContext) -> Iterator[Finding]:
        """`outs.append(h.to(dev))` on every pass of a loop, `torch.stack(outs)` after it: one copy per pass."""
        for ev in once_per_node(ctx.model.facts(Transfer)):
            src, dst = single(ev.value.devs), single(ev.devs)
            if src is None or dst is None or src.startswith("sym:") or dst.startswith("sym:"):
                continue
            # To a GPU only: moving each pass's result to the host is how evaluation loops keep GPU memory
            # flat (`preds.append(out.cpu())`), a trade the linter cannot weigh without sizes.
            if not dst.startswith("cuda") or not conflict(ev.value.devs, ev.devs) or not ctx.owns(ev.node):
                continue
            found = _appended_then_gathered(ctx, ev.node)
            if found is None:
                continue
            name, gather = found
            node = ev.node
            item = (
                ctx.code(node.func.value)
                if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                else "it"
            )
            yield self.finding(
                ctx,
                node,
                f"`{item}` is moved from {show(src)} to {show(dst)} on every pass of the loop only to be collected in "
                f"`{name}`, which line {ctx.line(gather)} gathers (`{ctx.code(gather)}`): one copy per pass, each "
                f"paying a copy's fixed cost, where gathering on {show(src)} and moving the result once would make "
                f"one. Append `{item}` as it is and move the gathered tensor once.",
                devices=[src, dst],
                suggestion=f"append `{item}` unmoved and move the result of line {ctx.line(gather)} to {dst} once",
            )


_GATHERS = frozenset({"torch.stack", "torch.cat", "torch.concat", "torch.concatenate", "torch.hstack", "torch.vstack"})


def _appended_then_gathered(ctx: FileContext, move: cst.CSTNode) -> tuple[str, cst.Call] | None:
    """(`outs`, the gather) when `move` is the whole argument of `outs.append(...)` inside a loop, `outs` is an
    empty list made before that loop, read in the loop only to append, and stacked or concatenated (as a whole)
    after it in the same function, and what is moved is the loop's carried state (`h`, the hidden state of a
    recurrence, read in the pass before the pass rebinds it); else None.

    A recurrence's per-step state is one step of a batch: small, so each copy costs about the fixed cost of a
    copy. A loop over micro-batches moving each stage output is left alone: its few pieces are large, and their
    copies cost about what one copy of the whole would."""
    for func in walk(ctx.module):
        if not isinstance(func, cst.FunctionDef) or not any(n is move for n in walk(func.body)):
            continue
        loops = [
            n for n in walk(func.body) if isinstance(n, (cst.For, cst.While)) and any(m is move for m in walk(n.body))
        ]
        appends = [
            n
            for n in walk(func.body)
            if isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value == "append"
            and isinstance(n.func.value, cst.Name)
            and len(n.args) == 1
            and n.args[0].value is move
        ]
        if not loops or len(appends) != 1:
            return None
        name = appends[0].func.value.value  # type: ignore[attr-defined]
        # the innermost loop that does not make the list anew
        inner = [lp for lp in loops if not any(_makes_empty_list(n, name) for n in walk(lp.body))]
        if not inner:
            return None
        loop = inner[-1]
        if not any(_makes_empty_list(n, name) for n in walk(func.body)):
            return None
        if any(isinstance(n, cst.Name) and n.value == name and not _is_append_receiver(loop, n) for n in walk(loop)):
            return None  # read in the loop (`outs[-1]`): each item is used where it went
        item = move.func.value if isinstance(move, cst.Call) and isinstance(move.func, cst.Attribute) else None
        if not (isinstance(item, cst.Name) and _carried(ctx, loop, item.value)):
            return None
        end = ctx.span(loop)[1][0]
        for n in walk(func.body):
            if (
                isinstance(n, cst.Call)
                and dotted(n.func) in _GATHERS
                and n.args
                and isinstance(n.args[0].value, cst.Name)
                and n.args[0].value.value == name
                and ctx.line(n) > end
            ):
                return name, n
        return None
    return None


def _makes_empty_list(node: cst.CSTNode, name: str) -> bool:
    """`name = []` (or `name = list()`)."""
    if not isinstance(node, cst.Assign) or len(node.targets) != 1:
        return False
    target, value = node.targets[0].target, node.value
    if not (isinstance(target, cst.Name) and target.value == name):
        return False
    empty_list = isinstance(value, cst.List) and not value.elements
    return empty_list or (isinstance(value, cst.Call) and dotted(value.func) == "list" and not value.args)


def _is_append_receiver(loop: cst.CSTNode, name: cst.Name) -> bool:
    """Is this occurrence of the list's name the receiver of an `.append(...)` call in `loop`?"""
    return any(
        isinstance(n, cst.Call)
        and isinstance(n.func, cst.Attribute)
        and n.func.value is name
        and n.func.attr.value == "append"
        for n in walk(loop)
    )


def _carried(ctx: FileContext, loop: cst.CSTNode, name: str) -> bool:
    """Is `name` carried from pass to pass of `loop`: rebound in its body, and read there no later than the line
    of its first rebinding (`h = cell(x[:, t], h)`, `h_new = cell(x, h)` then `h = mix(h, h_new)`)?"""
    body = loop.body if isinstance(loop, (cst.For, cst.While)) else loop
    binds = [ctx.line(n) for n in walk(body) for t in assigned(n) if name in target_names(t)]
    if not binds:
        return False
    targets = {id(x) for n in walk(body) for t in assigned(n) for x in walk(t)}
    first = min(binds)
    return any(
        isinstance(n, cst.Name) and n.value == name and id(n) not in targets and ctx.line(n) <= first
        for n in walk(body)
    )
