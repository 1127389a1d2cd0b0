"""Wording shared by the rules' messages: how to name a split model, a value, a device."""

from __future__ import annotations

from collections.abc import Container
from typing import Protocol

import libcst as cst

from mpcheck.devices.events import CallSite
from mpcheck.devices.values import LOSS_OF, Obj, SeqV, Val, distinct_devices, is_splitish, placements, show
from mpcheck.devices.ways import Path
from mpcheck.finding import Fix


class Source(Protocol):
    """What the wording needs of a file (the rules' FileContext): a node's text and position."""

    def code(self, node: cst.CSTNode) -> str: ...

    def line(self, node: cst.CSTNode) -> int: ...

    def span(self, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int]]: ...


def split_desc(v: Val | None) -> str:
    """'an instance of SplitNet, whose submodules sit on cuda:0 (enc) and cuda:1 (dec)'."""
    if isinstance(v, Obj) and v.split:
        by_dev: dict[str, list[str]] = {}
        for attr, dev in v.split:
            by_dev.setdefault(dev, []).append(attr)
        parts = [f"{show(d)} ({', '.join(a[:3])}{', ...' if len(a) > 3 else ''})" for d, a in by_dev.items()]
        cls = v.cls.name if v.cls is not None else v.label
        if not cls:
            return f"a model split over {and_list(parts)}"
        return f"{article(cls)} {cls} split over {and_list(parts)}"
    if isinstance(v, Obj) and v.dispatched:
        if v.dispatched.startswith("a device map"):  # library._maybe_split_map
            return f"loaded with {v.dispatched}, which may split it over several GPUs"
        if v.dispatched.startswith("device_map"):
            return f"a model dispatched over several devices with {v.dispatched}"
        return f"a model split over several devices by {v.dispatched}"
    if isinstance(v, SeqV):
        held = _held_split(v)
        if held is not None:
            return f"a {v.kind} holding {split_desc(held)}"
        ds = distinct_devices(d for d, _ in placements(v))
        return "a module container split over " + and_list([show(d) for d in ds])
    return "a model split over several devices"


def _held_split(v: Val | None) -> Val | None:
    """The split model a plain list or tuple holds ([model, model]), else None."""
    if isinstance(v, SeqV) and not v.module and v.items:
        return next((i for i in v.items if is_splitish(i)), None)
    return None


def split_devices(v: Val | None) -> list[str]:
    held = _held_split(v)
    if held is not None:
        return split_devices(held)
    if isinstance(v, Obj) and v.split:
        return distinct_devices(d for _, d in v.split)
    if isinstance(v, SeqV):
        return distinct_devices(d for d, _ in placements(v))
    return []


def split_modules(v: Val | None) -> list[str]:
    held = _held_split(v)
    if held is not None:
        return split_modules(held)
    if isinstance(v, Obj) and v.split:
        return list(dict.fromkeys(a for a, _ in v.split))
    return []


def value_text(ctx: Source, expr: cst.CSTNode | None, v: Val | None, default: str = "a tensor") -> str:
    """How to name a value in a message: its source text, else its label."""
    if expr is not None:
        return ctx.code(expr)
    if isinstance(v, Obj) and v.label:
        return v.label
    return default


# Calls that run the function given as their first argument (`checkpoint(stage, h)` runs `stage(h)`): a
# message names that function as what was called.
CALL_RUNNERS = frozenset({"checkpoint", "checkpoint_sequential"})


def callee(call: cst.Call) -> cst.BaseExpression:
    """What a call runs: its function, or for `checkpoint(stage, h)` the function it runs (`stage`)."""
    f = call.func
    name = f.attr.value if isinstance(f, cst.Attribute) else f.value if isinstance(f, cst.Name) else ""
    if name in CALL_RUNNERS and call.args and call.args[0].keyword is None and not call.args[0].star:
        return call.args[0].value
    return f


def origin_text(ctx: Source, v: Val) -> str:
    """'moved to cuda:0 at line 12'."""
    if isinstance(v, Obj) and v.origin == "output of":
        if isinstance(v.at, cst.Call):
            return f"output of `{ctx.code(callee(v.at))}`, line {ctx.line(v.at)}"
        return "output of a module"
    if isinstance(v, Obj) and v.origin == LOSS_OF and isinstance(v.at, cst.Call):
        return f"computed from the loss `{ctx.code(v.at.func)}`, line {ctx.line(v.at)}"
    if isinstance(v, Obj) and v.origin:
        if v.at is not None:
            return f"{v.origin}, line {ctx.line(v.at)}"
        return v.origin
    return "where it was computed"


