"""MP011: the same unchanging tensor moved to a device on every forward call or loop iteration."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import libcst as cst

from mpcheck.codes import REPEAT_MIN_BYTES
from mpcheck.devices.events import ModuleMovedInForward, Transfer
from mpcheck.devices.names import a_number, dotted
from mpcheck.devices.values import Devs, conflict, device_literal, made_by, show, single
from mpcheck.devices.walk import assigned, name_bindings, walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS

_KIND = {"buffer": "buffer", "param": "parameter"}


class RepeatedTransfer(Rule):
    code = "MP011"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        yield from _modules_moved_in_turn(self, ctx)
        how_of = repeats(ctx)
        for ev in once_per_node(ctx.model.facts(Transfer), lambda ev: bool(how_of(ev))):
            how = how_of(ev)
            if how == "again":
                yield _copied_again(self, ctx, ev)
                continue
            if how == "global":
                yield _global_copied(self, ctx, ev)
                continue
            v = ev.value
            src, dst = single(v.devs), single(ev.devs)
            node = ev.node
            recv = (
                ctx.code(node.func.value)
                if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                else "the tensor"
            )
            what = _KIND.get(v.kind, "tensor")
            when = "on every forward call" if how == "call" else "on every iteration of the loop"
            grows = _grown_from(node)
            if how == "call" and grows is not None:
                root, meth = grows
                fix = (
                    f"keep `{root}` on {show(dst)} (move it there once in __init__) and call `.{meth}()` on that "
                    f"copy: the chain copies the same data, {_GROWN[meth]}, on every call"
                )
            elif how == "call" and v.kind == "param" and recv.endswith((".weight", ".bias")) and recv.count(".") == 2:
                layer = recv.rsplit(".", 1)[0]  # `self.items.weight`: the layer is what to place
                fix = f"place `{layer}` on {show(dst)} in __init__, where its parameter is used, and use it directly"
            elif how == "call":
                fix = f"create it on {show(dst)} in __init__ (or move it once after placing the model) and use it directly"
            else:
                assert dst is not None  # a transfer repeated by a loop goes to a known device
                fix = f"move it once before the loop: `{recv} = {recv}.to({device_literal(dst)})`"
            if how == "call" and not ev.reads_unchanging_attribute:
                what = f"the same {ev.host_constant_bytes // 1024} KiB, built on the CPU from constants"
                fix = (
                    f"build it once on {show(dst)} in __init__ (`self.register_buffer(...)`, or `device=`) "
                    "and use it directly"
                )
            else:
                what = f"an unchanging {what} on {show(src)}"
            yield self.finding(
                ctx,
                ev.node,
                f"`{recv}` ({what}) is copied to {show(dst)} {when}: {fix}.",
                devices=[src, dst],
                suggestion=fix,
            )


_GROWN = {"repeat": "repeated", "repeat_interleave": "repeated", "expand": "expanded"}


def _grown_from(node: cst.CSTNode) -> tuple[str, str] | None:
    """(`self.coord_map`, 'repeat') for a move of `self.coord_map.repeat(B, 1, 1, 1).float()`: the
    attribute a chain starts from and the method in it that makes the copy larger; else None."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    expr: cst.BaseExpression = node.func.value
    grown = None
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            if expr.func.attr.value in _GROWN:
                grown = expr.func.attr.value
            expr = expr.func.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        else:
            break
    if grown is None or not isinstance(expr, cst.Attribute) or not isinstance(expr.value, cst.Name):
        return None
    return f"{expr.value.value}.{expr.attr.value}", grown


