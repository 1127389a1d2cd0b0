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
from mpcheck.devices.values import UNK, Obj, ParamsOf, SeqV, Val, single, used

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


def _devices(v: Val) -> tuple[Obj | None, tuple[Obj, ...]]:
    """(an item of `v` on the one known device every item is on, or None; items known to lie on distinct
    devices, for a span: a split model's parameters)."""
    if isinstance(v, ParamsOf):
        if v.shape != "params":
            return None, ()
        if v.mod.split or v.mod.kind != "module":
            return None, tuple(s for s in v.per_device() or () if isinstance(s, Obj))
        return _on_one_device(v.first()), ()
    assert isinstance(v, SeqV)
    if v.spans is not None:
        return None, tuple(s for s in v.spans if isinstance(s, Obj))
    if v.items is not None:
        devs = {single(i.devs) if isinstance(i, Obj) else None for i in v.items}
        return (_on_one_device(v.items[0]) if len(devs) == 1 else None), ()
    return _on_one_device(v.elem), ()


def _on_one_device(v: Val) -> Obj | None:
    return v if isinstance(v, Obj) and _known(single(v.devs)) else None


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
    whole, spans = _devices(lead)
    if whole is not None:
        _check_pair(lib, c, whole, lead_expr, odd, odd_expr, 0, flip=True)
        return
    whole, _ = _devices(odd)
    if whole is not None and spans:
        _check_pair(lib, c, whole, odd_expr, lead, lead_expr, 0)


def _check_pair(
    lib: Library, c: LibCall, t: Obj, t_expr: Any, items: Val, items_expr: Any, at: int, flip: bool = False
) -> None:
    """`t` (a tensor, or a list all on its device) against a list whose items span devices: one of them is
    certainly elsewhere. flip: the list is the one to move (the other is kept whole on one device)."""
    here = single(t.devs)
    if not _known(here):
        return
    whole, spans = _devices(items)
    others = [s for s in spans if _known(single(s.devs)) and single(s.devs) != here]
    if whole is not None and single(whole.devs) != here:
        others = [whole]
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


def _known(dev: str | None) -> bool:
    return dev is not None and not dev.startswith("sym:")
