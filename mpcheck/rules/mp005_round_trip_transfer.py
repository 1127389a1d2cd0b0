"""MP005: a tensor moved from device A to B and back to A with no work on B in between, or from one GPU
through the host to another GPU (a detour where a direct copy would do)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.describe import root_name, value_text, via_text
from mpcheck.devices.events import Transfer
from mpcheck.devices.values import distinct, show, single
from mpcheck.devices.walk import assigned, walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.host_work import copy_worked_on
from mpcheck.rules.words import FLOW_WORDS


class RoundTripTransfer(Rule):
    code = "MP005"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        transfers = ctx.model.facts(Transfer)
        # (each a walk of the file, for the few moves to a GPU of a copy the host read: asked once per move)
        tests = {id(ev): test for ev in transfers if (test := _checked_on_host(ctx, ev)) is not None}
        worked_copies: set[int] = set()
        # the copies of GPU data to the host, for what the host computes from one and sends back (host_work.py)
        aways = [
            ev for ev in transfers if single(ev.devs) == "cpu" and (single(ev.value.devs) or "").startswith("cuda:")
        ]
        for ev in once_per_node(
            transfers,
            lambda ev: (
                _host_detour(ev)
                or _gpu_detour(ev)
                or (_round_trip(ev) and not _starts_a_loop(ctx, ev.value.moved_at))
                or id(ev) in tests
                or _host_work(ctx, ev) is not None
                or copy_worked_on(ctx, ev, aways) is not None
            ),
        ):
            v = ev.value
            home, there = single(v.moved_from), single(v.devs)  # home -> there -> home
            call = ev.node
            recv = call.func.value if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) else None
            # The variable the round trip starts from (`de` in `de.cpu().cuda(1)`), else the moved expression.
            root = root_name(recv, ctx.imported_names)
            name = f"`{root or value_text(ctx, recv, v)}`" if recv is not None or v.label else "A tensor"
            first = ctx.line(v.moved_at)
            away = _host_work(ctx, ev) or copy_worked_on(ctx, ev, aways)
            if away is not None:
                if id(away) not in worked_copies:  # (the mean and the std of one copy, sent back together)
                    worked_copies.add(id(away))
                    yield _host_work_sent_back(self, ctx, ev, away)
                continue
            check = tests.get(id(ev))
            if check is not None:
                dst = single(ev.devs)
                onward = "back" if dst == home else "on"
                yield self.finding(
                    ctx,
                    ev.node,
                    f"{name} is moved from {show(home)} to the CPU (line {first}) and {onward} to {show(dst)} here, and on "
                    f"the CPU it is only checked (`{ctx.code(check)}`, line {ctx.line(check)}): the whole tensor "
                    f"crosses twice for a test that can run where it is. Run the check on {show(home)} (one "
                    f"number comes back) and move {name} straight to {show(dst)}.",
                    devices=[home, dst],
                    suggestion=f"drop the copy to the CPU at line {first}; test the tensor on {home}",
                )
                continue
            if _host_detour(ev):
                dst = single(ev.devs)
                yield self.finding(
                    ctx,
                    ev.node,
                    f"{name} is moved from {show(home)} to the CPU (line {first}) and on to {show(dst)} here, with no "
                    f"work on the CPU in between: two copies through host memory where one direct copy "
                    f"{show(home)} -> {show(dst)} would do (peer to peer, over NVLink where there is one). Move it "
                    f"straight to {show(dst)} and drop the copy to the CPU.",
                    devices=[home, dst],
                    suggestion=f"drop the copy to the CPU at line {first} and move the tensor straight to {dst}",
                )
                continue
            if _gpu_detour(ev):
                dst = single(ev.devs)
                yield self.finding(
                    ctx,
                    ev.node,
                    f"{name} is moved from {show(home)} to {show(there)} (line {first}) and on to {show(dst)} here"
                    f"{via_text(ctx, ev.via)}, with nothing reading it on {show(there)} in between: it only passes "
                    f"through, two copies where one would do. Move it once, straight to where it is used, and "
                    f"drop the copy to {show(there)}.",
                    devices=[home, there, dst],
                    suggestion=f"move it once, to the device that reads it; drop the copy at line {first}",
                )
                continue
            if home == "cpu" and _in_bulk_move(ctx, v.moved_at):
                continue  # a batch's every tensor moved at once; this one wanted back on the host (see below)
            yield self.finding(
                ctx,
                ev.node,
                f"{name} is moved from {show(home)} to {show(there)} (line {first}) and back here"
                f"{via_text(ctx, ev.via)}, with no work on {show(there)} in between: this copy brings back data "
                f"that was on {show(home)} already. Use the tensor that is on {show(home)} here (keep it in a "
                f"variable before line {first}), and drop the transfer at line {first} too if nothing else uses "
                f"the copy on {show(there)}.",
                devices=[home, there],
                suggestion=f"use the tensor from before line {first} here; drop line {first}'s transfer if "
                "nothing else needs its copy",
            )


def _in_bulk_move(ctx: FileContext, moved_at: cst.CSTNode | None) -> bool:
    """Was the first move one item of a comprehension that moves a whole batch (`{k: v.to(dev) for k, v in
    batch.items()}`)? A tensor the code then needs on the host (`pack_padded_sequence`'s lengths, `.cpu()`)
    made the trip because the batch mover moves everything: its fix is in the mover, and the copy is the
    batch's metadata, a few bytes. Not reported."""
    if moved_at is None:
        return False
    comps = (cst.DictComp, cst.ListComp, cst.SetComp, cst.GeneratorExp)
    return any(isinstance(n, comps) and any(m is moved_at for m in walk(n)) for n in walk(ctx.module))


def _round_trip(ev: Transfer) -> bool:
    """A transfer back to the one device the value came from, with no work done on the device between."""
    v = ev.value
    back, there, before = single(ev.devs), single(v.devs), single(v.moved_from)
    return (
        not v.worked
        and v.moved_at is not None
        and None not in (back, there, before)
        and back == before
        and there != back
    )


def _host_work(ctx: FileContext, ev: Transfer) -> cst.CSTNode | None:
    """The `.cpu()` of a GPU tensor computed on, on the host, before this move sends the result to a GPU
    (Transfer.host_work_of), when that line is this file's."""
    away = ev.host_work_of
    return away if away is not None and ctx.owns(away) else None


def _host_work_sent_back(rule: Rule, ctx: FileContext, ev: Transfer, away: cst.CSTNode) -> Finding:
    """`top = scores.cpu().topk(k)`, then `top.indices.to(dev)`: work the GPU does as well, done on the host
    between two copies."""
    src = single(ev.devs) if ev.value.reducible_move is None else single(ev.value.reducible_move[1])
    dst = single(ev.devs)
    moved = ctx.code(away.func.value) if isinstance(away, cst.Call) and isinstance(away.func, cst.Attribute) else "it"
    return rule.finding(
        ctx,
        ev.node,
        f"`{ctx.code(ev.node)}` sends to {show(dst)} what the host computed only from data copied off a GPU "
        f"(`{moved}`, which line {ctx.line(away)} copied from {show(src)} to the CPU): the torch ops between run on "
        f"the GPU as well. Run them on {show(src)} and drop the copies through the host (or move only their "
        f"small result).",
        devices=[d for d in (src, "cpu", dst) if d],
        suggestion=f"drop the copy to the CPU at line {ctx.line(away)}; compute on {src}",
    )


def _checked_on_host(ctx: FileContext, ev: Transfer) -> cst.CSTNode | None:
    """The first test of a value brought from a GPU to the host (`h = h.cpu()`) and sent back to a GPU from there
    (`h = h.to(dev1)`) by a later statement of the same block, when the statements between read it only in
    tests (`if not torch.isfinite(h).all(): raise ...`, `assert`, what a `raise` or `print` says): the host
    did no work that the GPU could not do on the spot. None otherwise."""
    v = ev.value
    dst, there, before = single(ev.devs), single(v.devs), single(v.moved_from)
    if not (v.worked and there == "cpu" and dst and before and _gpu(dst) and _gpu(before)):
        return None
    away = v.moved_at
    if away is None or not ctx.owns(away) or not ctx.owns(ev.node):
        return None
    found = _statements_of_one_block(ctx, away, ev.node)
    if found is None:
        return None
    name, between, last = found
    checks: list[cst.CSTNode] = []
    for stmt in between:
        if any(isinstance(t, cst.Name) and t.value == name for n in walk(stmt) for t in assigned(n)):
            return None  # rebound: what goes back may be something else
        reads = {id(n) for n in walk(stmt) if isinstance(n, cst.Name) and n.value == name}
        tests = [(t, {id(n) for n in walk(t)}) for t in _tests_in(stmt)]
        if reads - {i for _, inside in tests for i in inside}:
            return None  # read as data: work on the host
        checks.extend(t for t, inside in tests if reads & inside)
    if not checks:
        return None
    sent = {id(n) for n in walk(ev.node)}
    targets = {id(n) for a in walk(last) for t in assigned(a) for n in walk(t)}
    if any(isinstance(n, cst.Name) and n.value == name and id(n) not in sent | targets for n in walk(last)):
        return None  # the host copy is read there too
    return checks[0]


def _statements_of_one_block(
    ctx: FileContext, away: cst.CSTNode, back: cst.CSTNode
) -> tuple[str, list[cst.BaseStatement], cst.BaseStatement] | None:
    """(name, the statements between, the statement of `back`) where `name = <...away...>` and the statement
    holding `back` are statements of one block, the first before the second."""
    for block in walk(ctx.module):
        if not isinstance(block, cst.IndentedBlock):
            continue
        body = list(block.body)
        first = next((i for i, s in enumerate(body) if any(n is away for n in walk(s))), None)
        if first is None:
            continue
        stmt = body[first]
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue  # (a block around the one that holds it)
        if not (
            len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Assign)
            and len(stmt.body[0].targets) == 1
            and isinstance(stmt.body[0].targets[0].target, cst.Name)
        ):
            return None
        name = stmt.body[0].targets[0].target.value
        last = next((i for i in range(first + 1, len(body)) if any(n is back for n in walk(body[i]))), None)
        return None if last is None else (name, body[first + 1 : last], body[last])
    return None


