"""MP005 at run time for a detour with work: a tensor moved from one GPU to another only for one op there, whose
result goes straight back to the first GPU, where the tensor was made (`k.to(beam_idx.device).index_select(0,
beam_idx).to(k.device)`, a KV cache reordered on the beam index's GPU). The op could have run where the data is:
its other input, smaller than the data, moved there instead (`k.index_select(0, beam_idx.to(k.device))`) costs
one copy of fewer bytes, where the detour costs two copies of the data.

What counts (`on_arrival_worked`, called by the capture layer after an op that read an arrived tensor; a view of it,
`x_d.t()`, is the arrived data still, for the op that reads it): the op
read one arrived tensor, at most one other tensor and no parameter (a layer's weights are why a stage lives on
its GPU), and that other tensor is smaller than the arrived one; both GPUs, not the host (a host op may be there
for a reason of its own: an op CUDA lacks, a deterministic sort). The result is remembered weakly by its storage;
its move back to the arrival's source (`check_worked_detour`, at the transfer) is reported at the move back, any
size: two copies where at most one of fewer bytes would do. Ops of the result alone with numbers (`/ temperature`, a
cast) give the same result, scaled: `carry_worked` follows it to theirs (`u @ items_d.t() / T`, then moved back). The source's storage may be gone by then (a helper
`F.normalize(x.to(d))` whose argument died when it returned) when the result has the data's own size: the data was
made there all the same, and the trip was for this op.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.sites import UNKNOWN, Site
from mpcheck.runtime.checks.storage_ref import version_of
from mpcheck.runtime.checks.thresholds import NOT_GPU
from mpcheck.runtime.checks.transfer_events import known_bytes
from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


class Worked:
    """An op's result computed from one arrived tensor: where the data came from, and what the op needed."""

    __slots__ = ("ref", "src", "origin", "arrival_site", "op", "other_bytes", "data_bytes", "version")

    def __init__(
        self,
        ref: Any,
        src: str,
        origin: Any,
        arrival_site: Site,
        op: str,
        other_bytes: int,
        data_bytes: int,
        version: int | None = None,
    ) -> None:
        self.ref, self.src, self.origin, self.arrival_site = ref, src, origin, arrival_site
        self.op, self.other_bytes, self.data_bytes = op, other_bytes, data_bytes
        self.version = version  # the result's version counter when it was made: changed in place since, more work


def on_arrival_worked(
    self: Checker, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, arrived: list[Any]
) -> None:
    """An op read the arrived tensors `arrived` (note_reads' hits) and gave `out`: remember it when it is the
    one op of a detour (see the module's text)."""
    if len(arrived) != 1 or not isinstance(out, self._tensor_type):
        return
    x, sid = arrived[0]
    base = getattr(out, "_base", None)
    if base is not None and (base is x or base is getattr(x, "_base", None)):
        self.note_arrived(out, sid)  # `x_d.t()`, `x_d.unsqueeze(0)`: the arrived data itself, for the op that reads it
        return
    name = getattr(func, "__name__", "") or "the op"
    if name.endswith("_like"):
        return  # `torch.zeros_like(x_d)` reads x_d's shape, not its data: no work the data crossed for
    entry = self._arrivals.get(sid)
    if entry is None or entry[0].origin is None:
        return
    ref, src, arrival_site = entry
    here = self.devices.device_of(x)
    if src in NOT_GPU or here in NOT_GPU or src == here or self.devices.device_of(out) != here:
        return
    others = [
        a
        for a in (*args, *kwargs.values())
        for a in (a if type(a) in (list, tuple) else (a,))
        if isinstance(a, self._tensor_type) and a is not x
    ]
    if len(others) > 1 or any(isinstance(a, self._parameter) or (a.requires_grad and a.is_leaf) for a in others):
        return
    data_bytes = known_bytes(x)
    other_bytes = sum(known_bytes(a) for a in others)
    if not data_bytes or other_bytes >= data_bytes:
        return
    try:
        storage = out.untyped_storage()
    except Exception:  # a tensor without storage: not followed
        return
    self._worked[id(storage)] = Worked(
        weakref.ref(storage), src, ref.origin, arrival_site, name, other_bytes, data_bytes, version_of(out)
    )
    if len(self._worked) > self._purge_at:
        for k in [k for k, w in self._worked.items() if w.ref() is None]:
            del self._worked[k]


