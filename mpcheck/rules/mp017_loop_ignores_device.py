"""MP017: a loop over several devices in an __init__ builds modules but never uses its device,
so what it builds, meant one set per device, all ends on one device; or a list of devices is made by
a loop that never uses its index, so every stage it places gets the same one; or hooks made in a loop
read its device when they run, after the loop, so every one moves to the last pass's device; or copies moved
to each device are cached under `device.type`, which every GPU shares, so all get the first one's copy; or a cache
that every caller shares (devices/shared_caches.py) is filled for modules on two GPUs under one key."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst

from mpcheck.devices.events import (
    DeviceListIgnoresIndex,
    DevicePickIgnoresIndex,
    LateBoundHookDevice,
    SharedCacheWrite,
    ShortZip,
    UnusedLoopDevice,
)
from mpcheck.devices.names import dotted
from mpcheck.devices.values import show
from mpcheck.devices.walk import walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class LoopIgnoresDevice(Rule):
    code = "MP017"
    # (`if a.type != device.type: m.to(device)` in a helper that names no GPU: its callers pass the devices)
    needs = (*FLOW_WORDS, ".type != ")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in ctx.model.facts(UnusedLoopDevice):
            loop = ev.node
            assert isinstance(loop, cst.For)
            what = _built(ev.count, ev.built)
            where = "stay on the CPU" if ev.landed == "cpu" else f"all end on {show(ev.landed)}"
            devices = ", ".join(map(show, ev.devices))
            yield self.finding(
                ctx,
                loop.target,
                f"`for {ev.name} in {ctx.code(loop.iter)}` runs once per device ({devices}) and builds {what}, "
                f"but never uses `{ev.name}`: they {where} instead of one set on each device. Place what each "
                f"pass builds on `{ev.name}` (`.to({ev.name})`).",
                devices=[*ev.devices, ev.landed],
                modules=list(ev.built),
                suggestion=f"add `.to({ev.name})` to the modules the loop builds",
            )
        for listed in once_per_node(ctx.model.facts(DeviceListIgnoresIndex)):
            name, loop = listed.name, listed.loop
            made = (
                f"`{ctx.code(loop)}`"
                if not isinstance(loop, cst.For)
                else f"`{ctx.code(listed.node)}`, appended in `for {name} in {ctx.code(loop.iter)}`,"
            )
            yield self.finding(
                ctx,
                listed.node,
                f"{made} makes one device per `{name}` but never uses `{name}`: every item is the same device, so the "
                f"stages placed by this list all land on one GPU instead of one each. Make each item from `{name}` "
                f"(e.g. `torch.device('cuda', first + {name})`).",
                suggestion=f"use `{name}` in the device each item names",
            )
        for pick in once_per_node(ctx.model.facts(DevicePickIgnoresIndex)):
            sub = pick.node
            if isinstance(sub, (cst.IfExp, cst.If)):
                yield _one_sided_choice(self, ctx, pick, sub)
                continue
            assert isinstance(sub, cst.Subscript)
            holder, index = ctx.code(sub.value), ctx.code(sub.slice[0].slice)
            among = ", ".join(map(show, pick.among))
            yield self.finding(
                ctx,
                sub,
                f"`{ctx.code(sub)}` picks one of {len(pick.among)} devices ({among}) for each `{pick.name}`, but "
                f"`{index}` gives the same one, {show(pick.picked)}, on every pass of "
                f"`{_loop_head(ctx, pick.loop)}`: everything placed from it lands on that device instead of being "
                f"spread over the list. Scale the index to the list (e.g. `{pick.name} * len({holder}) // n` for "
                f"`n` passes).",
                devices=[pick.picked, *pick.among],
                suggestion=f"spread `{index}` over the {len(pick.among)} devices of `{holder}`",
            )
        for late in once_per_node(ctx.model.facts(LateBoundHookDevice)):
            name, loop = late.name, late.loop
            made = f"`{late.node.name.value}`" if isinstance(late.node, cst.FunctionDef) else "lambda"
            yield self.finding(
                ctx,
                late.node,
                f"the hook {made} that `for {ctx.code(loop.target)} in {ctx.code(loop.iter)}` registers with "
                f"`{late.registrar}` reads `{name}` when it runs, after the loop, not when it is made: every hook "
                f"moves to the device `{name}` held on the loop's last pass, so the modules of the other passes get "
                f"their input on that device. Bind it when the hook is made: a parameter `{name}={name}`.",
                suggestion=f"add `{name}={name}` to the hook's parameters (`lambda mod, args, {name}={name}: ...`)",
            )
        shorts = list(once_per_node(ctx.model.facts(ShortZip)))
        placing = _placing_loops(ctx.module) if shorts else {}  # (a walk of the file: only where a zip is short)
        for short in shorts:
            placed, rest = placing.get(short.node, (None, ()))
            if placed is None or _named_after(placed, short.modules_at, rest):
                continue  # a zip that places nothing (pairs for a log, a check), or places the rest next
            if short.parts:
                yield self.finding(
                    ctx,
                    short.node,
                    f"`{ctx.code(short.node)}` pairs 1 module with {short.devices} devices: `{_loop_head(ctx, placed)}` "
                    f"moves all of it, a container of {short.parts} parts, to the first device, and the other devices "
                    "get nothing. Zip the parts themselves with the devices (the container, not what holds it).",
                    suggestion="zip the container's parts with the devices",
                )
                continue
            yield self.finding(
                ctx,
                short.node,
                f"`{ctx.code(short.node)}` pairs {short.modules} modules with {short.devices} devices and stops at the "
                f"shorter: `{_loop_head(ctx, placed)}` places the first {short.devices} only, and the other "
                f"{short.modules - short.devices} stay where they were built. Give it one device per module (a list "
                f"as long as the modules, e.g. `[devices[i * len(devices) // n] for i in range(n)]`).",
                suggestion="zip the modules with a list of one device per module",
            )
        yield from _shared_caches(self, ctx)
        for query, loop, name in _queries_of_the_current_gpu(ctx.module) if "torch.cuda." in ctx.source else ():
            call = ctx.code(query.func)
            yield self.finding(
                ctx,
                query,
                f"`{ctx.code(query)}` in `{_loop_head(ctx, loop)}` asks about the current GPU on every pass: `{name}` "
                f"is never used, so each pass reads the same device (cuda:0 unless set_device moved it) and every "
                f"GPU gets its answer; a pick made from them lands on one GPU. Pass the device: "
                f"`{call}({name})`.",
                suggestion=f"`{call}({name})`",
            )
        for key, holder, device in _copies_keyed_by_type(ctx.module) if ".type" in ctx.source else ():
            yield self.finding(
                ctx,
                key,
                f"`{holder}` holds copies moved to `{device}` but is keyed by `{device}.type`, which is 'cuda' for "
                f"every GPU: the copy made for the first GPU asked is handed to all the others, whose ops then mix "
                f"devices. Key it by the device itself (`{device}`, or `str({device})`).",
                suggestion=f"use `{device}` (or `str({device})`) as the key",
            )
        for test, move, device in _moves_guarded_by_type(ctx.module) if ".type" in ctx.source else ():
            yield self.finding(
                ctx,
                test,
                f"`{ctx.code(test)}` compares device types only: cuda:0 and cuda:1 are both 'cuda', so "
                f"`{ctx.code(move)}` is skipped for a module or tensor already on another GPU, and it stays there. "
                f"Compare the devices themselves (`!=` of the two devices, not of their `.type`).",
                suggestion=f"compare the devices, not their types, before moving to `{device}`",
            )


def _built(n: int, names: tuple[str, ...]) -> str:
    """'4 `RefineBlock` modules', '6 modules (`Linear`, `LayerNorm`)'."""
    if len(names) == 1:
        return f"{n} `{names[0]}` module{'s' if n != 1 else ''}"
    return f"{n} modules ({', '.join(f'`{x}`' for x in names)})"


def _one_sided_choice(
    rule: Rule, ctx: FileContext, pick: DevicePickIgnoresIndex, choice: cst.IfExp | cst.If
) -> Finding:
    """`devices[0] if i < n else devices[1]` in `for i in range(n)` (or an `if` / `else` that sets one name): the
    test holds on every pass."""
    test = ctx.code(choice.test)
    what = f"`{ctx.code(choice)}`" if isinstance(choice, cst.IfExp) else "the `if`"
    never = next(d for d in pick.among if d != pick.picked)
    verdict = "holds" if pick.picked == pick.among[0] else "fails"
    return rule.finding(
        ctx,
        choice if isinstance(choice, cst.IfExp) else choice.test,
        f"`{test}` {verdict} on every pass of `{_loop_head(ctx, pick.loop)}`, so {what} picks "
        f"{show(pick.picked)} each time and never {show(never)}: everything placed from it lands on one device "
        f"instead of being split. Compare `{pick.name}` with the split point (e.g. half the passes).",
        devices=[pick.picked, never],
        suggestion=f"change `{test}` so that some passes pick {show(never)}",
    )


def _loop_head(ctx: FileContext, loop: cst.CSTNode) -> str:
    """`for i in range(n)`: the loop as its head reads (a comprehension's `for` clause)."""
    if isinstance(loop, cst.For):
        return f"for {ctx.code(loop.target)} in {ctx.code(loop.iter)}"
    clause = getattr(loop, "for_in", None)
    if isinstance(clause, cst.CompFor):
        return f"for {ctx.code(clause.target)} in {ctx.code(clause.iter)}"
    return "the loop"


_MOVES = frozenset({"to", "cuda"})


def _shared_caches(rule: Rule, ctx: FileContext) -> Iterator[Finding]:
    """A write into a cache every caller shares, seen for modules on two GPUs under one key (or keys not known):
    whichever runs first fills it, and the other reads a tensor on the wrong GPU."""
    by_node: dict[int, list[SharedCacheWrite]] = {}
    for w in ctx.model.facts(SharedCacheWrite):
        by_node.setdefault(id(w.node), []).append(w)
    for writes in by_node.values():
        if any(w.key is None for w in writes):
            devices = sorted({w.device for w in writes})
        else:  # constant keys: only a key written for two GPUs is shared by them
            per_key: dict[str | None, set[str]] = {}
            for w in writes:
                per_key.setdefault(w.key, set()).add(w.device)
            devices = sorted({d for ds in per_key.values() if len(ds) > 1 for d in ds})
        if len(devices) < 2:
            continue
        w = writes[0]
        index = w.node.slice[0].slice if isinstance(w.node, cst.Subscript) else None
        key = ctx.code(index.value) if isinstance(index, cst.Index) else "the key"
        at = w.key_at if w.key_at is not None else w.node
        made = ctx.code(at) if at is not w.node else key  # (the key as the code makes it: `seq_len` of `key = seq_len`)
        where = "this line" if ctx.line(at) == ctx.line(w.node) else f"line {ctx.line(w.node)}"
        yield rule.finding(
            ctx,
            at,
            f"`{w.holder}` is {w.kind}, one dict for every caller, and {where} stores a tensor in it under `{key}` "
            f"for modules on {' and '.join(map(show, devices))}: whichever runs first fills the entry, and the others "
            f"read a tensor on the wrong GPU. Key it by the device too (`({made}, {w.device_text or 'its device'})`) "
            f"or keep the cache per module (an attribute set in `__init__`).",
            devices=devices,
            suggestion=f"add the device to the key of `{w.holder}`, or make the cache per module",
        )


# torch.cuda's queries about one GPU, the current one when no device is given.
_PER_GPU_QUERIES = frozenset(
    f"torch.cuda.{name}"
    for name in (
        "mem_get_info",
        "memory_allocated",
        "memory_reserved",
        "max_memory_allocated",
        "max_memory_reserved",
        "memory_stats",
        "memory_summary",
        "utilization",
        "temperature",
        "power_draw",
        "clock_rate",
        "get_device_properties",
        "get_device_name",
        "get_device_capability",
    )
)


def _queries_of_the_current_gpu(module: cst.Module) -> Iterator[tuple[cst.Call, cst.CSTNode, str]]:
    """(the query, its loop, the loop's name) for a torch.cuda query about one GPU called without a device in a
    loop over the GPUs (`for`, or a comprehension) whose item never reads the loop's name: `[torch.cuda.mem_get_info()[0] for i
    in range(torch.cuda.device_count())]`. A name that says it is unused (`_`) is taken at its word."""
    for loop in walk(module):
        body: cst.CSTNode
        if isinstance(loop, cst.For):
            target, over, body = loop.target, loop.iter, loop.body
        elif isinstance(loop, (cst.ListComp, cst.GeneratorExp, cst.SetComp)) and loop.for_in.inner_for_in is None:
            target, over, body = loop.for_in.target, loop.for_in.iter, loop.elt
        elif isinstance(loop, cst.DictComp) and loop.for_in.inner_for_in is None:
            target, over = loop.for_in.target, loop.for_in.iter
            body = cst.Tuple([cst.Element(loop.key), cst.Element(loop.value)])
        else:
            continue
        if not isinstance(target, cst.Name) or target.value.startswith("_") or not _over_gpus(over):
            continue
        name = target.value
        if any(isinstance(n, cst.Name) and n.value == name for n in walk(body)):
            continue
        for n in walk(body):
            if isinstance(n, cst.Call) and not n.args and dotted(n.func) in _PER_GPU_QUERIES:
                yield n, loop, name


def _over_gpus(iterable: cst.BaseExpression) -> bool:
    """A loop over the GPUs, as its iterable's names say (`range(torch.cuda.device_count())`, `devices`,
    `range(args.n_gpus)`): not an epoch or batch loop, whose passes may well ask the current GPU each time."""
    return any(
        isinstance(n, cst.Name) and ("gpu" in n.value.lower() or "device" in n.value.lower()) for n in walk(iterable)
    )


def _moves_guarded_by_type(module: cst.Module) -> Iterator[tuple[cst.CSTNode, cst.Call, str]]:
    """(the test, the move, the device) for `if a.type != device.type: m.to(device)` (or `.cuda(device)`): a
    guard that asks the kind of device only, before a move to a device that may carry an index."""
    for node in walk(module):
        if not isinstance(node, cst.If) or not isinstance(node.test, cst.Comparison):
            continue
        test = node.test
        if len(test.comparisons) != 1 or not isinstance(test.comparisons[0].operator, cst.NotEqual):
            continue
        sides = (test.left, test.comparisons[0].comparator)
        if not all(isinstance(x, cst.Attribute) and x.attr.value == "type" for x in sides):
            continue
        devices = {dotted(x.value) for x in sides} - {None}  # type: ignore[attr-defined]
        for n in walk(node.body):
            if (
                isinstance(n, cst.Call)
                and isinstance(n.func, cst.Attribute)
                and n.func.attr.value in ("to", "cuda")
                and n.args
                and n.args[0].keyword is None
                and dotted(n.args[0].value) in devices
            ):
                yield test, n, dotted(n.args[0].value) or ""
                break


def _copies_keyed_by_type(module: cst.Module) -> Iterator[tuple[cst.CSTNode, str, str]]:
    """(the `.type` key, the holder, the device) for `cache[d.type] = x.to(d)` (or a name bound to `d.type` in
    the same function, or `cache.setdefault(d.type, x.to(d))`): a per-device cache whose key drops the index."""
    for fn in walk(module):
        if not isinstance(fn, cst.FunctionDef):
            continue
        nodes = list(walk(fn.body))
        typed: dict[str, tuple[cst.CSTNode, str]] = {}  # a name bound once, to `d.type` -> (that expression, d)
        bound: dict[str, int] = {}
        for node in nodes:
            if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name):
                bound[node.target.value] = bound.get(node.target.value, 0) + 1
            if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                if (of := _type_of(node.value)) is not None:
                    typed[node.targets[0].target.value] = (node.value, of)
        typed = {k: v for k, v in typed.items() if bound.get(k) == 1}
        for node in nodes:
            if isinstance(node, cst.Assign) and len(node.targets) == 1:
                target, value = node.targets[0].target, node.value
                if isinstance(target, cst.Subscript) and len(target.slice) == 1:
                    index = target.slice[0].slice
                    if isinstance(index, cst.Index):
                        hit = _key(index.value, typed)
                        if hit is not None and _moved_to(value) == hit[1]:
                            yield hit[0], dotted(target.value) or "the cache", hit[1]
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and len(node.args) == 2:
                if node.func.attr.value == "setdefault":
                    hit = _key(node.args[0].value, typed)
                    if hit is not None and _moved_to(node.args[1].value) == hit[1]:
                        yield hit[0], dotted(node.func.value) or "the cache", hit[1]


