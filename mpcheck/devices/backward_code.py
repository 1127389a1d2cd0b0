"""Code of the file that runs in backward: custom torch.autograd.Function classes (what their forward saves
on `ctx`, the gradients their backward gets, and whether the gradients it returns are where autograd needs
them) and gradient hooks (`w.register_hook(fn)`: `fn` gets each gradient of `w` on `w`'s device).

`MyFn.apply(x, dev)` runs the static `forward(ctx, x, dev)`; when a loss computed from its output goes
backward, `backward(ctx, grad_out)` gets one gradient per output, on that output's device, and must return
one per input, each on its input's device: autograd's engine (`validate_outputs`) refuses any other
("invalid gradient at index 0 - expected device cuda:0 but got cuda:1"), moving only 0-dim gradients for
you. A hop written as a Function (`forward` returns `x.to(dev)`) whose backward hands the gradient back
unmoved therefore fails in `loss.backward()`, with no line of the user's in the traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import libcst as cst

from mpcheck.devices import pre_hooks
from mpcheck.devices.events import GradientOffItsInput
from mpcheck.devices.names import dotted
from mpcheck.devices.program import ClassInfo, State, params_of
from mpcheck.devices.values import (
    GRADIENT_OF_OUTPUT,
    UNK,
    AutogradCtx,
    LambdaV,
    Obj,
    SeqV,
    Val,
    one,
    single,
)
from mpcheck.devices.walk import assigned, walk

if TYPE_CHECKING:
    from mpcheck.devices.calls import Calls
    from mpcheck.devices.interp import Interp


def autograd_ctx(fwd: cst.FunctionDef, args: list[Val]) -> Val:
    """The `ctx` a custom Function's forward fills, as its backward reads it: `ctx.saved_tensors` from
    `ctx.save_for_backward(a, b)` and `ctx.name` from `ctx.name = a`, where `a` and `b` are forward's own
    parameters (given `args`); UNK where anything else is saved."""
    params = [name for name, _ in params_of(fwd)]
    if len(params) < 2:
        return UNK
    ctx_name, bound = params[0], dict(zip(params[1:], args))
    items: dict[Any, Val] = {}
    for n in walk(fwd):
        if (
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value == "save_for_backward"
            and dotted(n.func.value) == ctx_name
        ):
            saved = [bound.get(a.value.value, UNK) if isinstance(a.value, cst.Name) else UNK for a in n.args]
            items["saved_tensors"] = SeqV(tuple(saved), kind="tuple")
        for t in assigned(n):
            if isinstance(t, cst.Attribute) and dotted(t.value) == ctx_name and isinstance(n, cst.Assign):
                value = n.value
                items[t.attr.value] = bound.get(value.value, UNK) if isinstance(value, cst.Name) else UNK
    return AutogradCtx(items, namespace=True)


def gradients_for(out: Val) -> list[Val]:
    """The gradients a custom Function's backward gets: one per output, where that output is (none known: [])."""
    outs = out.items if isinstance(out, SeqV) and out.kind == "tuple" and out.items is not None else (out,)
    grads: list[Val] = []
    for o in outs:
        dev = single(o.devs) if isinstance(o, Obj) and o.kind == "tensor" else None
        at = o.at if isinstance(o, Obj) else None
        grads.append(Obj("tensor", one(dev), origin=GRADIENT_OF_OUTPUT, at=at) if dev else UNK)
    return grads if any(g is not UNK for g in grads) else []


def check_returned_gradients(
    interp: Interp, cls: ClassInfo, applied: cst.Call, args: list[Val], returned: Val, st: State
) -> None:
    """Records a GradientOffItsInput for each gradient `cls`'s backward returns on another GPU than the input
    of `applied` (`cls.apply(*args)`) it belongs to. Only GPU inputs (a CPU input is raw data, which wants no
    gradient), not ids, a mask or a possibly 0-dim value (moved for you), and only where both devices are known."""
    fwd, bwd = cls.method("forward"), cls.method("backward")
    exprs = _returned_expressions(bwd.node) if bwd is not None else None
    grads = returned.items if isinstance(returned, SeqV) and returned.items is not None else (returned,)
    if fwd is None or exprs is None or len(exprs) != len(grads):
        return
    names = [name for name, _ in params_of(fwd.node)][1:]  # (after ctx)
    for i, (g, a) in enumerate(zip(grads, args)):
        if not (isinstance(g, Obj) and g.kind == "tensor" and isinstance(a, Obj) and a.kind in ("tensor", "param")):
            continue
        here, there = single(g.devs), single(a.devs)
        if not (_gpu(here) and _gpu(there)) or here == there or a.index_like or a.may_be_0d or g.may_be_0d:
            continue
        param = names[i] if i < len(names) else ""
        interp.recorder.record(
            GradientOffItsInput(
                node=exprs[i],
                mode=st.mode,
                function=cls.name,
                index=i,
                param=param,
                gradient=g,
                input=a,
                applied=applied,
                saved_device=_saved_device(fwd.node, param),
            ),
            key=i,
        )


def _saved_device(fwd: cst.FunctionDef, param: str) -> str:
    """`ctx.src` where forward saves `param`'s device on ctx (`ctx.src = x.device`); "" where it does not."""
    params = [name for name, _ in params_of(fwd)]
    if not params or not param:
        return ""
    for n in walk(fwd.body):
        if (
            isinstance(n, cst.Assign)
            and isinstance(n.value, cst.Attribute)
            and n.value.attr.value == "device"
            and dotted(n.value.value) == param
        ):
            for t in n.targets:
                if isinstance(t.target, cst.Attribute) and dotted(t.target.value) == params[0]:
                    return dotted(t.target) or ""
    return ""


def run_gradient_hook(calls: Calls, tensor: Obj, hook: Val, node: cst.Call, st: State) -> None:
    """`tensor.register_hook(hook)`: the hook runs in backward with the gradient of `tensor`, on its device
    (a mask it multiplies by must be there too). It is run here, as it is registered, reading the names it
    reads as they are now (a hook usually reads values made before it); only where that device is known."""
    dev = single(tensor.devs)
    if dev is None or dev.startswith("sym:") or not calls.interp.recorder.live:
        return
    if isinstance(hook, LambdaV):  # `lambda g: g * mask`, given here or by a name
        hook = pre_hooks.lambda_hook(calls, hook.node, st)
    label = dotted(node.func.value) if isinstance(node.func, cst.Attribute) else None
    grad = Obj("tensor", tensor.devs, origin=f"the gradient of `{label}`" if label else "a gradient", at=node)
    pre_hooks.call_hook(calls, hook, [grad], st, node)


def _gpu(dev: str | None) -> bool:
    return dev is not None and dev.startswith("cuda")


def _returned_expressions(fn: cst.FunctionDef) -> list[cst.BaseExpression] | None:
    """The expressions of backward's one `return` (a tuple's items, or the one value); None where it has
    several returns, or returns a computed tuple."""
    returns: list[cst.Return] = []
    for n in walk(fn.body):
        if isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return None  # a nested function's returns are not backward's: not read
        if isinstance(n, cst.Return):
            returns.append(n)
    if len(returns) != 1 or returns[0].value is None:
        return None
    value = returns[0].value
    if isinstance(value, cst.Tuple):
        if any(isinstance(e, cst.StarredElement) for e in value.elements):
            return None
        return [e.value for e in value.elements]
    return [value]