def carry_worked(self: Checker, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """An op of a detour's result alone, with numbers but no other tensor, of the same shape on the same device
    (`logits = a @ x_d.t() / temperature`, `.float()`, `F.normalize`): its output is the same result, scaled, and
    its move back is the detour's. (An op with another tensor does work of its own there: not carried.)"""
    a0 = args[0]
    if not isinstance(a0, self._tensor_type) or not isinstance(out, self._tensor_type):
        return
    try:
        storage = a0.untyped_storage()
    except Exception:
        return
    w = self._worked.get(id(storage))
    if w is None or w.ref() is not storage or out.shape != a0.shape:
        return
    if any(isinstance(a, self._tensor_type) for a in (*args[1:], *kwargs.values())):
        return
    if self.devices.device_of(out) != self.devices.device_of(a0):
        return
    try:
        out_storage = out.untyped_storage()
    except Exception:
        return
    if id(out_storage) != id(storage):
        self._worked[id(out_storage)] = Worked(
            weakref.ref(out_storage),
            w.src,
            w.origin,
            w.arrival_site,
            w.op,
            w.other_bytes,
            w.data_bytes,
            version_of(out),
        )


def check_worked_detour(
    self: Checker, t: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None, nbytes: int
) -> bool:
    """A transfer of an op's result remembered by on_arrival_worked, back to where its data came from. True
    when it is one: the copy it makes is the data come home, no arrival of a detour of its own (transfer_events
    gives it no origin, so that the next op on it there is not taken for the first leg of one going the other
    way: a cache reordered on the index's GPU each step and worked on at home between)."""
    try:
        storage = t.untyped_storage()
    except Exception:
        return False
    w = self._worked.get(id(storage))
    if w is None or w.ref() is not storage or w.src != dst_dev:
        return False
    if w.version is not None and version_of(t) != w.version:
        # Changed in place after the op (`partial.index_add_(...)` of experts' outputs computed there): the trip
        # carried more work than the one op, which could not have run at home alone.
        del self._worked[id(storage)]
        return False
    if w.origin() is None and nbytes != w.data_bytes:
        # The data is gone from dst_dev and what comes back is another size (a sum, a sequence grown there): the
        # copy over may have been made for other work there that this pass had no more of (a loop's last exchange
        # of two towers' states, a beam's sequences that live on the last stage); only a result of the data's own
        # size (`F.normalize(x.to(d))` in a helper pinned to one GPU) says the trip was made for this op alone.
        return False
    del self._worked[id(storage)]
    other = f"its other input ({size_words(w.other_bytes)})" if w.other_bytes else "nothing"
    # The data may be freed on dst_dev by now (a helper's argument, gone when it returned): it was made there all
    # the same, and the op could have run there before it was dropped.
    where = "where the data still is" if w.origin() is not None else "where the data was made"
    self.emit(
        "MP005",
        site or UNKNOWN,
        f"detour: {size_words(w.data_bytes)} moved {dst_dev} -> {src_dev} at {w.arrival_site} only for "
        f"`{w.op}` there, and its result ({size_words(nbytes)}) moved straight back to {dst_dev}, {where}: "
        f"two copies of the data where {other} would cross instead",
        devices=(dst_dev, src_dev),
        modules=(module,) if module else (),
        suggestion=f"run `{w.op}` on {dst_dev}, where the data is, with {other} moved there "
        f"(`x.{w.op}(..., other.to(x.device))` for `x.to(d).{w.op}(..., other).to(x.device)`)",
        extra={"scope": "worked", "first_site": str(w.arrival_site), "op": w.op},
    )
    return True
