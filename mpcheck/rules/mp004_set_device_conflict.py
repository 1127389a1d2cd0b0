"""MP004: set_device / `with torch.cuda.device(...)` followed by an index-less placement in split-model code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeGuard

import libcst as cst

from mpcheck.devices.describe import split_desc, split_devices
from mpcheck.devices.events import (
    EntryPointRun,
    IndexlessBesideFirstGpu,
    IndexlessPlacement,
    Mismatch,
    SplitBuiltAfterSetDevice,
    UnenteredDeviceContext,
)
from mpcheck.devices.names import dotted
from mpcheck.devices.values import device_literal, show, single
from mpcheck.devices.walk import walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.built_under_cuda_device import moved_to_current_after_block, unplaced_in_cuda_device_blocks
from mpcheck.rules.context import FileContext
from mpcheck.rules.made_on_current import made_on_current, stage_placed_on_current


class SetDeviceConflict(Rule):
    code = "MP004"
    needs = ("set_device", "cuda.device", "cuda", "set_default")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for unentered in once_per_node(ctx.model.facts(UnenteredDeviceContext)):
            call = ctx.code(unentered.node)
            yield self.finding(
                ctx,
                unentered.node,
                f"`{call}` on a line of its own does nothing: it builds a context manager that is never entered, "
                "so the current CUDA device stays what it was, and the index-less placements after it (`.cuda()`, "
                f"`'cuda'`) land there. Enter it, `with {call}:` around them, or name each device (`.cuda(i)`).",
                suggestion=f"write `with {call}:` around the code it should apply to",
            )
        reported: set[int] = set()
        followed = ctx.tensors_placed_after_set_device
        for ev in _indexless_in_split_code(ctx.model.facts(EntryPointRun), followed):
            if _set_just_before(ctx, ev.setdev, ev.node) or _after_stage_loop(ctx, ev.setdev, ev.node):
                continue
            reported.add(id(ev.node))
            setdev = ev.setdev
            dev = ev.dev
            lands = show(dev) if dev and dev != "cuda" else "whatever device it selects"
            yield self.finding(
                ctx,
                ev.node,
                f"`{ctx.code(ev.node)}` names no device index: after `{_what(ctx, setdev)}` at line "
                f"{ctx.line(setdev)} it lands on the current device ({lands}), in code that builds or runs a model "
                f"split over several devices. Name the device you mean: `.cuda(i)` / `.to('cuda:i')` / "
                f"torch.device('cuda', i).",
                devices=[dev] if dev else [],
                suggestion="write the device index explicitly",
            )
        for beside in once_per_node(ctx.model.facts(IndexlessBesideFirstGpu)):
            yield self.finding(
                ctx,
                beside.node,
                f"`{beside.setting}` is the index-less 'cuda': the current device, which is cuda:0 here (nothing "
                f"calls set_device), the GPU that `{beside.sibling_setting}` names for `self.{beside.sibling}`. "
                f"`self.{beside.attr}`, placed from a setting of its own, lands beside it, and the other GPUs hold "
                f"nothing. Name the GPU it is meant for (`'cuda:1'`).",
                devices=["cuda:0"],
                modules=[beside.attr, beside.sibling],
                suggestion=f"give `{beside.setting}` a device index",
            )
        contexts_reported: set[int] = set()
        for made, context in unplaced_in_cuda_device_blocks(ctx.module):
            if id(context) in contexts_reported:
                continue  # one finding per block: its fix is the block's
            contexts_reported.add(id(context))
            yield self.finding(
                ctx,
                context,
                f"`{ctx.code(context)}` only sets the current CUDA device (where an index-less `.cuda()` goes): it is "
                f"no default device for new tensors, so `{ctx.code(made.func)}(...)`, built inside it at line "
                f"{ctx.line(made)} with no device and never moved, is made on the CPU and stays there. Write `with "
                f"torch.device('cuda', i):` (a default device for what is built inside), or move the module "
                f"(`.cuda()` in the block).",
                devices=["cpu"],
                modules=[ctx.code(made.func)],
                suggestion="use `with torch.device('cuda', i):`, or call `.cuda()` on the module in the block",
            )
        for name, context, move in moved_to_current_after_block(ctx.module):
            yield self.finding(
                ctx,
                move,
                f"`{ctx.code(move)}` moves `{name}`, made inside `{ctx.code(context)}` (line {ctx.line(context)}), to "
                "the current CUDA device, but runs after that block: the current device is back to what it was "
                "(cuda:0, as nothing here calls set_device), not the block's GPU, so it lands beside what the other "
                "GPUs were meant to hold. Move it inside the block, or name the GPU (`.cuda(i)`, `.to(f'cuda:{i}')`).",
                devices=["cuda:0"],
                suggestion="move it inside the `with` block, or name the GPU",
            )
        for placed, setdev in _placed_before_the_pass_sets_it(ctx):
            if id(placed) in reported:
                continue
            reported.add(id(placed))
            yield self.finding(
                ctx,
                placed,
                f"`{ctx.code(placed)}` names no device index and runs before this pass's `{ctx.code(setdev)}` (line "
                f"{ctx.line(setdev)}): it lands on the device the previous pass made current (the first pass: "
                "whatever was current before the loop), so each stage sits one GPU behind the one meant and the "
                "last GPU gets none. Set the device first, or name it: `.cuda(gpu)` / `.to(gpu)`.",
                suggestion="call set_device before the placement, or name the device",
            )
        yield from _made_on_current_device(self, ctx, reported)
        yield from _stages_placed_on_current(self, ctx, reported)
        for built in ctx.model.facts(SplitBuiltAfterSetDevice):
            setdev = built.setdev
            plain, obj = built.plain, built.obj
            if _runs_at_import(ctx, setdev) and all(ctx.owns(n) for n in built.where):
                # set_device at the top of the file runs before the class is built anywhere: every
                # index-less placement of its __init__ is wrong wherever it is built, so each is the finding.
                for n in built.where:
                    if id(n) in reported:
                        continue
                    reported.add(id(n))
                    yield self.finding(
                        ctx,
                        n,
                        f"`{ctx.code(n)}` names no device index: `{_what(ctx, setdev)}` at line {ctx.line(setdev)} "
                        f"runs when the file is imported, so where `{ctx.code(built.node)}` is built (line "
                        f"{ctx.line(built.node)}) it lands on the current device, and what was meant as "
                        f"{split_desc(plain)} gives {split_desc(obj) if obj.split else 'everything on one device'}. "
                        f"Name the device you mean: `.cuda(i)` / `.to('cuda:i')` / torch.device('cuda', i).",
                        devices=split_devices(plain),
                        suggestion="write the device index explicitly",
                    )
                continue
            lines = ", ".join(str(ctx.line(n)) for n in built.where[:3])
            after = split_desc(obj) if obj.split else "everything on one device"
            yield self.finding(
                ctx,
                built.node,
                f"`{ctx.code(built.node)}` is built after `{_what(ctx, setdev)}` at line {ctx.line(setdev)}, and its "
                f"__init__ places stages with an index-less `.cuda()`/'cuda' (line {lines}): it was meant as "
                f"{split_desc(plain)}, but now gives {after}. Name each stage's device index in __init__.",
                devices=split_devices(plain),
                suggestion="write the device index of each stage explicitly",
            )


def _made_on_current_device(rule: Rule, ctx: FileContext, reported: set[int]) -> Iterator[Finding]:
    """A tensor made on the index-less current device inside a class (`.cuda()`, `device='cuda'`, a factory
    under a default device of 'cuda') that meets a stage's tensors on another GPU: reported once, at the line
    that made it, naming the first use; not again where it was reported as placed after a set_device
    (`reported`: those nodes)."""
    done: set[int] = set(reported)
    for ev in once_per_node(ctx.model.facts(Mismatch)):
        m = made_on_current(ctx, ev)
        if m is None or id(m.made) in done:
            continue
        done.add(id(m.made))
        use = ev.node
        if m.after is not None:
            yield rule.finding(
                ctx,
                m.made,
                f"`{ctx.code(m.made)}` names no device index: after `{_what(ctx, m.after.setdev)}` at line "
                f"{ctx.line(m.after.setdev)} it puts the tensor on the current device ({m.after.dev}), and it meets "
                f"tensors on {m.stage} at line {ctx.line(use)} (`{ctx.code(use)}`), where it fails. Name the "
                f"device it is meant for: {device_literal(m.stage)}.",
                devices=[m.stage, m.after.dev],
                suggestion=f"place it on {m.stage} by name, e.g. `.to({device_literal(m.stage)})`",
            )
            continue
        yield rule.finding(
            ctx,
            m.made,
            f"`{ctx.code(m.made)}` puts a tensor on the current device (cuda:0 unless set_device says otherwise), "
            f"inside code that runs on {m.stage}: it meets tensors on {m.stage} at line {ctx.line(use)} "
            f"(`{ctx.code(use)}`) and fails there. Create it on the device of what it meets (`device=x.device`, "
            f"`.to(x.device)`, here {device_literal(m.stage)}), not on the current one.",
            devices=[m.stage, "cuda"],
            suggestion=f"create it on the device it is used on ({m.stage}), e.g. with `device=x.device`",
        )


def _stages_placed_on_current(rule: Rule, ctx: FileContext, reported: set[int]) -> Iterator[Finding]:
    """A stage of a split class placed index-less after set_device(k) (so on cuda:k) whose input arrives
    on another GPU: reported once, at the placement, naming the call that fails."""
    for ev in once_per_node(ctx.model.facts(Mismatch)):
        p = stage_placed_on_current(ctx, ev)
        if p is None or id(p.node) in reported or not ctx.owns(p.node):
            continue
        reported.add(id(p.node))
        here = single(ev.value.devs)
        assert here is not None  # stage_placed_on_current knows the input's device
        yield rule.finding(
            ctx,
            p.node,
            f"`{ctx.code(p.node)}` names no device index: after `{_what(ctx, p.setdev)}` at line "
            f"{ctx.line(p.setdev)} it places the stage on the current device ({p.dev}), but its input arrives on "
            f"{here} at line {ctx.line(ev.node)} (`{ctx.code(ev.node)}`), where it fails. Name the device it is "
            f"meant for: `.cuda({here.split(':')[1]})` / `.to({device_literal(here)})`.",
            devices=[here, p.dev or "cuda"],
            suggestion=f"place it on {here} by name, e.g. `.to({device_literal(here)})`",
        )


def _indexless_in_split_code(
    runs: list[EntryPointRun], followed: dict[cst.CSTNode, IndexlessPlacement]
) -> list[IndexlessPlacement]:
    """The index-less placements after set_device (not inside `with torch.cuda.device`, where
    index-less means that device on purpose, nor where it made cuda:0 current, nor `followed`: a
    tensor's, to a cuda:k the device model follows) in entry points that build or run a split model;
    one per node, from the first entry point that reached it."""
    out: list[IndexlessPlacement] = []
    seen: set[int] = set()
    for run in runs:
        if not run.builds_split:
            continue
        for p in run.placements:
            # After set_device(0) an index-less placement lands where it lands in a process that never
            # changed the device: the setting changes nothing there. A tensor placed after set_device(k),
            # k known, is followed to cuda:k by the device model: where it then meets another GPU it is
            # reported at the placement (made_on_current), and where it meets only cuda:k it landed
            # where it was meant to.
            # After set_device(args.gpu), an index read at run time, a tensor or a loss criterion placed
            # index-less goes where the current device is meant to be (the targets and the loss beside the
            # last stage): whether it meets a stage elsewhere is known only at run time (the dry run's).
            unknown = p.dev is None or p.dev == "cuda"
            if unknown and (p.of_tensor or p.of_loss):
                continue
            if not p.under_device_context and p.dev != "cuda:0" and p.node not in followed and id(p.node) not in seen:
                seen.add(id(p.node))
                out.append(p)
    return out


def _set_just_before(ctx: FileContext, setdev: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Is `node` placed in a loop over the devices right after the loop's pass set its device, as a statement of
    its own (`for i, gpu in enumerate(gpus):` `torch.cuda.set_device(gpu)` then `stages.append(make_stage(i).
    cuda())`)? Then the index-less placement means the device just set, as plainly as under `with
    torch.cuda.device(gpu):`. Not a set_device earlier in a block (the setting leaks into what follows, where
    other placements name their devices), nor one of a loop before the placement (`_after_stage_loop`)."""
    for loop in walk(ctx.module):
        if not isinstance(loop, cst.For) or not isinstance(loop.body, cst.IndentedBlock):
            continue
        body = loop.body.body
        at = next((i for i, stmt in enumerate(body) if any(n is node for n in walk(stmt))), None)
        if not at or any(isinstance(b, cst.IndentedBlock) and any(n is node for n in walk(b)) for b in walk(body[at])):
            continue  # not in this loop's own statements (in a nested block: its innermost loop decides)
        before = body[at - 1]
        if not (isinstance(before, cst.SimpleStatementLine) and any(n is setdev for n in walk(before))):
            return False
        names = {n.value for n in walk(loop.target) if isinstance(n, cst.Name)}
        return any(isinstance(n, cst.Name) and n.value in names for n in walk(setdev))
    return False


def _placed_before_the_pass_sets_it(ctx: FileContext) -> Iterator[tuple[cst.Call, cst.Call]]:
    """Index-less `.cuda()` placements in a loop over devices made before the same pass's `set_device(<the loop's
    variable>)` with no set_device before them in the pass (`for i, gpu in enumerate(gpus):` `stages.append(
    make_stage(i).cuda())` then `torch.cuda.set_device(gpu)`): each lands on the previous pass's device."""
    for loop in walk(ctx.module):
        if not isinstance(loop, cst.For) or not isinstance(loop.body, cst.IndentedBlock):
            continue
        names = {n.value for n in walk(loop.target) if isinstance(n, cst.Name)}
        stmts = loop.body.body
        for k, stmt in enumerate(stmts):
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            sets = [n for n in walk(stmt) if _is_set_device(n)]
            if not sets:
                continue
            setdev = sets[0]
            if any(isinstance(n, cst.Name) and n.value in names for a in setdev.args for n in walk(a.value)):
                for earlier in stmts[:k]:
                    if isinstance(earlier, cst.SimpleStatementLine):
                        yield from ((n, setdev) for n in walk(earlier) if _indexless_cuda(n))
            break  # the pass's first set_device decides


def _is_set_device(node: cst.CSTNode) -> TypeGuard[cst.Call]:
    """`torch.cuda.set_device(...)` (or `cuda.set_device(...)`) with one argument."""
    return (
        isinstance(node, cst.Call)
        and len(node.args) == 1
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "set_device"
        and (dotted(node.func.value) or "").endswith("cuda")
    )


def _after_stage_loop(ctx: FileContext, setdev: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Is `node` placed after a loop that built the stages the `_set_just_before` way, in a statement of the block
    the loop is in (`for i, gpu in enumerate(gpus):` `set_device(gpu)`, `stages.append(make_stage(i).cuda())`,
    then `self.head = nn.Linear(...).cuda()`)? The loop left its last pass's device current, and what is built next
    joins the last stage, as the idiom means it to: where that device is known, a tensor that then meets another
    GPU is MP001 at the meeting. A loop that sets the device without placing right after it is no such loop."""
    for block in walk(ctx.module):
        if not isinstance(block, cst.IndentedBlock | cst.Module):
            continue
        body = block.body
        for i, loop in enumerate(body):
            if not isinstance(loop, cst.For) or not isinstance(loop.body, cst.IndentedBlock):
                continue
            if not any(n is node for stmt in body[i + 1 :] for n in walk(stmt)):
                continue
            stmts = loop.body.body
            at = next((k for k, stmt in enumerate(stmts) if any(n is setdev for n in walk(stmt))), None)
            if at is None or at + 1 >= len(stmts):
                return False
            placed = [n for n in walk(stmts[at + 1]) if _indexless_cuda(n)]
            return bool(placed) and _set_just_before(ctx, setdev, placed[0])
    return False


def _indexless_cuda(node: cst.CSTNode) -> TypeGuard[cst.Call]:
    """`x.cuda()` with no argument."""
    return (
        isinstance(node, cst.Call)
        and not node.args
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "cuda"
    )


def _runs_at_import(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is `node` in a statement at the top of this file (not in a function, a class or an `if`)?"""
    if not ctx.owns(node):
        return False
    line = ctx.line(node)
    return any(
        isinstance(stmt, cst.SimpleStatementLine) and ctx.span(stmt)[0][0] <= line <= ctx.span(stmt)[1][0]
        for stmt in ctx.module.body
    )


def _what(ctx: FileContext, node: cst.CSTNode) -> str:
    if isinstance(node, cst.Call):
        return ctx.code(node)
    return "set_device"
