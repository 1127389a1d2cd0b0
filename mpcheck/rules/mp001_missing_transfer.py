"""MP001: a tensor known to be on one device reaches a module, parameter or op on another."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.describe import (
    MODE_WORDS,
    callee,
    move_fix,
    moved_tensor,
    origin_text,
    path_text,
    value_text,
    via_text,
)
from mpcheck.devices.events import (
    BuffersLeftBehind,
    CallSite,
    DiscardedMove,
    GradientOffItsInput,
    Mismatch,
    PlacedTwice,
    SharedModuleMoved,
    SplitBuiltAfterSetDevice,
    StaleOptimizerState,
    StatisticsReplaced,
    StepsLoadedOnOneGpu,
)
from mpcheck.devices.names import dotted
from mpcheck.devices.torchapi import HOST_ARGUMENTS
from mpcheck.devices.values import (
    OWN_MOVE_KEY,
    TIED_WEIGHT,
    WEIGHT_REPLACED,
    Obj,
    device_literal,
    known_tensor,
    made_on_cpu_by_default,
    show,
    single,
)
from mpcheck.finding import Finding, Fix
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.made_on_current import made_on_current, stage_placed_on_current
from mpcheck.rules.metrics import in_a_metric
from mpcheck.rules.one_move import OneMove, later_lines
from mpcheck.rules.words import FLOW_WORDS


class MissingTransfer(Rule):
    code = "MP001"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        # Stages placed index-less in an __init__ run after set_device: MP004 reports the placement or the build.
        collapsed = {id(n) for built in ctx.model.facts(SplitBuiltAfterSetDevice) for n in built.where}
        # Modules a stage shares with another, moved there by its placement (MP007 at that move): their first
        # stage's input is on the device that stage was meant for, and the fix is MP007's, not a move of it.
        collapsed |= {id(shared.node) for shared in ctx.model.facts(SharedModuleMoved)}
        mine = [ev for ev in once_per_node(ctx.model.facts(Mismatch)) if _ours(ctx, ev, collapsed)]
        one_move = OneMove(ctx, mine)
        # `x.to(dev)` as a statement: the tensor it left behind, by identity (the value the name still holds).
        discarded = {id(d.value): d for d in once_per_node(ctx.model.facts(DiscardedMove))}
        explained: set[int] = set()
        # A generator on another device than the tensors drawn with it: one finding, at its first use, since
        # the fix is where it is made (the later draws are named in it).
        draws: dict[int, list[int]] = {}
        for ev in mine:
            if ev.value.kind == "generator":
                draws.setdefault(id(ev.value.at), []).append(ctx.line(ev.node))
        for ev in mine:
            if one_move.later(ev):
                continue  # a later use of one variable left on its device: the first use's finding says it
            if ev.value.kind == "generator":
                if draws[id(ev.value.at)][0] == ctx.line(ev.node):
                    message, suggestion = _generator_message(ctx, ev, draws[id(ev.value.at)][1:])
                    devices = [d for d in (single(ev.value.devs), single(ev.target)) if d]
                    yield self.finding(ctx, ev.node, message, devices=devices, suggestion=suggestion)
                continue
            lines = one_move.lines(ev)
            v = ev.value
            here, there = single(v.devs), single(ev.target)
            name = value_text(ctx, ev.expr, v)
            line = ctx.line(ev.node)
            mod = ev.module
            own_move = (mod.extra or {}).get(OWN_MOVE_KEY) if mod is not None else None
            if own_move is not None and there == "cpu" and isinstance(ev.node, cst.Call):
                # Placed by a call of its class's own `to()`, which moved its plain tensors only.
                yield self.finding(
                    ctx,
                    ev.node,
                    f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but `{ctx.code(callee(ev.node))}` is still on "
                    f"the CPU{MODE_WORDS.get(ev.mode, '')}: its class's own `{own_move.name.value}()` (line "
                    f"{ctx.line(own_move)}) moves only the tensors it names and never calls "
                    f"`nn.Module.{own_move.name.value}()`, so its parameters did not move: end it with "
                    f"`return super().{own_move.name.value}(*args, **kwargs)`.",
                    devices=[here, there],
                    modules=[ctx.code(callee(ev.node))],
                    suggestion=f"hand on to `super().{own_move.name.value}(*args, **kwargs)` in the override",
                )
                continue
            lost = discarded.get(id(v))
            if lost is not None and ctx.line(lost.node) <= line and not lines and _could_mend(lost, there):
                explained.add(id(lost))
                yield _discarded_finding(
                    self,
                    ctx,
                    lost,
                    f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), "
                    f"but {_meets(ctx, ev, there)}{via_text(ctx, ev.via)}: ",
                    there,
                )
                continue
            meets = _meets(ctx, ev, there)
            expr = ev.expr
            if there == "cpu" and mod is not None and "never placed" in (mod.origin or ""):
                assert here is not None  # the value's device, where the module must be placed
                call = ev.node
                assert isinstance(call, cst.Call)  # the module's call
                # A part swapped in after construction (a helper's new head) is placed where it is built.
                built_in = ctx.function_name(mod.at) if isinstance(mod.at, cst.Call) else ""
                where = "in __init__" if built_in in ("", "__init__") else f"where `{built_in}` builds it"
                in_plain_list = "plain list" in (mod.origin or "")
                yield self.finding(
                    ctx,
                    call,
                    f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but `{ctx.code(callee(call))}`"
                    f"{_built_at(ctx, mod)} was never placed, so it is still on the CPU{MODE_WORDS.get(ev.mode, '')}: "
                    + (
                        _PLAIN_LIST_FIX
                        if in_plain_list
                        else f"place it {where}, e.g. `.to({device_literal(here)})`"
                        f"{_unplaced_sibling_hint(ctx, callee(call))}."
                    ),
                    devices=[here, there],
                    modules=[ctx.code(callee(call))],
                    suggestion="hold the list of layers in `nn.ModuleList(...)`"
                    if in_plain_list
                    else f"place `{ctx.code(callee(call))}` with `.to({device_literal(here)})` {where}",
                )
                continue
            assert there is not None  # a mismatch names the device the value meets
            special = _special_case(ctx, ev, name, meets)
            if special is not None:
                subject, advice = special
                yield self.finding(
                    ctx,
                    ev.node,
                    f"{subject}{MODE_WORDS.get(ev.mode, '')}: {advice}.",
                    devices=[here, there],
                    modules=[ev.what] if ev.op == "module" else [],
                    suggestion=advice,
                )
                continue
            source = moved_tensor(expr)
            several = len(ctx.model.known_targets(ev)) > 1
            target_code = _device_of(ctx, ev) if ctx.model.one_target(ev) != there else None
            if target_code is not None:
                # Visits of this line need different devices (a loop over blocks on two GPUs), or one
                # visit's device is a parameter's (a class run on its own): no one device fits; the
                # device of what it meets on each visit does.
                moved = ctx.code(source) if source is not None else name
                fix = (
                    f"{moved}.to({target_code})"
                    if moved.isidentifier() or source is not None
                    else f"({moved}).to({target_code})"
                )
            elif source is not None:
                # The value was moved, to the wrong device: fix that move.
                fix = f"{ctx.code(source)}.to({device_literal(there)})"
            elif name.isidentifier():
                fix = f"{name} = {name}.to({device_literal(there)})"
            elif isinstance(expr, (cst.Call, cst.Attribute, cst.Subscript)):
                fix = f"{name}.to({device_literal(there)})"
            else:
                fix = f"({name}).to({device_literal(there)})"
            # An expression too long to quote whole (ctx.code cut it) is not written back as code.
            # (Nor is a value the file does not spell out here: the input a caller passed, named "a tensor".)
            unnamed = expr is None and name == value_text(ctx, None, None)
            example = (
                f"`{fix}`"
                if not name.endswith("...") and not unnamed
                else f"`.to({target_code or device_literal(there)})` on it"
            )
            if target_code is not None and several:
                advice = (
                    f"the line runs for several devices, so move it to the device it meets on each visit, "
                    f"e.g. {example} at line {line}"
                )
            elif target_code is not None:
                advice = f"move it to the device of what it meets, e.g. {example} at line {line}"
            elif several:
                advice = "the line runs for several devices, so move it to the device it meets on each visit"
            else:
                advice = f"move it first, e.g. {example} before line {line}"
            also = ""
            if lines:  # one move before the first use mends them all (rules/one_move.py)
                also = f" (it meets {show(there)} unmoved at {later_lines(lines)} too)"
                advice = f"move it once before its first use, e.g. `{name} = {name}.to({device_literal(there)})` before line {line}"
            yield self.finding(
                ctx,
                ev.node,
                f"{name if unnamed else f'`{name}`'} is on {show(here)} ({origin_text(ctx, v)}){path_text(ctx, ev.path)}, "
                f"but {meets}{also}{MODE_WORDS.get(ev.mode, '')}{via_text(ctx, ev.via)}: {advice}.",
                devices=[here, there],
                modules=[ev.what] if ev.op == "module" else [],
                suggestion=advice,
                # (not on one way through an `if` only: the move that took it there is the line to mend)
                fix=move_fix(ctx, expr, repr(there))
                if not also and ev.path is None and _fixable(ctx, ev, v, there)
                else None,
            )

        for d in discarded.values():
            if id(d) not in explained and not _already_there(d):
                yield _discarded_finding(self, ctx, d, "", None)
        for left in once_per_node(ctx.model.facts(BuffersLeftBehind)):
            yield _buffers_left_finding(self, ctx, left)
        replaced_on: set[int] = set()  # `m.running_mean, m.running_var = ...`: one finding for the line
        for replaced in once_per_node(ctx.model.facts(StatisticsReplaced)):
            if ctx.line(replaced.node) not in replaced_on:
                replaced_on.add(ctx.line(replaced.node))
                yield _statistics_replaced_finding(self, ctx, replaced)
        for stale in once_per_node(ctx.model.facts(StaleOptimizerState)):
            yield _stale_state_finding(self, ctx, stale)
        for loaded in once_per_node(ctx.model.facts(StepsLoadedOnOneGpu)):
            yield _steps_loaded_finding(self, ctx, loaded)
        for grad in once_per_node(ctx.model.facts(GradientOffItsInput)):
            yield _gradient_off_its_input_finding(self, ctx, grad)


def _gradient_off_its_input_finding(rule: Rule, ctx: FileContext, ev: GradientOffItsInput) -> Finding:
    """MP001 at the gradient a custom Function's backward returns on another GPU than its input."""
    here, there = single(ev.gradient.devs), single(ev.input.devs)
    returned = ctx.code(ev.node)
    name = f"`{ev.param}`" if ev.param else f"input {ev.index}"
    moved = f"{returned}.to({ev.saved_device})" if ev.saved_device else f"{returned}.to(ctx.device)"
    how = (
        f"return `{moved}`"
        if ev.saved_device
        else f"save the input's device in forward (`ctx.device = {ev.param or 'x'}.device`) and return `{moved}`"
    )
    fix = None
    if ev.saved_device:
        (line, col), (end_line, end_col) = ctx.span(ev.node)
        fix = Fix(line, col, end_line, end_col, moved)
    return rule.finding(
        ctx,
        ev.node,
        f"`{ev.function}.backward` returns `{returned}` on {show(here)} ({origin_text(ctx, ev.gradient)}) as the "
        f"gradient of its input {name}, which `{ctx.code(ev.applied)}` at line {ctx.line(ev.applied)} gets on "
        f"{show(there)}{MODE_WORDS.get(ev.mode, '')}{via_text(ctx, ev.via)}: autograd refuses a gradient on another "
        f'device than its input ("invalid gradient at index {ev.index}"), so `backward()` fails. Move it back: {how}.',
        devices=[here, there],
        modules=[ev.function],
        suggestion=how,
        fix=fix,
    )