def path_text(ctx: Source, path: Path | None) -> str:
    """' when `tf and random.random() < p` holds (line 39)': the way through an `if` on which a value is where a
    finding says (values.Path); '' without one."""
    if path is None:
        return ""
    test = ctx.code(path.test)
    if len(test) > 60:
        test = test[:57] + "..."
    return f" when `{test}` {'holds' if path.taken else 'does not hold'} (line {ctx.line(path.test)})"


def via_text(ctx: Source, via: cst.CSTNode | CallSite | None) -> str:
    """' (when called by `train_one_epoch(model, loader, model.devices[0])` at line 30)': the call whose
    arguments made the devices of a fact inside a helper known (events.Fact.via); '' without one.
    A call in another file is named by its path too: '... at main.py:11)'; one reached through
    calls in other files names each, outermost first: ' (when called through `engine.train(...)` at
    main.py:11 -> `utils.step(model, batch, dev)` at engine.py:7)'."""
    if via is None:
        return ""
    if isinstance(via, CallSite):
        if not via.chain:
            return f" (when called by `{via.code}` at {via.path}:{via.line})"
        links = [f"`{_short_call(c.code)}` at {c.path}:{c.line}" for c in via.chain]
        return f" (when called through {' -> '.join([*links, f'`{via.code}` at {via.path}:{via.line}'])})"
    text = ctx.code(via)
    if len(text) > 80 and isinstance(via, cst.Call):
        text = f"{ctx.code(via.func)}(...)"
    return f" (when called by `{text}` at line {ctx.line(via)})"


def _short_call(code: str) -> str:
    """`engine.train(...)` for a long call's text: the outer links of a chain name their callee only."""
    head, paren, _ = code.partition("(")
    return f"{head}(...)" if paren and len(code) > 40 else code


MODE_WORDS = {
    "eval": " (on the path taken in eval mode, when `self.training` is False)",
    "train": " (on the training path)",
    "no_grad": " (on the no-grad path)",
}


def root_name(expr: cst.BaseExpression | None, modules: Container[str] = ()) -> str | None:
    """`pred` for `pred.squeeze(-1)`, `labels` for `labels[..., 1:]`: the variable an expression reads.
    None for a name in `modules` (those the file's imports bind): `torch.zeros(8)` reads no variable."""
    while expr is not None:
        if isinstance(expr, cst.Name):
            return expr.value if expr.value not in modules else None
        if isinstance(expr, cst.Call):
            expr = expr.func.value if isinstance(expr.func, cst.Attribute) else None
        elif isinstance(expr, cst.Subscript):
            if _string_key(expr):
                return None  # `batch["labels"]`: an entry of a mapping, not the mapping, is what moves
            expr = expr.value
        elif isinstance(expr, cst.Attribute):
            return None if not isinstance(expr.value, cst.Name) or expr.value.value != "self" else None
        else:
            return None
    return None


def _string_key(sub: cst.Subscript) -> bool:
    return len(sub.slice) == 1 and isinstance(getattr(sub.slice[0].slice, "value", None), cst.SimpleString)


def move_fix(ctx: Source, expr: cst.CSTNode | None, target_code: str) -> Fix | None:
    """A Fix that appends `.to(<target>)` to an argument that is a plain name or
    attribute: a transfer changes no value, and on the right device it is a
    no-op, so the edit is safe even where the analysis were wrong."""
    if not isinstance(expr, (cst.Name, cst.Attribute)) or expr.lpar:
        return None
    (line, col), (end_line, end_col) = ctx.span(expr)
    return Fix(line, col, end_line, end_col, f"{ctx.code(expr)}.to({target_code})", safe=True)


def moved_tensor(expr: cst.CSTNode | None) -> cst.BaseExpression | None:
    """`t` when `expr` is a move `t.to(...)` / `t.cuda()` / `t.cpu()`, else None."""
    if (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in ("to", "cuda", "cpu")
    ):
        return expr.func.value
    return None


def plural(n: int, noun: str) -> str:
    """'1 crossing', '3 crossings'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def and_list(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def article(word: str) -> str:
    """'a' or 'an' before `word` (by its first letter: 'an Alt split', 'a SplitNet')."""
    return "an" if word[:1].lower() in "aeiou" else "a"