def _tests_in(stmt: cst.CSTNode) -> list[cst.CSTNode]:
    """The parts of `stmt` that only test or report a value: `if` and `assert` tests, `raise` statements,
    `print(...)` calls."""
    out: list[cst.CSTNode] = []
    for n in walk(stmt):
        if isinstance(n, (cst.If, cst.Assert)):
            out.append(n.test)
        elif isinstance(n, cst.Raise):
            out.append(n)
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "print":
            out.append(n)
    return out


def _host_detour(ev: Transfer) -> bool:
    """A transfer to a GPU of a value that came idle from another GPU through the CPU
    (`h.cpu().to("cuda:1")` for an `h` on cuda:0): the CPU copy is a detour."""
    v = ev.value
    dst, there, before = single(ev.devs), single(v.devs), single(v.moved_from)
    return (
        not v.worked
        and v.moved_at is not None
        and there == "cpu"
        and dst is not None
        and before is not None
        and _gpu(dst)
        and _gpu(before)
        and distinct(dst, before)
    )


def _gpu_detour(ev: Transfer) -> bool:
    """A transfer to a third device of a value that arrived idle on a GPU by the same transfer, a pass of a loop
    earlier (`labels = labels.to(dev)` at each stage of a pipeline, for labels only the last stage reads): it
    passed through that GPU for nothing. Only by the same line: a copy made by another line may be read after
    this one (`proposal = draft(...).to(d1)`, sent on by the target's forward, then compared on d1), and then
    it was needed."""
    v = ev.value
    dst, there, before = single(ev.devs), single(v.devs), single(v.moved_from)
    # From a GPU only: a batch moved whole to the first stage's GPU, whose labels then follow the logits
    # (`labels.to(logits.device)`), is the common way to write a training step, and the labels are small.
    return (
        not v.worked
        and v.moved_at is ev.node
        and _named_gpu(there)
        and _named_gpu(before)
        and dst is not None
        and (dst == "cpu" or _named_gpu(dst))
        and len({dst, there, before}) == 3
    )