def _global_copied(rule: Rule, ctx: FileContext, ev: Transfer) -> Finding:
    """A constant of the module moved by a function that runs on every forward call or loop pass."""
    node = ev.node
    name = ctx.code(node.func.value) if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) else "it"
    src, dst = single(ev.value.devs), single(ev.devs)
    assert dst is not None  # (repeated: a move that certainly copies, to one known device)
    made = f", made at line {ctx.line(ev.value.at)}" if ev.value.at is not None and ctx.owns(ev.value.at) else ""
    where = ctx.function_name(node)
    fix = f"make it on {show(dst)} where it is defined (`device={device_literal(dst)}`), or keep one copy there"
    return rule.finding(
        ctx,
        node,
        f"`{name}` (a constant of the module on {show(src)}{made}) is copied to {show(dst)} each time `{where}` "
        f"runs, on every step: the same data crosses again and again. {fix[0].upper()}{fix[1:]} and use it.",
        devices=[src, dst],
        suggestion=fix,
    )


def _copied_again(rule: Rule, ctx: FileContext, ev: Transfer) -> Finding:
    """A value copied to a device a second time on one path of a function, unchanged since the first copy."""
    first = ev.again_of
    assert first is not None
    node = ev.node
    recv = ctx.code(node.func.value) if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) else "it"
    dst = single(ev.devs)
    held = _assigned_name(ctx, first)
    reuse = (
        f"use `{held}`, the copy line {ctx.line(first)} made,"
        if held
        else f"keep the copy line {ctx.line(first)} made and use it"
    )
    if first is node:  # the same line, on a later pass of a loop
        fix = f"copy `{recv}` once per device before the loop (`{{d: {recv}.to(d) for d in ...}}`) and use that copy"
        said = (
            f"`{recv}` is copied to {show(dst)} again on each pass of the loop, unchanged since the pass before "
            f"copied it there: a copy on every pass that reaches {show(dst)}, where one would do."
        )
    else:
        fix = f"{reuse} instead of copying `{recv}` again"
        before = (
            ctx.code(first.func.value)
            if isinstance(first, cst.Call) and isinstance(first.func, cst.Attribute)
            else recv
        )
        if before != recv:
            # `fake.detach().to(d)` after `fake.to(d)` (or the other way round): one copy of the data serves both.
            base, suffix = (before, recv[len(before) :]) if recv.startswith(before) else (recv, "")
            held_here = f"`{held}{suffix}`" if held and suffix else "it"
            fix = f"copy `{base}` to {show(dst)} once and take {held_here} from that copy"
        said = (
            f"`{recv}` is copied to {show(dst)} a second time here, unchanged since line {ctx.line(first)} copied it "
            f"there (`{ctx.code(first)}`): each copy moves the whole tensor over the link again."
        )
    return rule.finding(
        ctx,
        node,
        f"{said} {fix[0].upper()}{fix[1:]}.",
        devices=[single(ev.value.devs), dst],
        suggestion=fix,
    )


def _assigned_name(ctx: FileContext, move: cst.CSTNode) -> str | None:
    """`h` when the move is the whole value of `h = x.to(d)`, else None."""
    for node in walk(ctx.module):
        if isinstance(node, cst.Assign) and node.value is move and len(node.targets) == 1:
            target = node.targets[0].target
            return ctx.code(target) if isinstance(target, (cst.Name, cst.Attribute)) else None
    return None


def repeats(ctx: FileContext) -> Callable[[Transfer], str]:
    """`repeated`, for the transfers of one file: a module's constant that one line moves to several devices (a
    helper called for each device of a loop) is copied once per device, no repeat."""
    targets: dict[int, set[Devs]] = {}
    ints = module_ints(ctx.module)
    found: list[frozenset[str]] = []

    def stand_ins() -> frozenset[str]:
        """The names the file binds once, to a stand-in batch (`X = torch.randn(BATCH, 64)`)."""
        if not found:
            found.append(_names_of_stand_ins(ctx.module, ints))
        return found[0]

    for ev in ctx.model.facts(Transfer):
        if ev.reads_global_constant:
            targets.setdefault(id(ev.node), set()).add(ev.devs)

    def how(ev: Transfer) -> str:
        if ev.reads_global_constant and len(targets[id(ev.node)]) > 1:
            return ""
        got = repeated(ev, lambda: _in_loop_calling_its_item(ctx, ev.node), ints)
        if got == "again" and ev.again_of is not ev.node and _repeats_on_entering_a_loop(ctx, ev):
            return ""
        if got in ("loop", "again") and _once_per_epoch(ctx, ev.node):
            return ""
        if got == "loop" and _in_a_training_loop(ctx, ev.node):
            made = made_by(ev.value)
            if stand_in_batch(made, ints) or _computed_from_stand_in(made, stand_ins()):
                return ""
        if got == "again" and _runs_once(ctx, ev.node):
            return ""
        return got

    return how