def _steps_loaded_finding(rule: Rule, ctx: FileContext, ev: StepsLoadedOnOneGpu) -> Finding:
    """MP001 at `opt.load_state_dict(...)` of a state loaded onto one GPU, for parameters on several."""
    others = [d for d in ev.params if d != ev.mapped]
    at = f" (line {ctx.line(ev.loaded_at)})" if ev.loaded_at is not None and ctx.owns(ev.loaded_at) else ""
    return rule.finding(
        ctx,
        ev.node,
        f"`{ctx.code(ev.node)}` loads {ev.optimizer}'s state from a checkpoint mapped to {show(ev.mapped)}{at}. "
        f"load_state_dict casts each state tensor to its parameter's device, but not the `step` counts (only a "
        f"fused or capturable optimizer's), so the steps of the parameters on {', '.join(show(d) for d in others)} "
        f'stay on {show(ev.mapped)}, and the next `step()` (foreach, the CUDA default) raises "Tensors of the same '
        f'index must be on the same device". Load the checkpoint with `map_location="cpu"` (the state then follows '
        f"each parameter).",
        devices=[ev.mapped, *others],
        modules=list(ev.modules),
        suggestion='load the checkpoint with map_location="cpu"',
    )


def _buffers_left_finding(rule: Rule, ctx: FileContext, ev: BuffersLeftBehind) -> Finding:
    """MP001 at a loop that moves a module's parameters through `.data` and leaves its buffers behind."""
    there, here = single(ev.devs), single(ev.left)
    name = ctx.code(ev.owner)
    what = f"its {ev.module.nn_class}" + (f" `{ev.module.label}`" if ev.module.label else "")
    return rule.finding(
        ctx,
        ev.node,
        f"This loop moves the parameters of `{name}` to {show(there)}{via_text(ctx, ev.via)}, but not its buffers: "
        f"{what} keeps its running statistics in buffers, which stay on {show(here)}, and batch norm on {show(there)} "
        f"fails at its first call. Walk its buffers too (`itertools.chain(m.parameters(), m.buffers())`), or move "
        f"it with `m.to(...)`.",
        devices=[there, here],
        modules=[name],
        suggestion="move its buffers with its parameters",
    )


