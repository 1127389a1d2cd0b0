"""Forward pre-hooks of the file's own, run where the module is called.

    def hook(mod, args, kwargs):
        return tuple(a.to(device) for a in args), kwargs

    stage.register_forward_pre_hook(hook, with_kwargs=True)

A pre-hook runs before `forward` and may replace its inputs: with its result when it
returns one (with `with_kwargs=True`, an `(args, kwargs)` pair; without, the new
positional arguments, a tuple or one value), the inputs as given when it returns
None. Where the hook is a function of the file, it is run with the inputs (the
helper it was defined in is not: its local names are unknown in it), and what it
hands on is what `forward` gets: a keyword argument it passes back untouched is
still where the caller left it (accelerate-style input movers that forget kwargs).
Where the hook is not known (a method, a library's), or what it returns is not, the
inputs are taken to be anywhere, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from mpcheck.devices.values import Const, DictV, FuncRef, Obj, SeqV, Val
from mpcheck.devices.walk import walk

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.calls import Calls
    from mpcheck.devices.program import State

PRE_HOOK = "register_forward_pre_hook"
PRE_HOOKS_KEY = "forward pre-hooks"  # in a module's `extra`: ((the hook's value, with_kwargs), ...) in order


def registered(extra: dict[str, object], args: list[Val], kwargs: dict[str, Val]) -> dict[str, object]:
    """`extra` with the pre-hook of `register_forward_pre_hook(*args, **kwargs)` added."""
    hook = args[0] if args else kwargs.get("hook")
    flag = kwargs.get("with_kwargs")
    with_kwargs = isinstance(flag, Const) and flag.value is True
    known = isinstance(flag, Const) or flag is None
    before = extra.get(PRE_HOOKS_KEY, ())
    assert isinstance(before, tuple)
    return {**extra, PRE_HOOKS_KEY: (*before, (hook if known else None, with_kwargs))}


def run(
    calls: Calls, mod: Obj, args: list[Val], kwargs: dict[str, Val], st: State, node: cst.CSTNode
) -> tuple[list[Val], dict[str, Val]] | None:
    """The inputs `forward` gets after the module's pre-hooks, in order; None where one is not known."""
    hooks = (mod.extra or {}).get(PRE_HOOKS_KEY, ())
    assert isinstance(hooks, tuple)
    for hook, with_kwargs in hooks:
        if not isinstance(hook, FuncRef) or hook.bound is not None:
            return None
        given = [mod, SeqV(tuple(args), kind="tuple")] + ([DictV(dict(kwargs))] if with_kwargs else [])
        result = calls.call_function(hook.info, None, given, {}, st, node, helper=True)
        if isinstance(result, Const) and result.value is None:
            if _returns_a_value(hook.info.node):
                return None  # None on one path, something else on another: joined, not known
            continue
        if with_kwargs:
            if not (isinstance(result, SeqV) and result.items is not None and len(result.items) == 2):
                return None
            new_args, new_kwargs = result.items
            if not (isinstance(new_args, SeqV) and new_args.items is not None and isinstance(new_kwargs, DictV)):
                return None
            if not all(isinstance(k, str) for k in new_kwargs.items):
                return None
            args, kwargs = list(new_args.items), dict(new_kwargs.items)
        elif isinstance(result, SeqV) and result.kind == "tuple" and result.items is not None:
            args = list(result.items)
        elif isinstance(result, Obj) and result.kind not in ("module", "any"):
            args = [result]  # one value: torch wraps it in a tuple
        else:
            return None
    return args, kwargs


def _returns_a_value(fn: cst.CSTNode) -> bool:
    """Does the function (not a function nested in it) have a `return <value>`?"""
    body = fn.body if isinstance(fn, cst.FunctionDef) else None
    if body is None:
        return True
    for n in walk(body):
        if isinstance(n, cst.Return) and n.value is not None:
            return True
    return False