def _named_gpu(dev: str | None) -> bool:
    """A GPU the code names (`cuda:1`), not one that stands for a value not known (`sym:...`)."""
    return dev is not None and dev.startswith("cuda:")


def _gpu(dev: str) -> bool:
    return dev == "cuda" or dev.startswith("cuda:")


def _starts_a_loop(ctx: FileContext, away: cst.CSTNode | None) -> bool:
    """The copy moved away at `away` is bound to a name (`seqs = prompt.repeat_interleave(k).to(d1)`) that
    a loop after it, where the name is first used, binds again (`seqs = torch.cat([seqs[rows], tok])`, made
    on d1): the round trip happens on the loop's first pass only, and the copy is how the loop starts."""
    if away is None or not ctx.owns(away):
        return False
    line, where = ctx.line(away), ctx.function_name(away)
    nodes = list(walk(ctx.module))
    names = {
        t.target.value
        for n in nodes
        if isinstance(n, cst.Assign) and ctx.span(n)[0][0] <= line <= ctx.span(n)[1][0]
        for t in n.targets
        if isinstance(t.target, cst.Name)
    }
    for name in names:
        loops = sorted(
            (ctx.line(n), n)
            for n in nodes
            if isinstance(n, (cst.For, cst.While)) and ctx.line(n) > line and ctx.function_name(n) == where
        )
        for start, loop in loops:
            used_before = any(
                isinstance(n, cst.Name)
                and n.value == name
                and line < ctx.line(n) < start
                and ctx.function_name(n) == where
                for n in nodes
            )
            if used_before:
                break
            if any(isinstance(n, cst.Name) and n.value == name for a in walk(loop) for n in assigned(a)):
                return True
    return False
