"""Provenance for MP011: which tensors were computed only from data that never changes.

`self.proj[cam].repeat(B, 1, 1).float().to('cuda:0')` makes a fresh tensor in every forward, so
the storage-based repeat check (the same unchanged data moved again) never sees it twice; yet its
only inputs are a buffer and Python numbers, so it could be made where it is used from a buffer kept
there, and the copy in every forward is waste. This module
marks such tensors as they are made, so that a transfer can ask whether its source is one of them.

Constant sources:
- the buffers of the root models seen so far, while their version counter is the one they had when
  they were listed (a buffer changed in place drops out), except the running statistics of the
  normalization layers that track them (BatchNorm's kernel updates them in every training forward
  without bumping their version counter) and a buffer read through `.data`, whose writes bump the
  alias's counter only (`unseen_writes`);
- the outputs of deterministic factories called without a tensor argument (`torch.ones(T, T)`,
  `torch.arange(T)`), but not of random ones nor of `torch.tensor(data)`, whose data may be anything.

Parameters are not sources: they change at every optimizer step, and a copy per step of a weight
used on another device (tied embeddings split over two GPUs) is the price of that split, not waste.

A tensor is derived from constants when a checked torch call (or a view, clone or dtype cast) took
only constant tensors; an in-place call that mixes in anything else drops the mark. The capture
layer calls `derive` only when a call's first tensor argument is marked (a dict lookup per call),
and `made_by_factory` for a factory's output. Nothing here keeps a tensor alive: marks are keyed
by id, hold a weak reference and the version counter at marking time, and are purged with their
tensors.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from mpcheck.runtime.checks.module_devices import modules_of

# Calls that draw random numbers: what they give from constant inputs is new data each time.
RANDOM_CALLS = frozenset(
    {
        "multinomial",
        "bernoulli",
        "bernoulli_",
        "normal",
        "normal_",
        "poisson",
        "rand_like",
        "randn_like",
        "randint_like",
        "random_",
        "uniform_",
        "exponential_",
        "geometric_",
        "log_normal_",
        "cauchy_",
        "dropout",
        "dropout_",
        "alpha_dropout",
        "feature_alpha_dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "rrelu",
        "gumbel_softmax",
    }
)
# torch functions (by __name__) whose output is the same for the same arguments, when called
# without a tensor argument.
CONST_FACTORIES = frozenset(
    {"zeros", "ones", "full", "arange", "range", "linspace", "logspace", "eye", "tril_indices", "triu_indices"}
)
# torch functions (by __name__) that draw random data from a shape alone: a script's stand-in batch
# (`X = torch.randn(512, 256)`), marked `drawn` (repeats.py: copied in every step of a training loop that brings
# no new data, it stands for a loader's new batch).
DRAWN_FACTORIES = frozenset({"randn", "rand", "randint", "randperm"})  # (shape factories: SHAPE_FACTORIES)
# The same drawn from another tensor's shape: noise for a marked stand-in (`clean + torch.randn_like(clean)`) is
# drawn data too, no loader's new batch.
_DRAWN_LIKE = frozenset({"rand_like", "randn_like", "randint_like"})
_DRAWN = "drawn"
_ELEMENT = "element"
_PURGE_AT = 4096


def _version(t: Any) -> int | None:
    try:
        version: int = t._version
        return version
    except (AttributeError, RuntimeError):  # an inference tensor: no version counter
        return None


def _class_tracks(module: Any) -> bool:
    """`track_running_stats` of a module that does not set it itself (a class attribute, or nothing)."""
    return bool(getattr(type(module), "track_running_stats", False))


class Provenance:
    def __init__(self, tensor_type: type) -> None:
        self._tensor = tensor_type
        # id(tensor) -> (weak ref, version when marked); the capture layer tests `id(t) in marks`.
        # A third item `_DRAWN` marks random data drawn from a shape, or computed from such data and constants only;
        # the fourth is its origin, the storage id of the drawn tensor it was computed from (`drawn_from`).
        # A third item `_ELEMENT` marks one element of a GPU tensor picked by an index (`usage[k]`), or a value
        # computed from it (`usage[k] == 0`); the fourth is that tensor's id() and shape (`element_of`, MP020).
        self.marks: dict[int, tuple[Any, ...]] = {}
        self._sources_key: tuple[Any, ...] | None = None
        self._purge_at = _PURGE_AT
        self._tracks: dict[type, bool] = {}  # a module class -> its track_running_stats (_class_tracks)
        # The storages of normalization layers' running statistics: their kernel changes them without a version
        # bump, so a copy of one in every step is no repeat of unchanged data either (repeats._check_repeat).
        self.running_stats: set[int] = set()
        # The storages written where no version counter of theirs sees it (`buf.data.mul_(0.9)` through the alias
        # `.data` gives; host memory torch.frombuffer wraps, refilled by `readinto`): never a source, nor a repeat.
        self.unseen_writes: set[int] = set()

    # -- sources -----------------------------------------------------------------------------
    def refresh(self, roots: Iterable[Any], epoch: int) -> None:
        """List the buffers of the root models again when the roots or their placement changed."""
        roots = list(roots)
        key = (epoch, *(id(r) for r in roots))
        if key == self._sources_key:
            return
        self._sources_key = key
        tracks = self._tracks
        self.running_stats = set()
        for module in modules_of(roots):  # root.modules() of each root, without its generators
            buffers = module._buffers
            if not buffers:
                continue
            # Read from the instance's dict first: getattr on a module without the attribute goes
            # through nn.Module.__getattr__'s AttributeError; the class's answer once per class.
            own = module.__dict__
            if "track_running_stats" in own:
                skip = own["track_running_stats"]
            else:
                cls = type(module)
                skip = tracks.get(cls)
                if skip is None:
                    skip = tracks[cls] = _class_tracks(module)
            if skip:  # BatchNorm's statistics: updated by its kernel without a version bump
                for buf in buffers.values():
                    sid = _storage_id(buf)
                    if sid is not None:
                        self.running_stats.add(sid)
                continue
            for buf in buffers.values():
                sid = _storage_id(buf)
                if sid is not None and sid not in self.unseen_writes:
                    self._mark(buf)

    def changes_unseen(self, t: Any) -> None:
        """`t`'s data may change with no bump of its version counter (it was read through `.data`, or wraps
        memory written outside torch): not constant, and a copy of it each step is no repeat."""
        try:
            self.unseen_writes.add(id(t.untyped_storage()))
        except Exception:  # no storage (a nested or functionalised tensor): nothing to compare either
            return
        self.marks.pop(id(t), None)

    # -- marks -------------------------------------------------------------------------------
    def is_const(self, t: Any) -> bool:
        """Was `t` computed only from constants, and has it not changed since?"""
        return self._kind(t) == "const"

    def is_drawn(self, t: Any) -> bool:
        """Is `t` random data drawn from a shape (or computed from such data and constants), unchanged since?"""
        return self._kind(t) == _DRAWN

    def drawn_from(self, t: Any) -> int | None:
        """The storage id of the drawn tensor that `t` (drawn data) was computed from: a slice of a drawn data set
        comes from the data set, a stand-in's noise (`torch.randn_like(clean)`) from the stand-in."""
        return self.marks[id(t)][3] if self._kind(t) == _DRAWN else None

    def element_of(self, t: Any) -> tuple[int, tuple[int, ...], str] | None:
        """id() and shape of the GPU tensor whose indexed element (or row) `t` is, or was computed from, and which
        of the two, in words (element_reads.py)."""
        return self.marks[id(t)][3] if self._kind(t) == _ELEMENT else None

    def arrived(self, source: Any, copy: Any) -> None:
        """`copy` is `source` moved to another device: the copy of drawn data is drawn data of the same origin
        (a stand-in batch, copied to the first stage, then on to the next); a constant's copy is left unmarked
        (its copy moved again each step is the repeat MP011 is about)."""
        if self._kind(source) == _DRAWN:
            self._mark(copy, kind=_DRAWN, of=self.marks[id(source)][3])

    def picked_element(self, source: Any, out: Any) -> None:
        """`out` is one element (or row) that an index picked from `source`, a GPU tensor (capture/mode.py)."""
        part = "a single element" if out.numel() == 1 else "one row"
        self._mark(out, kind=_ELEMENT, of=(id(source), tuple(source.shape), part))

    def _kind(self, t: Any) -> str | None:
        entry = self.marks.get(id(t))
        if entry is None:
            return None
        ref, version = entry[0], entry[1]
        if ref() is not t:
            del self.marks[id(t)]  # the id was reused by another tensor
            return None
        if version is None or version != _version(t):
            return None
        return entry[2] if len(entry) > 2 else "const"

    def _kind_before(self, t: Any) -> str | None:
        """`_kind` of a tensor an in-place call has just changed: its mark, when that call is the one change since
        (its version one more, or the same). A mark older than that missed a change: a write through a view of it
        (`masks[i][hit] = c`, with `c` read off drawn data), whose base's counter counts too."""
        entry = self.marks.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        version, now = entry[1], _version(t)
        if version is not None and now is not None and now - version > 1:
            return None
        return entry[2] if len(entry) > 2 else "const"

    def made_by_factory(self, out: Any) -> None:
        self._mark(out)

    def made_drawn(self, out: Any) -> None:
        """`out` was drawn by a random factory from a shape alone."""
        self._mark(out, kind=_DRAWN, of=_origin(out))

    def derive(self, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, name: str = "") -> None:
        """A call (`name`) whose first tensor argument is marked returned `out`: mark `out` when every
        tensor argument is constant and the call draws no random numbers, else unmark it (an in-place call
        that mixed in other data; `torch.bernoulli(torch.full(shape, 0.9))`, new data every call)."""
        tensor: Any = self._tensor
        a0 = args[0] if args else None
        first = (a0[0] if a0 else None) if isinstance(a0, (list, tuple)) else a0
        if first is not None and self._kind(first) == _ELEMENT:  # (the mark of this very tensor, unchanged)
            # A value computed from an element (`usage[k] == 0`, `preds[i] == labels[i]`): of the same element,
            # whatever else it read, as long as it is one value too.
            of = self.marks[id(first)][3]
            picked: list[Any] = list(out) if isinstance(out, (list, tuple)) else [out]
            for value in picked:
                if isinstance(value, tensor) and value.numel() == 1:
                    self._mark(value, kind=_ELEMENT, of=of)
            return
        const = True
        # What is computed from drawn data and constants alone is drawn data too, from the first drawn argument's
        # origin; a `*_like` draw from a marked tensor is drawn from that tensor's.
        drawn: int | None = None
        like = name in _DRAWN_LIKE  # (called only when its first tensor is marked: capture/mode.py)
        seen = name in RANDOM_CALLS and not like  # (then unmarked below, whatever the arguments)
        # An in-place call (`dst[sel] = members[pick]`, `x.add_(y)`) has changed its target's version already:
        # its mark as it was before is what the call read.
        target = args[0] if args and _in_place(name) and isinstance(args[0], tensor) else None
        for a in () if seen else (*args, *kwargs.values()):
            for b in a if isinstance(a, (list, tuple)) else (a,):
                if isinstance(b, tensor):
                    seen = True
                    kind = self._kind(b) if b is not target else self._kind_before(b)
                    if drawn is None:
                        drawn = self.marks[id(b)][3] if kind == _DRAWN else (_origin(b) if like else None)
                    const = const and kind is not None
            if not const:
                break
        const = const and seen and (like or name not in RANDOM_CALLS)
        if target is not None:
            out = (target,)  # (what an in-place call returns is its target, or None for `__setitem__`)
        outs = out if isinstance(out, (list, tuple)) else (out,)
        for o in outs:
            if not isinstance(o, tensor):
                continue
            if const:
                self._mark(o, kind=_DRAWN if drawn is not None else None, of=drawn)
            else:
                self.marks.pop(id(o), None)

    def _mark(self, t: Any, *, kind: str | None = None, of: Any = None) -> None:
        """Mark `t` constant, or of `kind` (_DRAWN: `of` is its origin, see `drawn_from`; _ELEMENT: see
        `element_of`)."""
        if not isinstance(t, self._tensor):
            return
        try:
            ref = weakref.ref(t)
            self.marks[id(t)] = (ref, _version(t)) if kind is None else (ref, _version(t), kind, of)
        except TypeError:  # a tensor type without weak references: left unmarked
            return
        if len(self.marks) > self._purge_at:
            self.purge()

    def purge(self) -> None:
        """Drop the marks of freed tensors (at each step end, and when the table grows)."""
        # list() copies the items in one C call: another thread's forward may mark a tensor meanwhile.
        for k, entry in list(self.marks.items()):
            if entry[0]() is None:
                self.marks.pop(k, None)  # in place: the capture layer holds this dict
        self._purge_at = max(_PURGE_AT, 2 * len(self.marks))


def _in_place(name: str) -> bool:
    """Does a call of this `__name__` change its first argument in place (`add_`, `__setitem__`, `__iadd__`)?"""
    if name.startswith("__"):
        return name == "__setitem__" or (name.startswith("__i") and name not in ("__index__", "__int__", "__invert__"))
    return name.endswith("_")


def first_tensor_id(first: Any) -> int:
    """The id of a call's first tensor argument: the argument, or the first item of a list or tuple of them
    (`torch.stack([a, b])`, `torch.cat(parts)`: provenance follows constants through those too)."""
    if type(first) in (list, tuple) and first:
        return id(first[0])
    return id(first)


def _origin(t: Any) -> int:
    """The origin that drawn data computed from `t` is marked with: its storage's id (its own id without one)."""
    sid = _storage_id(t)
    return id(t) if sid is None else sid


def _storage_id(buf: Any) -> int | None:
    """id() of a buffer's storage; None for no buffer, or one with no storage yet (a lazy module's
    placeholder before its first forward refuses the question: nn.LazyBatchNorm1d's statistics)."""
    if buf is None:
        return None
    try:
        return id(buf.untyped_storage())
    except (ValueError, RuntimeError, NotImplementedError):
        return None
