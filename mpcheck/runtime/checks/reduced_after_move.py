"""MP016 at run time, its second half: data moved whole to another device and then only reduced there
(`torch.cat([g.flatten().to(d) for g in grads]).norm()`, `scores.cpu().topk(10)`). Every element crossed
the link for a result a fraction of its size; reducing where the data is and moving the result carries
only that.

A transfer's output of WASTE_MIN_BYTES or more, moved at the user's own line, is watched, weakly (the watch
never keeps a tensor alive). What an op does with a watched tensor decides:
- a view of it, `cat`/`stack` of it, an elementwise op of it alone (`.abs()`, `.isfinite()`, `* 2`) keeps
  its data whole: the op's output is watched for the same transfers (a carrier);
- a reduction (`REDUCTIONS`) whose outputs are at most 1/SHRINK of the watched bytes marks it reduced;
- anything else (a matmul, a comparison with another tensor, an export to NumPy, `.tolist()`, printing,
  pickling, another move) uses its data: the transfer was needed, and is not reported.
A transfer is judged once every carrier of it has been freed by the program: reduced and never used, it is
reported, unless MP005 reported the move itself (a round trip: its fix drops the copy). Data the program
keeps (predictions appended to a list) and uses later, however much later, is not. The judging happens at step ends and at the end of the run (`judge_reduced_moves`), never inside the
garbage collector.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.thresholds import WASTE_MIN_BYTES
from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

# Reductions by name (a Tensor method's or a torch function's `__name__`): outputs far smaller than the input.
REDUCTIONS = frozenset(
    {
        "sum", "nansum", "mean", "nanmean", "prod", "norm", "vector_norm", "matrix_norm", "linalg_vector_norm",
        "max", "min", "amax", "amin", "aminmax", "argmax", "argmin", "all", "any", "topk", "std", "var",
        "std_mean", "var_mean", "count_nonzero", "logsumexp", "histc", "histogram", "bincount",
    }
)  # fmt: skip
# Order statistics count only for the data of one move (`torch.quantile(x0.abs().cpu(), p, dim=1)`, a per-image
# clipping threshold computed on the host): one of data gathered from several devices (a global pruning threshold)
# needs up to k elements of each part, not one result per device.
ORDER_STATISTICS = frozenset({"kthvalue", "median", "nanmedian", "mode", "quantile", "nanquantile"})
# Ops that keep a watched tensor's data whole when it is their only tensor argument, or when every tensor they get
# carries that one transfer's data (`att * att.clamp_min(1e-9).log()`, an entropy of the moved attention maps).
ELEMENTWISE = frozenset(
    {
        "abs", "square", "sqrt", "pow", "__pow__", "exp", "log", "neg", "__neg__", "isfinite", "isnan", "isinf",
        "float", "double", "half", "bfloat16", "mul", "__mul__", "__rmul__", "div", "__truediv__", "add",
        "__add__", "__radd__", "sub", "__sub__", "clone", "detach", "contiguous", "flatten", "reshape", "view",
        "ravel", "squeeze", "unsqueeze", "t", "transpose", "permute", "clamp", "clamp_min", "clamp_max", "clip",
        "log1p", "log2", "log10", "exp2", "expm1", "reciprocal", "rsqrt", "sigmoid", "tanh", "relu", "sign",
        "softmax", "log_softmax", "logical_not", "__invert__", "eq", "__eq__", "ne", "__ne__", "gt", "__gt__",
        "lt", "__lt__", "ge", "__ge__", "le", "__le__",
    }
)  # fmt: skip
# Ops that gather several tensors into one: the watched tensor's data is all in the output.
_GATHERS = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack"})
SHRINK = 8  # a reduction's output at most 1/SHRINK of its input: the move carried SHRINK times what it needed


class Moved:
    """One watched transfer: where it was made, how many live tensors carry its data, what was done with them."""

    __slots__ = (
        "site", "module", "src", "dst", "nbytes", "live", "reduced_by", "reduced_at", "used", "seen", "step", "mixed"
    )  # fmt: skip

    def __init__(
        self, site: Site, module: str | None, src: str, dst: str, nbytes: int, seen: bool = False, step: int = 0
    ) -> None:
        self.site, self.module, self.src, self.dst, self.nbytes = site, module, src, dst, nbytes
        self.live = 0
        self.reduced_by: str | None = None
        self.reduced_at: Site | None = None
        self.used = False
        # Made in a module's forward with the function mode watching (not by a call the signature cache let run
        # unchecked) and onto a GPU: never read at all, it is reported as unread (judge_reduced_moves).
        self.seen = seen
        self.step = step  # the optimizer steps made before it (Ledger.step_index)
        self.mixed = False  # gathered with data that came by no watched move (`torch.cat([a, b.to(d)])`)


class ReduceWatch:
    """The watched tensors, by id (with a weak reference that tells a reused id apart), and the transfers
    whose carriers are all gone, waiting to be judged."""

    def __init__(self) -> None:
        self.carriers: dict[int, tuple[weakref.ref[Any], tuple[Moved, ...]]] = {}
        self.gone: list[Moved] = []

    def carry(self, t: Any, moved: tuple[Moved, ...]) -> None:
        key = id(t)
        carriers, gone = self.carriers, self.gone

        def freed(ref: weakref.ref[Any]) -> None:  # the garbage collector's callback: bookkeeping only
            entry = carriers.get(key)
            if entry is not None and entry[0] is ref:
                del carriers[key]
            for m in moved:
                m.live -= 1
                if m.live == 0:
                    gone.append(m)

        try:
            ref = weakref.ref(t, freed)
        except TypeError:  # not weakly referenceable: not followed
            return
        old = self.carriers.get(key)
        if old is not None and old[0]() is t:  # already carried (`x.contiguous()` gives x back): one more owner set
            moved = tuple(dict.fromkeys(old[1] + moved))
        for m in moved:
            m.live += 1
        self.carriers[key] = (ref, moved)

    def hits(self, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> tuple[list[int], int]:
        """The ids of the watched tensors among an op's arguments (a list's items too: `torch.cat`), and how
        many tensor arguments there are in all."""
        carriers = self.carriers
        found: list[int] = []
        tensors = 0
        for a in (*args, *kwargs.values()) if kwargs else args:
            items = a if type(a) in (list, tuple) else (a,)
            for b in items:
                if hasattr(b, "untyped_storage"):
                    tensors += 1
                    entry = carriers.get(id(b))
                    if entry is not None and entry[0]() is b:
                        found.append(id(b))
        return found, tensors

    def used(self, key: int) -> None:
        """The tensor of id `key` had its data used: its transfers were needed, and it is watched no more
        (the table stays as small as the tensors only reduced so far)."""
        entry = self.carriers.pop(key, None)
        if entry is not None:
            for m in entry[1]:
                m.used = True


def watch_move(
    self: Checker, src: Any, out: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None, nbytes: int
) -> None:
    """A transfer at the user's own line: its output is watched from here (see the module's text). Not one
    that also converts (`.to(dev, torch.float64)`): reducing first would reduce at the old precision."""
    if src_dev == dst_dev or site is None or site.context or out is None or not self.wants("MP016"):
        return
    if nbytes < max(self.repeat_min_bytes, WASTE_MIN_BYTES) or getattr(src, "dtype", None) != out.dtype:
        return
    tls = self._tls
    seen = bool(tls.stack) and not tls.transfer_unseen and dst_dev.startswith("cuda")
    self.reduce_watch.carry(out, (Moved(site, module, src_dev, dst_dev, nbytes, seen, self.ledger.step_index),))


def on_watched_read(self: Checker, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, out: Any) -> None:
    """An op read a watched tensor (the mode calls this after the op, only while something is watched)."""
    watch = self.reduce_watch
    found, tensors = watch.hits(args, kwargs)
    if not found:
        return
    carriers = watch.carriers
    moved = tuple(dict.fromkeys(m for key in found for m in carriers[key][1]))
    name = getattr(func, "__name__", "")
    order_statistic = name in ORDER_STATISTICS and len(moved) == 1 and not moved[0].mixed
    if (name in REDUCTIONS or order_statistic) and tensors == 1:
        out_bytes = _bytes_of(out)
        in_bytes = _bytes_of(args[0]) if args else None
        if out_bytes is not None and in_bytes and out_bytes * SHRINK <= in_bytes:
            at = self.sites()
            for m in moved:
                if m.reduced_by is None:
                    m.reduced_by, m.reduced_at = name, at
            return
    elif (name in _GATHERS or (name in ELEMENTWISE and _of_one_transfer(carriers, found, tensors))) and hasattr(
        out, "untyped_storage"
    ):
        if name in _GATHERS and len(found) < tensors:
            for m in moved:
                m.mixed = True
        watch.carry(out, moved)
        return
    for key in found:  # its data used: the move was needed
        watch.used(key)


def _of_one_transfer(carriers: dict[int, Any], found: list[int], tensors: int) -> bool:
    """Every tensor argument of the op carries the same transfers' data: one tensor, or copies derived from one
    move (`att * att.log()`). Two moves met (`x.to(d) * y.to(d)`) are data used together, each needed there."""
    return len(found) == tensors and len({carriers[key][1] for key in found}) == 1


def on_watched_view(self: Checker, base: Any, view: Any) -> None:
    """A view (or a copy on its own device) of a watched tensor carries the same data."""
    entry = self.reduce_watch.carriers.get(id(base))
    if entry is not None and entry[0]() is base and hasattr(view, "untyped_storage"):
        self.reduce_watch.carry(view, entry[1])


def on_watched_export(self: Checker, t: Any) -> None:
    """Its elements read on the host (`.tolist()`, `.numpy()`), or moved again: the data was used."""
    entry = self.reduce_watch.carriers.get(id(t))
    if entry is not None and entry[0]() is t:
        self.reduce_watch.used(id(t))


def on_unseen_reads(self: Checker, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> None:
    """A call whose ops the function mode does not see (a module running unchecked by the signature cache, a
    compiled module, a suspended checker) was given these: each watched tensor among them (in lists, tuples and
    dicts too, two levels deep) counts as used, whatever the call did with it."""
    watch = self.reduce_watch
    carriers = watch.carriers
    pending = [*args, *kwargs.values()] if kwargs else list(args)
    depth = {id(a): 0 for a in pending}
    while pending:
        a = pending.pop()
        entry = carriers.get(id(a))
        if entry is not None and entry[0]() is a:
            watch.used(id(a))
            continue
        level = depth.get(id(a), 0)
        if level < 2 and type(a) in (list, tuple, dict):
            items = a.values() if type(a) is dict else a
            for b in items:
                depth[id(b)] = level + 1
                pending.append(b)


def judge_reduced_moves(self: Checker, at_end: bool = False) -> None:
    """Report the watched transfers whose carriers are all gone, reduced and never used. At the end of a run that
    trained, a move made after its last step (a summary of samples taken once, `samples.cpu()` then `.min()`)
    costs once: reported only where its line made two or more such moves."""
    gone = self.reduce_watch.gone
    once: dict[tuple[str, int], int] = {}
    if at_end:
        for m in gone:
            if 0 < m.step == self.ledger.step_index:
                once[(m.site.path, m.site.line)] = once.get((m.site.path, m.site.line), 0) + 1
    while gone:
        m = gone.pop()
        if m.used or _round_trip_at(self, m.site):
            continue
        if once.get((m.site.path, m.site.line)) == 1:
            continue
        if m.reduced_by is None:
            if m.seen:
                _report_unread(self, m)
            continue
        at = m.reduced_at
        where = f" at {at}" if at is not None and (at.path, at.line) != (m.site.path, m.site.line) else ""
        self.emit(
            "MP016",
            m.site,
            f"{size_words(m.nbytes)} moved {m.src} -> {m.dst} here is only reduced there (`{m.reduced_by}`{where}): "
            f"every element crosses for a result at most 1/{SHRINK} of their size",
            devices=(m.src, m.dst),
            modules=(m.module,) if m.module else (),
            suggestion=f"reduce on {m.src} first and move the result (`{m.reduced_by}` there, then "
            f"`.to('{m.dst}')`); for tensors on several devices, reduce each device's share where it is and "
            "move one result per device",
            extra={"bytes_moved": m.nbytes, "reduced_by": m.reduced_by},
        )


def _report_unread(self: Checker, m: Moved) -> None:
    """A move in a forward pass whose output, and everything carrying its data on, was freed with no op having
    read an element of it: the data crossed for nothing (a dict of inputs moved whole, a hidden state kept for
    a pooling that takes only the last few)."""
    self.emit(
        "MP016",
        m.site,
        f"{size_words(m.nbytes)} moved {m.src} -> {m.dst} here is never read there: nothing uses an element of it "
        "before it is freed, so the whole copy crossed the link for nothing",
        devices=(m.src, m.dst),
        modules=(m.module,) if m.module else (),
        suggestion=f"move only what {m.dst} reads (leave the unused tensor, or the unused entries of a batch, "
        f"on {m.src}), or drop the move",
        extra={"bytes_moved": m.nbytes, "unread": True},
    )


def _round_trip_at(self: Checker, site: Site) -> bool:
    """MP005 reported this very move (a round trip, a detour): its fix drops the copy, the reduction's too."""
    return any(k[0] == "MP005" and k[1] == site.path and k[2] == site.line for k in self._by_key)


def _bytes_of(x: Any) -> int | None:
    """The bytes of a tensor, or of the tensors of a tuple (`topk`'s values and indices)."""
    items = x if isinstance(x, (list, tuple)) else (x,)  # a tuple, or torch.return_types' structseq
    total = 0
    for t in items:
        try:
            total += int(t.numel() * t.element_size())
        except Exception:  # not a tensor, or a size not known as a number
            return None
    return total