def _statistics_replaced_finding(rule: Rule, ctx: FileContext, ev: StatisticsReplaced) -> Finding:
    """MP001 at `bn.running_mean = torch.zeros(n)` for a BatchNorm on a GPU."""
    assert isinstance(ev.node, cst.Attribute)
    owner, stat = ctx.code(ev.node.value), ev.node.attr.value
    there, given = single(ev.module.devs), single(ev.value.devs)
    return rule.finding(
        ctx,
        ev.node,
        f"`{ctx.code(ev.node)}` is set to a tensor on {show(given)} ({origin_text(ctx, ev.value)}), but `{owner}` "
        f"(a {ev.module.nn_class}) is on {show(there)}: its running statistics are buffers it reads and updates "
        f"with its input there, and batch norm fails at its next call. Reset them in place "
        f"(`{owner}.reset_running_stats()`, or `{owner}.{stat}.zero_()`), or make the new tensor on its device.",
        devices=[given, there],
        modules=[owner],
        suggestion=f"reset `{owner}.{stat}` in place instead of replacing it",
    )


def _stale_state_finding(rule: Rule, ctx: FileContext, ev: StaleOptimizerState) -> Finding:
    """MP001 at `opt.step()` of an optimizer whose state stayed where its parameters were when it was made."""
    assert isinstance(ev.node, cst.Call)
    step = ctx.code(ev.node)
    opt = ctx.code(ev.node.func.value) if isinstance(ev.node.func, cst.Attribute) else "the optimizer"
    made = ev.state_at
    if (
        isinstance(made, cst.Call)
        and isinstance(made.func, cst.Attribute)
        and made.func.attr.value == "load_state_dict"
    ):
        how = f"`{opt}.load_state_dict(...)` at line {ctx.line(made)} cast the loaded state to them"
        fix = f"place the model before `{opt}.load_state_dict(...)` (line {ctx.line(made)})"
    elif made is not None and made is not ev.node and isinstance(made, cst.Call) and _is_step(made):
        how = f"its first `step()` at line {ctx.line(made)} made it there"
        fix = f"place the model before the first `{opt}.step()`, or move the state with it"
    else:
        how = "it was built with its state there"
        fix = "place the model before building the optimizer"
    whose = " and ".join(f"`{m}`" for m in dict.fromkeys(ev.modules) if m) or "its model"
    return rule.finding(
        ctx,
        ev.node,
        f"`{step}`: {ev.optimizer}'s state is on {_devices_text(ev.state)}, where its parameters were when it was "
        f"made ({how}), but {whose} has been moved since and its parameters are now on "
        f"{_devices_text(ev.params)}{MODE_WORDS.get(ev.mode, '')}{via_text(ctx, ev.via)}: an optimizer moves its "
        f"parameters' state only when it makes or loads it, so this step meets state and parameters on different "
        f"devices and fails. {fix[0].upper()}{fix[1:]}.",
        devices=[*ev.state, *ev.params],
        modules=[m for m in ev.modules if m],
        suggestion=fix,
    )