def _type_of(node: cst.BaseExpression) -> str | None:
    """`d` for `d.type`."""
    if isinstance(node, cst.Attribute) and node.attr.value == "type":
        return dotted(node.value)
    return None


def _key(node: cst.BaseExpression, typed: dict[str, tuple[cst.CSTNode, str]]) -> tuple[cst.CSTNode, str] | None:
    of = _type_of(node)
    if of is not None:
        return node, of
    return typed.get(node.value) if isinstance(node, cst.Name) else None


def _moved_to(value: cst.BaseExpression) -> str | None:
    """`d` for `x.to(d)` / `x.cuda(d)` (through a chain after it: `x.to(d).coalesce()`)."""
    node = value
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        if node.func.attr.value in _MOVES and node.args and node.args[0].keyword in (None,):
            return dotted(node.args[0].value)
        if node.func.attr.value in _MOVES:
            for a in node.args:
                if a.keyword is not None and a.keyword.value == "device":
                    return dotted(a.value)
        node = node.func.value
    return None


def _placing_loops(module: cst.Module) -> dict[cst.CSTNode, tuple[cst.For, Sequence[cst.BaseStatement]]]:
    """The `zip(...)` calls that placing loops iterate (`_places_pairs`), by call, with the statements after the
    loop in its block."""
    found: dict[cst.CSTNode, tuple[cst.For, Sequence[cst.BaseStatement]]] = {}
    for block in walk(module):
        if isinstance(block, cst.IndentedBlock) or isinstance(block, cst.Module):
            for i, loop in enumerate(block.body):
                if isinstance(loop, cst.For) and _places_pairs(loop):
                    found[loop.iter] = (loop, block.body[i + 1 :])
    return found


def _named_after(loop: cst.For, modules_at: int, rest: Sequence[cst.BaseStatement]) -> bool:
    """Does a statement after the loop name the modules it zipped (`model.blocks[2:]` placed next)? (Not the
    devices: `self.head.to(devices[-1])` after it places another module.)"""
    args = loop.iter.args  # type: ignore[attr-defined]
    zipped = dotted(args[modules_at].value) if modules_at < len(args) else None
    return zipped is not None and any(
        dotted(n) == zipped for stmt in rest for n in walk(stmt) if isinstance(n, (cst.Name, cst.Attribute))
    )


def _places_pairs(loop: cst.For) -> bool:
    """Is `loop` a `for a, b in zip(...)` whose body moves one of its names (`a.to(b)`, `a.cuda(b)`)?"""
    if not (isinstance(loop.iter, cst.Call) and dotted(loop.iter.func) == "zip"):
        return False
    names = {n.value for n in walk(loop.target) if isinstance(n, cst.Name)}
    return any(
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in _MOVES
        and isinstance(node.func.value, cst.Name)
        and node.func.value.value in names
        for node in walk(loop.body)
    )
