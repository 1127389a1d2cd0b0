"""torch's foreach kernels (`torch._foreach_lerp_(ema, params, w)`, `torch._foreach_add_`, and the AMP unscale
kernel `torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)`), as hand-written EMAs,
optimizers and loss scalers call them. They take lists of tensors that may span devices, but pair them by
index: the i-th tensors of the lists must share a device (PyTorch groups them by device), and the unscale
kernel's `found_inf` and `inv_scale` must be on the device of every gradient (torch.amp.GradScaler keeps one
of each per device for that reason). A list kept whole on one GPU (an EMA target on cuda:1) paired with the
parameters of a split model, or one `found_inf` for the gradients of every GPU, fails at the call.

Only what is certain is said: a list all on one known device against a list known to span another (a split
model's parameters: SeqV.spans, ParamsOf of a split module), or two lists of known items paired one by one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.devices.events import Mismatch
from mpcheck.devices.names import dotted
from mpcheck.devices.values import UNK, Obj, ParamsOf, SeqV, Val, one, single, used

if TYPE_CHECKING:
    from mpcheck.devices.library import LibCall, Library

UNSCALE = "torch._amp_foreach_non_finite_check_and_unscale_"


def is_foreach(q: str, last: str, kwargs: dict[str, Val]) -> bool:
    return q.startswith("torch._foreach_") or q == UNSCALE


def foreach_op(lib: Library, c: LibCall) -> Val:
    used(*c.args, *c.kwargs.values())
    lists = [(a, e) for a, e in zip(c.args, c.exprs) if isinstance(a, (SeqV, ParamsOf))]
    if not lists:
        return UNK
    if c.q == UNSCALE:
        grads, expr = lists[0]
        for k, (t, e) in enumerate(zip(c.args[1:3], c.exprs[1:3])):
            if isinstance(t, Obj) and t.kind == "tensor":
                _check_pair(lib, c, t, e, grads, expr, k + 1)
        return UNK
    first, first_expr = lists[0]
    for other, e in lists[1:]:
        _check_lists(lib, c, other, e, first, first_expr)
    return UNK


def _devices(v: Val) -> tuple[str | None, tuple[Obj, ...]]:
    """(the one device every item is on, or None; items known to lie on distinct devices, for a span)."""
    if isinstance(v, ParamsOf):
        mod = v.mod
        if v.shape != "params" or mod.split or mod.kind != "module":
            spans = v.per_device() if v.shape == "params" else None
            return None, tuple(s for s in spans or () if isinstance(s, Obj))
        first = v.first()
        return (single(first.devs) if isinstance(first, Obj) else None), ()
    assert isinstance(v, SeqV)
    if v.spans is not None:
        return None, tuple(s for s in v.spans if isinstance(s, Obj))
    if v.items is not None:
        devs = {single(i.devs) if isinstance(i, Obj) else None for i in v.items}
        return (devs.pop() if len(devs) == 1 else None), ()
    return (single(v.elem.devs) if isinstance(v.elem, Obj) else None), ()


def _check_lists(lib: Library, c: LibCall, odd: Val, odd_expr: Any, lead: Val, lead_expr: Any) -> None:
    """The i-th items of `odd` and `lead` must share a device."""
    if isinstance(odd, SeqV) and isinstance(lead, SeqV) and odd.items is not None and lead.items is not None:
        for a, b in zip(odd.items, lead.items):
            if isinstance(a, Obj) and isinstance(b, Obj):
                here, there = single(a.devs), single(b.devs)
                if _known(here) and _known(there) and here != there:
                    _record(lib, c, a, odd_expr, b, lead_expr)
                    return
        return
    one_dev, spans = _devices(lead)
    if one_dev is not None and _known(one_dev):
        _check_pair(lib, c, _sample(lead, one_dev), lead_expr, odd, odd_expr, 0, flip=True)
        return
    one_dev, _ = _devices(odd)
    if one_dev is not None and _known(one_dev) and spans:
        _check_pair(lib, c, _sample(odd, one_dev), odd_expr, lead, lead_expr, 0)


def _check_pair(
    lib: Library, c: LibCall, t: Obj, t_expr: Any, items: Val, items_expr: Any, at: int, flip: bool = False
) -> None:
    """`t` (a tensor, or a list all on its device) against a list whose items span devices: one of them is
    certainly elsewhere. flip: the list is the one to move (the other is kept whole on one device)."""
    here = single(t.devs)
    if not _known(here):
        return
    one_dev, spans = _devices(items)
    others = [s for s in spans if _known(single(s.devs)) and single(s.devs) != here]
    if one_dev is not None and _known(one_dev) and one_dev != here:
        others = [_sample(items, one_dev)]
    if not others:
        return
    if flip:
        _record(lib, c, others[0], items_expr, t, t_expr)
    else:
        _record(lib, c, t, t_expr, others[0], items_expr, at)


def _record(lib: Library, c: LibCall, value: Obj, expr: Any, other: Obj, other_expr: Any, at: int = 0) -> None:
    lib.interp.recorder.record(
        Mismatch(
            node=c.node,
            mode=c.st.mode,
            value=value.with_(label=dotted(expr) or value.label),
            target=other.devs,
            what=dotted(other_expr) or "",
            what_expr=other_expr,
            op=c.q,
            other=other,
            arg_index=at,
            site="op",
        ),
        key="foreach",
    )


def _sample(v: Val, dev: str) -> Obj:
    """An item of `v`, on `dev`."""
    if isinstance(v, SeqV) and isinstance(v.elem, Obj):
        return v.elem
    if isinstance(v, ParamsOf):
        first = v.first()
        if isinstance(first, Obj):
            return first
    return Obj("tensor", one(dev))


def _known(dev: str | None) -> bool:
    return dev is not None and not dev.startswith("sym:")