def _is_step(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"


def _devices_text(devs: tuple[str, ...]) -> str:
    shown = [show(d) for d in devs]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _could_mend(d: DiscardedMove, there: str | None) -> bool:
    """Would the dropped copy, kept, be where the use needs it (or may it be: a device not known)?"""
    to = single(d.target)
    return to is None or to == there or to.startswith("sym:")


def _already_there(d: DiscardedMove) -> bool:
    """A copy to the one device the tensor is known to be on already: harmless, no finding. (Two equal
    symbols, `sym:each:d`, may be two iterations of a loop over devices: not known to be one.)"""
    here = single(d.value.devs)
    return here is not None and not here.startswith("sym:") and d.value.devs == d.target


def _meets(ctx: FileContext, ev: Mismatch, there: str | None) -> str:
    """What the value meets, in words: "`self.b` is on cuda:1", "it meets `w`, which is on cuda:1"."""
    if ev.op == "module":
        what = ev.what
        if not what.startswith("the first stage") and isinstance(ev.node, cst.Call):
            what = ctx.code(callee(ev.node))
        target = what if what.startswith("the first stage") else f"`{what}`"
        origin = ev.module.origin if isinstance(ev.module, Obj) else ""
        if _split(ev.module) and not what.startswith("the first stage"):
            # A model split over GPUs is on none of them: this argument reaches a part of it on `there`.
            return f"{target} (split over GPUs) needs this argument on {show(there)}, where the part it reaches is"
        why = {
            TIED_WEIGHT: " (its weight is tied to a Parameter there)",
            WEIGHT_REPLACED: " (its weight was replaced by a new Parameter made there)",
        }.get(origin, "")
        return f"{target} is on {show(there)}{why}"
    other = value_text(ctx, _other_expr(ev), ev.other, ev.what or "the other operand")
    where = "" if ev.op == "op" else f" in `{ev.op}`"
    return f"it meets `{other}`{where}, which is on {show(there)}"


def _discarded_finding(rule: Rule, ctx: FileContext, d: DiscardedMove, lead: str, there: str | None) -> Finding:
    """MP001 at a tensor's `.to()` whose result is dropped, `lead` naming the use it left unmoved (if
    any). The fix assigns the copy to the name, offered only where the copy goes where the use needs it."""
    call = d.node
    assert isinstance(call, cst.Call)
    code = ctx.code(call)
    assign = f"{d.name} = {code}"
    here, to = (
        x if x is not None and not x.startswith("sym:") else None for x in (single(d.value.devs), single(d.target))
    )
    where = f"on {show(here)}" if here is not None else "where it is"
    at = f" at line {ctx.line(call)}" if lead else ""
    message = (
        f"{lead}`{code}`{at} discards its result: Tensor.{call.func.attr.value}() returns a moved copy "  # type: ignore[attr-defined]
        f"and leaves `{d.name}` {where}: assign it, `{assign}`."
    )
    (line, col), (end_line, end_col) = ctx.span(call)
    # Safe only where the copy goes where the use needs it; elsewhere the assignment changes where `x` is
    # from there on, which the analysis cannot vouch for: the suggestion says it, --fix does not.
    fix = Fix(line, col, end_line, end_col, assign) if there is not None and to == there else None
    return rule.finding(
        ctx,
        call,
        message,
        devices=[here, to],
        suggestion=f"assign the moved copy: `{assign}`",
        fix=fix,
    )


def _ours(ctx: FileContext, ev: Mismatch, collapsed: set[int]) -> bool:
    if made_on_current(ctx, ev) is not None or stage_placed_on_current(ctx, ev) is not None:
        return False  # its root cause is the line that made it on the current device: MP004 there
    if isinstance(ev.module, Obj) and id(ev.module.at) in collapsed:
        return False
    if ev.op == "module" and "register_module_forward_pre_hook(" in ctx.source:
        return False  # a global pre-hook sees every module's inputs, and may move them: where to is not read here
    return not in_a_metric(ctx, ev)  # predictions against targets: MP008's


def _generator_message(ctx: FileContext, ev: Mismatch, later: list[int]) -> tuple[str, str]:
    v = ev.value
    here, there = single(v.devs), single(ev.target)
    name = value_text(ctx, ev.expr, v, default="")
    name = f"`{name}`" if name else "the generator"  # (one made in the call itself: `generator=torch.Generator()`)
    also = f" (and at {later_lines([0, *later])})" if later else ""
    made = f" at line {ctx.line(v.at)}" if v.at is not None else ""
    return (
        f"{name} is on {show(here)} ({origin_text(ctx, v)}), but `{ev.op}` draws with it for a tensor on "
        f"{show(there)}{also}: a CPU generator draws only for CPU tensors and a CUDA one only for CUDA tensors, and "
        f"torch raises. A generator has no `.to()`: make it there{made}, "
        f"`torch.Generator(device={device_literal(there or '')})`.",
        f"make the generator with `device={device_literal(there or '')}`{made}",
    )


def _special_case(ctx: FileContext, ev: Mismatch, name: str, meets: str) -> tuple[str, str] | None:
    """(subject, advice) of the mismatches whose fix is not a `.to()` of the value: per-parameter
    work over a split model, an adapter moved without the layer it holds by reference, one element
    of a tuple passed whole; None for the others."""
    v, expr, line = ev.value, ev.expr, ctx.line(ev.node)
    here, there = single(v.devs), single(ev.target)
    to_there = f".to({device_literal(there)})" if there is not None else ".to(...)"
    made = ev.other
    if ev.op == "index" and there == "cpu" and (here or "").startswith("cuda"):
        # A GPU's indices into host memory (`self.abar[t]`, `vocab[torch.multinomial(p, 1)]`). Moving the index to
        # the host would leave the rows there, away from everything else the line computes on: the table belongs
        # where the index is (one move, once), which only the code's author can place; no automatic fix.
        table = ev.what if ev.what.startswith("`") else f"`{ev.what}`"
        return (
            f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but it indexes {table}, which is in host memory "
            f"(PyTorch refuses a GPU's index into a CPU tensor)",
            f"keep {table} on {show(here)} (move it once, where it is made or with its owner's `.to()`), or index "
            f"it with `{name}.cpu()` and move the rows to {show(here)}",
        )
    if v.kind == "distribution" and there is not None:
        # `kl_divergence(q, p)` with p built from the outputs of a layer on another GPU
        return (
            f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but {meets}",
            f"a distribution has no `.to()`: build `{name}` from tensors moved to {show(there)} (`{to_there}` on "
            f"each at line {ctx.line(v.at) if v.at is not None else line})",
        )
    if (
        ev.op != "module"
        and made_on_cpu_by_default(made)
        and (here or "").startswith("cuda")
        and isinstance(made, Obj)
        and isinstance(made.at, cst.Call)
        and ctx.owns(made.at)
        and ctx.function_name(made.at) == ctx.function_name(ev.node)  # made in this function: fix it there
    ):
        # The other side is the one off its device: made on the CPU for want of a device= (`out =
        # torch.zeros(n, d)` then `out.index_add_(0, index, src)` with src on a GPU), not this GPU tensor.
        other = value_text(ctx, ev.what_expr, made, ev.what or "the other operand")
        where = "" if ev.op == "op" else f" in `{ev.op}`"
        like = name if name.isidentifier() else None
        device = f"{like}.device" if like else device_literal(here or "")
        return (
            f"`{other}` is on cpu ({origin_text(ctx, made)}), but it meets `{name}`{where}, which is on {show(here)}",
            f"create it on the device of what it meets, e.g. `device={device}` in `{ctx.code(made.at.func)}(...)` "
            f"at line {ctx.line(made.at)}",
        )
    if expr is None and isinstance(ev.node, cst.Call) and (dotted(ev.node.func) or "").endswith("update_bn"):
        # `update_bn(loader, model)` runs the model on the loader's batches where they are: its device= moves them.
        args = ev.node.args
        loader = ctx.code(args[0].value) if args else "loader"
        return (
            f"`{ctx.code(ev.node.func)}` runs the model on the batches of `{loader}`, which are on {show(here)} "
            f"({origin_text(ctx, v)}), but {meets}",
            f"pass `device={device_literal(there or '')}` to `{ctx.code(ev.node.func)}(...)`, which moves each batch there",
        )
    if ev.what in HOST_ARGUMENTS and there == "cpu":
        # `pack_padded_sequence(emb, lengths)` with the lengths moved to the GPU with the rest of the batch.
        keyword, _, wanted = HOST_ARGUMENTS[ev.what]
        return (
            f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but `{ev.op}` reads its {keyword} on the host "
            f"and raises for {keyword} on a GPU (it wants {wanted})",
            f"keep `{name}` on the CPU (leave it out of the move to {show(here)}), or pass `{name}.cpu()` here",
        )
    if ev.op == "sum()":
        return _sum_message(ctx, ev, f"is on {show(here)} ({origin_text(ctx, v)}), but {meets}", to_there, line)
    if _per_parameter(v) or (isinstance(ev.other, Obj) and _per_parameter(ev.other)):
        # Per-parameter work over a split model (grad norms stacked, shadows on one GPU).
        same = expr is not None and expr is ev.what_expr
        subject = (
            f"`{name}` holds items made from parameters on {show(there)} and {show(here)} ({v.origin})"
            if same
            else f"`{name}` is on {show(here)} ({origin_text(ctx, v)}), but {meets}"
        )
        return subject, (
            f"the parameters of a split model span several devices: keep per-parameter state on each "
            f"parameter's device (e.g. `.to(p.device)`, or no `.to()` at all), or move every item to one "
            f"device (e.g. `{to_there}` on each item) before line {line}"
        )
    twice = next((f for f in ctx.model.facts(PlacedTwice) if f.module is ev.module), None)
    if twice is not None and ev.op == "module":
        # The module met was placed twice in __init__; a never-placed sibling was probably meant.
        others = " or ".join(f"`self.{a}`" for a in twice.unplaced)
        return f"`{name}` is on {show(here)}, but {meets}", (
            f"__init__ places `self.{twice.attr}` twice (on {show(twice.first_dev)} at line {ctx.line(twice.first)}, "
            f"then on {show(there)} at line {ctx.line(twice.node)}, which wins) and never places {others}: if the "
            f"second placement was meant for {others}, fix that line"
        )
    held = _held_by_reference(v, ev.module)
    if held is not None:
        # An adapter moved whole (its own weights) while the layer it holds by reference stays.
        mover, ref, ref_dev = held
        how = mover.origin.partition(_HELD)[0]
        return f"`{name}` is on {show(here)}, but {meets}", (
            f"the module was {how} (line {ctx.line(mover.at)}), but `{ref}`, the layer it holds by reference "
            f"rather than as a child, did not move and is on {ref_dev}: place the module where that layer is "
            f"(e.g. `.to({ref}.weight.device)`) instead"
        )
    if ev.item is not None and expr is not None and ev.site == "op":
        # One item of a list passed whole to a torch function (`torch.cat(parts)`): the items must meet on one device.
        whole = ctx.code(expr)
        return f"`{whole}[{ev.item}]` is on {show(here)} ({origin_text(ctx, v)}), but {meets}", (
            f"move every item to one device first, e.g. `{whole} = [t{to_there} for t in {whole}]` before line {line}"
        )
    if ev.item is not None and expr is not None:
        # One element of a tuple passed whole (an LSTM's `state` from init_hidden): move every element.
        whole = ctx.code(expr)
        if isinstance(expr, cst.Name):
            advice = (
                f"move it first, e.g. `{whole} = tuple(t{to_there} for t in {whole})` before line {line}, or "
                f"create it on the module's device"
            )
        else:
            whole = f"({whole})"
            advice = (
                f"create it on the module's device (e.g. `device={device_literal(there or '')}`), or move each "
                f"element with `{to_there}` before line {line}"
            )
        return f"`{whole}[{ev.item}]` is on {show(here)} ({origin_text(ctx, v)}), but {meets}", advice
    return None


def _sum_message(ctx: FileContext, ev: Mismatch, where: str, to_there: str, line: int) -> tuple[str, str]:
    """Python's sum() over tensors on more than one device (per-stage losses, per-parameter norms): the items
    must meet on one. `where`: "is on X (...), but <what it meets>"."""
    expr = ev.expr
    if isinstance(expr, (cst.GeneratorExp, cst.ListComp)):
        # The items a comprehension makes (over the parameters of a split model, which one is not known).
        elt = ctx.code(expr.elt)
        if not isinstance(expr.elt, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
            elt = f"({elt})"
        seq = f"({ctx.code(expr)})" if isinstance(expr, cst.GeneratorExp) and not expr.lpar else ctx.code(expr)
        return f"an item of `{seq}` {where}", (
            f"move each item to one device as it is made, e.g. `{elt}{to_there}` at line {line}"
        )
    whole = ctx.code(expr) if expr is not None else "the items"
    seq = whole if isinstance(expr, (cst.Name, cst.Attribute, cst.List)) else f"({whole})"
    advice = f"move every item to one device first, e.g. `sum(t{to_there} for t in {seq})` at line {line}"
    if ev.item is None:
        return f"an item of `{seq}` {where}", advice
    item = f"{seq}[{ev.item}]"
    if isinstance(expr, (cst.List, cst.Tuple)) and ev.item < len(expr.elements):
        item = ctx.code(expr.elements[ev.item].value)  # `sum([h.mean(), g.mean()])`: the element as written
    return f"`{item}` {where}", advice


# A never-placed layer held in a plain list (unmoved.IN_A_PLAIN_LIST): the list is the bug, not a missing move.
_PLAIN_LIST_FIX = (
    "it sits in a plain Python list, which is no submodule: `.to()` of its module never reaches it (nor does the "
    "optimizer, through `model.parameters()`). Hold the list in `nn.ModuleList(...)`."
)


def _unplaced_sibling_hint(ctx: FileContext, func: cst.BaseExpression) -> str:
    """' (__init__ places `self.l2` twice, lines 11 and 12: ...)' when the never-placed
    module called (`self.l3`) has a sibling placed twice (a copy-paste slip), else ''."""
    if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"):
        return ""
    attr = func.attr.value
    for f in ctx.model.facts(PlacedTwice):
        if attr in f.unplaced:
            return (
                f" (__init__ places `self.{f.attr}` twice, lines {ctx.line(f.first)} and {ctx.line(f.node)}: was "
                f"one of them meant for `self.{attr}`?)"
            )
    return ""


def _device_of(ctx: FileContext, ev: Mismatch) -> str | None:
    """Code for the device of what the value meets: `next(block.parameters()).device` for a
    module called by name, `x.device` for the other operand of an op; None when not nameable."""
    if ev.op == "module" and isinstance(ev.node, cst.Call) and isinstance(ev.node.func, (cst.Name, cst.Attribute)):
        # (not a split model's: its first parameter is on its first GPU, not where this argument goes)
        return None if _split(ev.module) else f"next({ctx.code(callee(ev.node))}.parameters()).device"
    other = _other_expr(ev)
    if ev.op != "module" and isinstance(other, (cst.Name, cst.Attribute)):
        return f"{ctx.code(other)}.device"
    return None


def _split(module: Obj | None) -> bool:
    """Is the module met split over devices (parts on two or more)?"""
    return isinstance(module, Obj) and (module.split is not None or (module.devs is not None and len(module.devs) > 1))


def _other_expr(ev: Mismatch) -> cst.BaseExpression | None:
    """The expression of what the value meets: the other operand's, or a method's receiver
    (`st.index_select(0, idx)`: `st`, as written there, not the name the tensor had where it was made)."""
    if ev.what_expr is None and ev.op.startswith(".") and isinstance(ev.node, cst.Call):
        receiver = getattr(ev.node.func, "value", None)
        while (
            isinstance(receiver, cst.Call)
            and isinstance(receiver.func, cst.Attribute)
            and receiver.func.attr.value.endswith("_")
            and not receiver.func.attr.value.startswith("_")
        ):
            receiver = receiver.func.value  # `ema_p.mul_(d).add_(p)`: an in-place op gives back its receiver
        return receiver if isinstance(receiver, (cst.Name, cst.Attribute)) else None
    return ev.what_expr


def _fixable(ctx: FileContext, ev: Mismatch, v: Obj, there: str) -> bool:
    """`.to(there)` is right only on a tensor (a list has no .to()) and only where
    every visit of the site needs `there` (not a loop over blocks on two devices), and only for devices
    this file gives (not those of another file's call: other callers may pass others).
    An operand of a torch function or tensor method is a tensor whatever the model
    inferred (they take nothing else); a module's forward or `+` may take anything."""
    if there.startswith("sym:") or ctx.model.one_target(ev) != there:
        return False
    if isinstance(ev.via, CallSite):
        return False  # devices another file's call gives: a literal here would bind the code to that caller
    return known_tensor(v) or ev.op not in ("module", "op")


def _per_parameter(v: Obj) -> bool:
    """Made from one parameter of a split model, in a loop or comprehension over its parameters
    (ParamsOf.per_device)."""
    return v.origin.startswith("a parameter of `")


_HELD = ", while `"


def _held_by_reference(v: Obj, module: Obj | None) -> tuple[Obj, str, str] | None:
    """(the moved value or module, the layer it holds by reference, that layer's device) when the
    value or the module met was moved with an instance that left that layer behind
    (moves._left_behind wrote it into the origin)."""
    for o in (v, module):
        if o is not None and _HELD in o.origin and o.at is not None:
            rest = o.origin.partition(_HELD)[2]  # "base`, which it holds by reference, stays on cuda:1"
            ref, _, tail = rest.partition("`")
            return o, ref, tail.rpartition(" stays on ")[2]
    return None


def _built_at(ctx: FileContext, mod: Obj) -> str:
    """' (built at line 8)': where a module that was never placed was created, when known."""
    return f" (built at line {ctx.line(mod.at)})" if isinstance(mod.at, cst.Call) else ""
