"""Forward pre-hooks and forward hooks of the file's own, run where the module is called.

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

from mpcheck.devices.program import FuncInfo, params_of
from mpcheck.devices.values import Const, DictV, FuncRef, Obj, SequentialHook, SeqV, Val
from mpcheck.devices.walk import walk

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.calls import Calls
    from mpcheck.devices.program import State

PRE_HOOK = "register_forward_pre_hook"
PRE_HOOKS_KEY = "forward pre-hooks"  # in a module's `extra`: ((the hook's value, with_kwargs), ...) in order
POST_HOOK = "register_forward_hook"
POST_HOOKS_KEY = "forward hooks run"  # the same for the forward hooks, run after `forward`


def registered(
    extra: dict[str, object], args: list[Val], kwargs: dict[str, Val], key: str = PRE_HOOKS_KEY
) -> dict[str, object]:
    """`extra` with the hook of `register_forward_(pre_)hook(*args, **kwargs)` added (under `key`)."""
    before = extra.get(key, ())
    assert isinstance(before, tuple)
    return {**extra, key: (*before, hook_of(args, kwargs))}


def hook_of(args: list[Val], kwargs: dict[str, Val]) -> tuple[Val | None, bool]:
    """(the hook, with_kwargs) of `register_forward_(pre_)hook(*args, **kwargs)`; the hook None when the flag
    is not known (what it is given and gives back is not either)."""
    hook = args[0] if args else kwargs.get("hook")
    flag = kwargs.get("with_kwargs")
    with_kwargs = isinstance(flag, Const) and flag.value is True
    known = isinstance(flag, Const) or flag is None
    return (hook if known else None, with_kwargs)


def as_extra(hooks: tuple[SequentialHook, ...]) -> dict[str, object]:
    """An nn.Sequential's hooks in the form a module's `extra` keeps them (for `run`, `run_after`)."""
    return {
        PRE_HOOKS_KEY: tuple((h.fn, h.with_kwargs) for h in hooks if h.meth == PRE_HOOK),
        POST_HOOKS_KEY: tuple((h.fn, h.with_kwargs) for h in hooks if h.meth == POST_HOOK),
    }


def lambda_hook(calls: Calls, lam: cst.Lambda, st: State) -> FuncRef:
    """A lambda given as a hook (`register_forward_hook(lambda m, i, o: o + steer)`), as a function of the file
    that returns its body, reading the names of where it was made when it runs (Python's late binding), its
    defaults as they were when it was made (`lora=lora` in a loop)."""
    fn = cst.FunctionDef(
        name=cst.Name("lambda_hook"),
        params=lam.params,
        body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Return(lam.body)])]),
    )
    defaults = {name: calls.default_param_value(name, d, st.env) for name, d in params_of(fn) if d is not None}
    return FuncRef(FuncInfo(node=fn, name="<lambda>", qual="<lambda>", closure=st.env, defaults=defaults))


def call_hook(calls: Calls, hook: Val, given: list[Val], st: State, node: cst.CSTNode) -> Val | None:
    """Runs a hook of the file's (a function, a lambda, an object with `__call__`); None when it is not one."""
    if isinstance(hook, FuncRef) and hook.bound is None:
        return calls.call_function(hook.info, None, given, {}, st, node, helper=True)
    if isinstance(hook, Obj) and hook.cls is not None and hook.attrs is not None:
        call = hook.cls.method("__call__")
        if call is not None and not call.node.decorators:
            return calls.call_function(call, hook, given, {}, st, node, helper=True)
    return None


def run_after(
    calls: Calls, mod: Obj, args: list[Val], kwargs: dict[str, Val], out: Val, st: State, node: cst.CSTNode
) -> Val | None:
    """The output of a module call after its forward hooks, in order (a hook that returns None leaves it, one
    that returns a value replaces it); None where a hook is not known."""
    hooks = (mod.extra or {}).get(POST_HOOKS_KEY, ())
    assert isinstance(hooks, tuple)
    for hook, with_kwargs in hooks:
        given = [mod, SeqV(tuple(args), kind="tuple")] + ([DictV(dict(kwargs))] if with_kwargs else []) + [out]
        known, result = _handed_back(calls, hook, given, st, node)
        if not known:
            return None
        if result is not None:
            out = result
    return out


def _handed_back(calls: Calls, hook: Val, given: list[Val], st: State, node: cst.CSTNode) -> tuple[bool, Val | None]:
    """Runs one hook: (whether what it hands back is known, that value, None when it returned None and so leaves
    what it was given as it was)."""
    fn = hook.info.node if isinstance(hook, FuncRef) else None
    result = call_hook(calls, hook, given, st, node)
    if result is None:
        return False, None
    if isinstance(result, Const) and result.value is None:
        # None on one path, something else on another: joined, not known
        return (False, None) if fn is not None and _returns_a_value(fn) else (True, None)
    return True, result


def run(
    calls: Calls, mod: Obj, args: list[Val], kwargs: dict[str, Val], st: State, node: cst.CSTNode
) -> tuple[list[Val], dict[str, Val]] | None:
    """The inputs `forward` gets after the module's pre-hooks, in order; None where one is not known."""
    hooks = (mod.extra or {}).get(PRE_HOOKS_KEY, ())
    assert isinstance(hooks, tuple)
    for hook, with_kwargs in hooks:
        given = [mod, SeqV(tuple(args), kind="tuple")] + ([DictV(dict(kwargs))] if with_kwargs else [])
        known, result = _handed_back(calls, hook, given, st, node)
        if not known:
            return None
        if result is None:
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