def _once_per_epoch(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is `node` in the body of a loop (its innermost) that runs a training loop of its own, beside it: a nested
    `for`/`while` that calls `.backward()`, an optimizer's `.step()`, or a training step of the program's own
    (`net.train_step(x, y)`, a predictive-coding network updated without autograd)? Then `node` runs once per
    epoch (a validation set moved for its evaluation, `yv.to(dev)` after the steps), one copy among an epoch's
    many steps, not one per step."""
    innermost = None
    for loop in walk(ctx.module):
        if isinstance(loop, (cst.For, cst.While)) and any(n is node for n in walk(loop.body)):
            innermost = loop  # (walk is outermost first: the last one found is the innermost)
    if innermost is None:
        return False
    for inner in walk(innermost.body):
        if (
            isinstance(inner, (cst.For, cst.While))
            and not any(n is node for n in walk(inner))
            and any(isinstance(c, cst.Call) and _a_training_step(c.func) for c in walk(inner.body))
        ):
            return True
    return False


def _in_a_training_loop(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is `node` in a loop that counts steps (`for step in range(n)`, a `while`), not one that brings data (`for x
    in loader`: there the batches come from the loop, and a random tensor moved in it is a constant), whose body
    runs a training step (`.backward()`, an optimizer's `.step()`)?"""
    innermost = None
    for loop in walk(ctx.module):
        if isinstance(loop, (cst.For, cst.While)) and any(n is node for n in walk(loop.body)):
            innermost = loop
    if innermost is None:
        return False
    if isinstance(innermost, cst.For) and not (
        isinstance(innermost.iter, cst.Call) and dotted(innermost.iter.func) == "range"
    ):
        return False
    return any(isinstance(c, cst.Call) and _a_training_step(c.func) for c in walk(innermost.body))


# Factories that draw random data: with a literal shape, a stand-in for what a loader would give.
_RANDOM_FACTORIES = frozenset({"randn", "rand", "randint", "normal"})


def stand_in_batch(made_at: object, ints: Mapping[str, int] | None = None) -> bool:
    """A tensor of random data drawn with a shape the code spells out (`images = torch.rand(16, 3, 32, 32)`):
    a script's stand-in for the batches a loader would give, each step a new one. Moved again in every step of
    a training loop, it stands for the copy each new batch needs in the real program, not for a copy the
    program could drop (the same data moved in a loop that trains nothing, `for _ in range(8): predict(
    X.to(dev))`, still is one)."""
    if not isinstance(made_at, cst.Call) or not isinstance(made_at.func, (cst.Name, cst.Attribute)):
        return False
    name = made_at.func.value if isinstance(made_at.func, cst.Name) else made_at.func.attr.value
    if name not in _RANDOM_FACTORIES or any(
        a.keyword is not None and a.keyword.value == "device" for a in made_at.args
    ):
        return False  # (drawn on a device: a table or a bank kept there, not a host batch a loader would give)
    dims = [a.value for a in made_at.args if a.keyword is None]
    if name == "randint":
        dims = [el.value for el in dims[-1].elements] if dims and isinstance(dims[-1], (cst.Tuple, cst.List)) else []
    elif len(dims) == 1 and isinstance(dims[0], (cst.Tuple, cst.List)):
        dims = [el.value for el in dims[0].elements]
    return bool(dims) and all(
        isinstance(d, cst.Integer) or (isinstance(d, cst.Name) and ints is not None and d.value in ints) for d in dims
    )


def _names_of_stand_ins(module: cst.Module, ints: Mapping[str, int]) -> frozenset[str]:
    """Names bound once in the file, to a stand-in batch (stand_in_batch)."""
    values = name_bindings(module)
    return frozenset(k for k, vs in values.items() if len(vs) == 1 and stand_in_batch(vs[0], ints))


def _computed_from_stand_in(made_at: object, names: frozenset[str]) -> bool:
    """Targets computed on the host from a stand-in batch alone (`y = (X[:, :4].sum(1) > 0).float()`): new
    data with every new batch too."""
    if not isinstance(made_at, cst.BaseExpression) or not names:
        return False
    read = {n.value for n in walk(made_at) if isinstance(n, cst.Name)}
    return bool(read & names) and not any(isinstance(n, cst.Call) and _a_module_call(n) for n in walk(made_at))


def _a_module_call(call: cst.Call) -> bool:
    """A call of something other than a torch function or a tensor method: a module or a helper, whose output
    is not the batch's own data."""
    func = call.func
    return isinstance(func, cst.Name) and func.value not in ("float", "int", "len", "abs")


def _a_training_step(func: cst.BaseExpression) -> bool:
    """`loss.backward()`, `opt.step()`, `train_step(...)`, `model.train_batch(...)`: what a training loop calls."""
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return name in ("backward", "step") or "train" in name.lower()


_LOOPS = (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _runs_once(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Does `node` run once per run of the program: in no loop of its function, and that function the script's
    entry point, called once under `if __name__ == "__main__":` outside any loop and by nothing else in the file
    (`main()`)? A copy made twice there (the targets moved once for each of two evaluations at the end of a
    script) costs one copy in the whole run, not one per step. (A helper called at the top of a file is no
    entry point: a snippet calls once what a training loop calls on every step.)"""
    enclosing = None
    for fn in walk(ctx.module):
        if isinstance(fn, (cst.FunctionDef, cst.Lambda)) and any(n is node for n in walk(fn)):
            enclosing = fn  # (walk is outermost first: the last one found is the innermost)
    if not isinstance(enclosing, cst.FunctionDef):
        return False
    if any(isinstance(loop, _LOOPS) and any(n is node for n in walk(loop)) for loop in walk(enclosing.body)):
        return False
    name = enclosing.name.value
    guarded = 0
    for stmt in ctx.module.body:
        calls = [c for c in walk(stmt) if _calls(c, name)]
        if not calls:
            continue
        if not _is_main_guard(stmt):
            return False  # called by another function, a class or the module's own code
        if any(isinstance(loop, _LOOPS) and any(n is c for n in walk(loop)) for c in calls for loop in walk(stmt)):
            return False
        guarded += len(calls)
    return guarded == 1


def _is_main_guard(stmt: cst.CSTNode) -> bool:
    """`if __name__ == "__main__":`"""
    if not isinstance(stmt, cst.If) or not isinstance(stmt.test, cst.Comparison):
        return False
    names = [n.value for n in walk(stmt.test) if isinstance(n, cst.Name)]
    strings = [n.evaluated_value for n in walk(stmt.test) if isinstance(n, cst.SimpleString)]
    return names == ["__name__"] and strings == ["__main__"]


def _calls(node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == name


def _repeats_on_entering_a_loop(ctx: FileContext, ev: Transfer) -> bool:
    """Is the second copy in a loop that the first is not in, and that rebinds the name copied (`obs = env.obs()`,
    a loop `for t in range(T): critic(obs.to(dev)); obs = env.step(a)`, after `critic(obs.to(dev))` ended the
    previous rollout)? Then only the loop's first pass copies what was copied already: one copy per entry into
    the loop, among the loop's own copies of new values, none that keeping the first would save per pass."""
    node, first = ev.node, ev.again_of
    recv = node.func.value if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) else None
    if not isinstance(recv, cst.Name) or first is None:
        return False
    for loop in walk(ctx.module):
        if not isinstance(loop, (cst.For, cst.While)) or not any(n is node for n in walk(loop.body)):
            continue
        if any(n is first for n in walk(loop)):
            continue
        bound = (x for n in walk(loop.body) for t in assigned(n) for x in walk(t))  # (`obs, r, d = env.step(a)`)
        if any(isinstance(x, cst.Name) and x.value == recv.value for x in bound):
            return True
    return False


def _in_loop_calling_its_item(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is `node` in the body of a `for` loop that calls what it iterates over (`for blk in self.blocks:
    h = blk(h, mask.to(dev))`, `for dev, layer in zip(devs, layers): x = layer(...)`, `self.layers[i](x)`)?"""
    for loop in walk(ctx.module):
        if not isinstance(loop, cst.For) or not any(n is node for n in walk(loop.body)):
            continue
        names = {n.value for n in walk(loop.target) if isinstance(n, cst.Name)}
        for call in walk(loop.body):
            if not isinstance(call, cst.Call):
                continue
            func = call.func
            if isinstance(func, cst.Subscript):
                func = func.slice[0].slice.value if isinstance(func.slice[0].slice, cst.Index) else func
            if isinstance(func, cst.Name) and func.value in names:
                return True
    return False


def repeated(ev: Transfer, in_layer_loop: Callable[[], bool], ints: Mapping[str, int] | None = None) -> str:
    """'call' / 'loop' for a move, on every forward call or loop iteration, of the same
    unchanging value (buffer, parameter, constant) certainly on another device; 'global' for such a
    move of a constant of the module by a function run on every step; 'again' for a value copied a
    second time to the same device on one path, unchanged since; else ''."""
    v = ev.value
    if not conflict(v.devs, ev.devs):
        return ""
    per_pass = ev.again_of is ev.node
    if per_pass and not (ev.bound_outside_loop and ev.target_fixed_in_loop):
        # The same line copying it again on a loop's next pass, to a device that changes with the pass (a mask
        # moved to each layer's GPU, `mask.to(blk.device)`): one copy per layer on that GPU, where one would do.
        # Ids and masks count here, the launches add up with the depth; but only in a loop that calls the layers
        # (`for blk in self.blocks: h = blk(h, mask.to(dev))`): the index a beam search moves to each cached
        # tensor's device (`t.index_select(0, beam_idx.to(t.device))`) is transformers' own idiom.
        return "" if certainly_small(made_by(v), ints) or not in_layer_loop() else "again"
    if ev.again_of is not None and not per_pass:
        # Below the run-time faces' threshold too: a tensor of spelled-out small size, or ids, labels or a mask
        # (a batch-by-sequence tensor at most, whose second copy costs about one launch).
        return "" if certainly_small(made_by(v), ints) or v.index_like else "again"
    if ev.bound_outside_loop and ev.target_fixed_in_loop and not v.invariant:
        # Made once before the loop from anything (a filterbank computed by a helper, a random table),
        # not rebound in it, and moved to the same place every time: every iteration copies that same
        # tensor again. (Moved to the loop's own device, `memory.to(dev)` over stages, it is the hop.)
        return "" if certainly_small(made_by(v), ints) else "loop"
    if not v.invariant:
        return ""
    if ev.reads_unchanging_attribute:
        # self.buffer.to(...) in forward; not a buffer whose size the code spells out, below the run-time
        # faces' threshold (`torch.ones(32)`). A size given by an argument stays reported: a class tried
        # out with tiny sizes (`Model(dim=32)` in a demo) is meant for larger ones.
        return "" if certainly_small(made_by(v), ints) else "call"
    if ev.reads_global_constant:
        # CLASS_WEIGHTS.to(logits.device) in a loss helper called every step: a module's constant copied again.
        return "" if certainly_small(made_by(v), ints) else "global"
    if ev.host_constant_bytes >= REPEAT_MIN_BYTES:
        return "call"  # torch.tril(torch.ones(S, S)).to(dev) in forward: the same data built and copied
    if ev.bound_outside_loop and ev.target_fixed_in_loop and not certainly_small(made_by(v), ints):
        # A tensor made before the loop, moved again in every iteration to the same place; to the loop's own
        # device (`{d: meta.to(d) for d in GPUS}`) it is one copy for each GPU that reads it.
        return "loop"
    return ""


# Factories whose positional integer arguments are the shape (torch.randn(16, 10), torch.zeros((4, 8))).
_SHAPED_FACTORIES = frozenset({"randn", "rand", "zeros", "ones", "empty", "randint", "full"})
# Bytes an element, by the dtype's name (torch.float16, torch.long, ...); a dtype not listed counts as
# the widest, complex128, so that "certainly small" stays certain.
_ITEMSIZE = {
    "bool": 1, "uint8": 1, "int8": 1, "float16": 2, "half": 2, "bfloat16": 2, "int16": 2, "short": 2,
    "float32": 4, "float": 4, "int32": 4, "int": 4, "float64": 8, "double": 8, "int64": 8, "long": 8,
    "complex64": 8, "complex128": 16,
}  # fmt: skip
_WIDEST = 16
# Keywords that do not change how many bytes the tensor has.
_SIZELESS_KEYWORDS = frozenset({"requires_grad", "device", "pin_memory", "generator", "layout", "memory_format"})


def certainly_small(made_at: object, ints: Mapping[str, int] | None = None) -> bool:
    """Was the tensor made with a size the code spells out, fewer than REPEAT_MIN_BYTES in all: a factory
    with a literal shape (float32: 4 bytes an element; randint: int64, 8; a `dtype=` by its width), or
    `torch.tensor(<one number>)` (a loss scale, a flag)? Then repeating its copy wastes about
    one launch, which the run-time faces do not report either (a fixed toy batch moved in a loop).
    A dimension may be a name of `ints`: the module's own constants (`ACT = 3`, module_ints), spelled out
    as plainly as a literal. Anything else (a size or dtype the code does not spell out) keeps the finding."""
    if not isinstance(made_at, cst.Call) or not isinstance(made_at.func, (cst.Name, cst.Attribute)):
        return False
    name = made_at.func.value if isinstance(made_at.func, cst.Name) else made_at.func.attr.value
    itemsize = _dtype_size(made_at)
    if itemsize is None:
        return False
    if name in ("tensor", "scalar_tensor"):
        # One number (a loss scale, a flag): the smallest copy there is. A literal list stays reported:
        # class weights and tables grow with the problem (the number of classes), which a literal in the
        # code understates.
        data = [a.value for a in made_at.args if a.keyword is None]
        return len(data) == 1 and a_number(data[0])
    positional = [a for a in made_at.args if a.keyword is None]
    if name in ("linspace", "logspace") and len(positional) >= 3:
        # linspace(start, end, steps): `steps` elements (a `steps=` keyword leaves the size unknown here)
        steps = positional[2].value
        n = ints.get(steps.value) if isinstance(steps, cst.Name) and ints else None
        n = int(steps.evaluated_value) if isinstance(steps, cst.Integer) else n
        return n is not None and n * (itemsize or 4) < REPEAT_MIN_BYTES
    if name not in _SHAPED_FACTORIES:
        return False
    default = 4
    if name == "randint":  # randint(high, size) / randint(low, high, size): int64, the shape is last
        if not positional or not isinstance(positional[-1].value, (cst.Tuple, cst.List)):
            return False
        default = 8
        positional = positional[-1:]
    elif name == "full":  # full(size, fill_value): the shape is first, and a tuple
        if not positional or not isinstance(positional[0].value, (cst.Tuple, cst.List)):
            return False
        positional = positional[:1]
    dims: list[cst.BaseExpression] = []
    for arg in positional:
        if isinstance(arg.value, (cst.Tuple, cst.List)):
            dims.extend(el.value for el in arg.value.elements)
        else:
            dims.append(arg.value)
    elements = 1
    for d in dims:
        if isinstance(d, cst.Integer):
            elements *= int(d.evaluated_value)
        elif isinstance(d, cst.Name) and ints and d.value in ints:
            elements *= ints[d.value]
        else:
            return False
    return bool(dims) and elements * (itemsize or default) < REPEAT_MIN_BYTES


def module_ints(module: cst.Module) -> dict[str, int]:
    """The module's int constants: names its top level binds once, to an int literal (`ACT = 3`,
    `OBS, ACT = 12, 3`), and nowhere else at the top level."""
    bound: dict[str, int | None] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            for name in _names_bound_in(stmt):
                bound[name] = None
            continue
        for small in stmt.body:
            pairs: list[tuple[cst.BaseExpression, cst.BaseExpression | None]] = []
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    t, v = target.target, small.value
                    if isinstance(t, (cst.Tuple, cst.List)) and isinstance(v, (cst.Tuple, cst.List)):
                        if len(t.elements) == len(v.elements):
                            pairs.extend((te.value, ve.value) for te, ve in zip(t.elements, v.elements))
                        else:
                            pairs.extend((te.value, None) for te in t.elements)
                    elif isinstance(t, (cst.Tuple, cst.List)):
                        pairs.extend((te.value, None) for te in t.elements)
                    else:
                        pairs.append((t, v))
            elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                pairs.append((small.target, small.value if isinstance(small, cst.AnnAssign) else None))
            for bound_to, value in pairs:
                if isinstance(bound_to, cst.Name):
                    name = bound_to.value
                    if name in bound or not isinstance(value, cst.Integer):
                        bound[name] = None
                    else:
                        bound[name] = int(value.evaluated_value)
    return {name: n for name, n in bound.items() if n is not None}


def _names_bound_in(stmt: cst.CSTNode) -> list[str]:
    """Names a compound statement of the top level binds there (a `for` target, a def, a class, an `if`'s
    assignments): taken as rebound, whatever the value."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return [stmt.name.value]
    names: list[str] = []

    class _Names(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            names.extend(_target_names(node.target))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            names.extend(_target_names(node.target))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            names.extend(_target_names(node.target))

        def visit_For(self, node: cst.For) -> None:
            names.extend(_target_names(node.target))

        def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
            names.extend(_target_names(node.target))

    stmt.visit(_Names())
    return names


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in _target_names(el.value)]
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []


def _dtype_size(call: cst.Call) -> int | None:
    """Bytes an element the call's `dtype=` asks for: 0 when it gives none (the factory's default), None
    when a keyword the size may depend on (`size=`, `out=`) makes the size unknown here."""
    size = 0
    for arg in call.args:
        if arg.keyword is None or arg.keyword.value in _SIZELESS_KEYWORDS:
            continue
        if arg.keyword.value != "dtype":
            return None
        dtype = arg.value
        name = dtype.attr.value if isinstance(dtype, cst.Attribute) else ""
        size = _ITEMSIZE.get(name, _WIDEST)
    return size


def _modules_moved_in_turn(rule: Rule, ctx: FileContext) -> Iterator[Finding]:
    """A line in the forward pass that moves a module of the instance to one GPU and then to another (a shared
    part moved next to each stage that asks for it): every forward copies its weights to and fro."""
    targets: dict[int, tuple[cst.CSTNode, cst.BaseExpression, list[str]]] = {}
    for ev in ctx.model.facts(ModuleMovedInForward):
        dev = single(ev.devs)
        if dev is None or not dev.startswith("cuda:"):
            continue
        _, _, devs = targets.setdefault(id(ev.node), (ev.node, ev.owner, []))
        if dev not in devs:
            devs.append(dev)
    for node, owner, devs in targets.values():
        if len(devs) < 2:
            continue
        name = ctx.code(owner)
        yield rule.finding(
            ctx,
            node,
            f"`{ctx.code(node)}` moves the module `{name}` to {' and to '.join(map(show, devs))} in turn, inside the "
            f"forward pass: every forward copies all its weights over the link, once per move. Keep `{name}` on "
            f"one device, and move its input there and its output back instead (activations are usually far "
            f"smaller than weights).",
            devices=devs,
            modules=[name],
            suggestion=f"leave `{name}` where it is; move what it takes and gives",
        )
