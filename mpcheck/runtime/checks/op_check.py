"""MP001 / MP008 at a torch call: are its tensors on one device? `check_op` is the path every
intercepted torch call pays, so its fast paths (`_mixed_plain`, `_mixed`) are written for speed;
only a call whose tensors disagree takes `_check_op_slow`, which decides the device the call belongs on
(`_where_needed`), names the tensors off it and hands them to mismatch.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.codes import is_metric_function
from mpcheck.runtime.checks.arguments import Args, Kwargs, Where, iter_tensors, op_name
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.torchapi import (
    CPU_BATCH_SIZES_NAMES,
    CPU_INDEX_NAMES,
    INDEXED_FIRST,
    PER_INDEX_PREFIXES,
    assigns_through_a_view,
    is_comparison,
    is_loss,
)

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def check_op(
    self: Checker,
    func: Any,
    args: Args,
    kwargs: Kwargs,
    *,
    site: Site | None = None,
    module: str | None = None,
    name: str | None = None,
    phase: str | None = None,
) -> tuple[Args, Kwargs]:
    """The devices of one torch call's tensors. Allowed mixes: 0-dim CPU tensors; CPU
    indices and values in indexing. Returns the (possibly moved) args and kwargs."""
    if self.plain_devices:
        if self._tf_depth():
            with self._no_torch_function():
                mixed = self._mixed_plain(args, kwargs)
        else:
            mixed = self._mixed_plain(args, kwargs)
    else:
        mixed = self._mixed(args, kwargs)
    if not mixed:
        return args, kwargs
    return self._check_op_slow(func, args, kwargs, site=site, module=module, name=name, phase=phase)


# What an index tuple may start with before its tensors (`scores[:, ids]`, `x[..., idx]`, `x[None, idx]`): such a
# tuple is read item by item, as a list of tensors is. Not an int: shape tuples (`x.reshape((b, -1))`) start with
# one, and every call with one would pay the scan (+0.2 us); `h[0, idx]` is left to PyTorch's own error.
_INDEX_LEADS = frozenset({slice, type(Ellipsis), type(None)})


def _mixed_plain(self: Checker, args: Args, kwargs: Kwargs) -> bool:
    """_mixed() for devices named after `t.device` alone: tensors whose torch.device objects
    are all equal have one device name; only when they differ are the names compared.
    The three loops repeat one test by intent: every torch call pays this, and folding them into
    one loop (a tuple per tensor argument) measured +40-70% per call on 2 tensor arguments."""
    tensor = self._tensor
    seen = None
    for a in args:
        if isinstance(a, tensor):
            d = a.device
            if seen is None:
                seen = d
            elif d != seen:
                return self._mixed(args, kwargs)
        elif isinstance(a, (list, tuple)) and a and (isinstance(a[0], tensor) or type(a[0]) in _INDEX_LEADS):
            for b in a:
                if isinstance(b, tensor):
                    d = b.device
                    if seen is None:
                        seen = d
                    elif d != seen:
                        return self._mixed(args, kwargs)
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, tensor):
                d = a.device
                if seen is None:
                    seen = d
                elif d != seen:
                    return self._mixed(args, kwargs)
            elif isinstance(a, (list, tuple)) and a and isinstance(a[0], tensor):
                return True  # rare: let the full pass decide, as _mixed() does
    return False


def _mixed(self: Checker, args: Args, kwargs: Kwargs) -> bool:
    """The fast path every torch call pays: are all non-scalar tensors on one device?"""
    device_of = self.devices.device_of
    tensor = self._tensor
    seen = None
    for a in args:
        if isinstance(a, tensor):
            d = device_of(a)
        elif isinstance(a, (list, tuple)) and a and (isinstance(a[0], tensor) or type(a[0]) in _INDEX_LEADS):
            for b in a:
                if isinstance(b, tensor):
                    d = device_of(b)
                    if d != seen and not (d == "cpu" and b.dim() == 0):
                        if seen is not None:
                            return True
                        seen = d
            continue
        else:
            continue
        if d != seen and not (d == "cpu" and a.dim() == 0):
            if seen is not None:
                return True
            seen = d
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, tensor):
                d = device_of(a)
                if d != seen and not (d == "cpu" and a.dim() == 0):
                    if seen is not None:
                        return True
                    seen = d
            elif isinstance(a, (list, tuple)) and a and isinstance(a[0], tensor):
                return True  # rare: let the full pass decide
    return False


def _check_op_slow(
    self: Checker,
    func: Any,
    args: Args,
    kwargs: Kwargs,
    *,
    site: Site | None,
    module: str | None,
    name: str | None,
    phase: str | None,
) -> tuple[Args, Kwargs]:
    if getattr(func, "__name__", "").startswith(PER_INDEX_PREFIXES):
        return self._check_per_index(func, args, kwargs, site=site, module=module, name=name, phase=phase)
    if assigns_through_a_view(func, args, self._tensor):
        return args, kwargs
    first_dev, first, odd = _off(self, func, args, kwargs, None)
    fname = getattr(func, "__name__", "")
    loss = is_loss(fname)
    metric = False
    if odd and not loss:
        # A metric's predictions against its targets (`out.argmax(1) == y`, or an op inside `dice_score`):
        # the targets follow the predictions, as for a loss (MP008).
        site = site or self.sites()
        metric = is_comparison(fname) or is_metric_function(site.function)
    weighs: Any = None
    if odd and not loss and not metric:
        # A loss's value against another tensor (`(per_token_loss * mask).sum()`): the mask or weights
        # follow the loss, as its targets do (MP008).
        weighs = self.loss_values.find(args, kwargs)
    if not odd or not self.wants("MP008" if loss or metric or weighs is not None else "MP001"):
        return args, kwargs
    assert first_dev is not None  # the odd tensors are those off the first device
    if weighs is not None:
        first_dev, first, odd = _off(self, func, args, kwargs, self.devices.device_of(weighs))
        assert first_dev is not None
        if not odd:  # only 0-dim CPU tensors or allowed indices were off the loss: nothing mixes
            return args, kwargs
    elif not loss and not metric:
        # Where the call belongs: with its weights, else with most of its tensors (not merely its first);
        # at a line met before, where it was found to belong then (the same repair each time it runs).
        site = site or self.sites()
        needed = self._needed_at.get(site)
        if needed is None or needed not in (first_dev, *(d for _, _, d in odd)):
            needed = self._needed_at[site] = _where_needed(self, first_dev, odd, args, kwargs)
        if needed != first_dev:
            first_dev, first, odd = _off(self, func, args, kwargs, needed)
            assert first_dev is not None
    what = name or op_name(func)
    if phase == "backward":
        what += " (in backward)"
    if weighs is not None:
        return self._mismatch(
            what, first_dev, odd, args, kwargs, site=site, module=module, loss=True, first=weighs,
            expected_is="the loss it is applied to is", targets="it",
        )  # fmt: skip
    return self._mismatch(
        what, first_dev, odd, args, kwargs, site=site, module=module, loss=loss or metric, metric=metric, first=first
    )


def _off(
    self: Checker, func: Any, args: Args, kwargs: Kwargs, expected: str | None
) -> tuple[str | None, Any, list[tuple[Where, Any, str]]]:
    """The call's tensors off `expected` (None: the device of its first tensor), with the first tensor on
    `expected`, as (expected, that tensor, [(where, tensor, device), ...]). Allowed mixes are not off:
    0-dim CPU tensors, CPU indices and values in indexing, a packed sequence's CPU batch sizes, and, on virtual
    GPUs, meta tensors that no label places (PyTorch's own placeholders, which hold no data anywhere)."""
    device_of = self.devices.device_of
    placeholders = self.devices.name == "virtual"
    first = None
    odd: list[tuple[Where, Any, str]] = []
    cpu_index_ok = None
    for loc, t in iter_tensors(args, kwargs, self._tensor):
        d = device_of(t)
        if d == expected:
            if first is None:
                first = t
            continue
        if d == "cpu" and t.dim() == 0:
            continue  # a 0-dim CPU tensor mixes with any device
        if d == "meta" and placeholders:
            continue  # on virtual GPUs, a meta tensor no label places is PyTorch's own placeholder (a jagged
            # nested tensor's dummy): it holds no data anywhere, and torch decides
        if expected is None:
            expected = d
            first = t
            continue
        if cpu_index_ok is None:
            cpu_index_ok = getattr(func, "__name__", "") in CPU_INDEX_NAMES
        if cpu_index_ok and loc != (0, None) and t.dim() == 0:
            continue  # `x[i]` with a 0-dim index tensor: read as a Python int, wherever it is
        if cpu_index_ok and d == "cpu" and (loc != (0, None) or getattr(func, "__name__", "") not in INDEXED_FIRST):
            continue  # CPU indices (or values) next to a tensor on a GPU; not a CPU tensor indexed by GPU indices
        if d == "cpu" and loc == (1, None) and t.dtype == self._int64:
            if getattr(func, "__name__", "") in CPU_BATCH_SIZES_NAMES:
                continue  # a packed sequence's batch sizes: on the CPU by PyTorch's rule
        odd.append((loc, t, d))
    return expected, first, odd


def _where_needed(self: Checker, first_dev: str, odd: list[tuple[Where, Any, str]], args: Args, kwargs: Kwargs) -> str:
    """The device a mixed call belongs on, as its fix would have it: the one device of its parameters
    (`torch.where(mask, self.mask_emb, x)`: the mask is the one to move), else the device of most of its
    tensors in autograd's graph (the work; `xy - dist`: the locations move to the head's output), else a
    GPU before the CPU (in a program that uses GPUs, a tensor left on the host is the one to move:
    `state = torch.zeros(p.shape)` against `p.grad`), else of most of its tensors, else its first tensor's. A
    repaired call (on_mismatch="move") goes on there, so that its result lands where the rest of the work
    is, not on the odd tensor's device, where every later use would be reported again."""
    # device -> (holds a parameter, tensors that require grad, a GPU, tensors)
    score = {d: [0, 0, int(d not in ("cpu", "meta")), 0] for d in (first_dev, *(d for _, _, d in odd))}
    device_of = self.devices.device_of
    parameter = self._parameter
    for _, t in iter_tensors(args, kwargs, self._tensor):
        s = score.get(device_of(t))
        if s is not None:
            s[0] |= isinstance(t, parameter)
            s[1] += t.requires_grad
            s[3] += 1
    if sum(s[0] for s in score.values()) > 1:  # weights on two devices: the count decides
        for s in score.values():
            s[0] = 0
    best = max(score.values())
    return first_dev if score[first_dev] == best else next(d for d, s in score.items() if s == best)


def _check_per_index(
    self: Checker,
    func: Any,
    args: Args,
    kwargs: Kwargs,
    *,
    site: Site | None,
    module: str | None,
    name: str | None,
    phase: str | None,
) -> tuple[Args, Kwargs]:
    """A call that pairs its tensor lists index by index (torchapi.PER_INDEX_PREFIXES): each index's
    tensors, with the arguments that are single tensors, on one device (a 0-dim CPU tensor mixes)."""
    device_of = self.devices.device_of
    groups: dict[int | None, list[tuple[Where, Any]]] = {}
    for loc, t in iter_tensors(args, kwargs, self._tensor):
        groups.setdefault(loc[1], []).append((loc, t))
    singles = groups.pop(None, [])
    what = name or op_name(func)
    if phase == "backward":
        what += " (in backward)"
    for _, members in sorted(groups.items()):
        first_dev, first = None, None
        odd: list[tuple[Where, Any, str]] = []
        for loc, t in (*members, *singles):
            d = device_of(t)
            if d == first_dev or (d == "cpu" and t.dim() == 0):
                continue
            if first_dev is None:
                first_dev, first = d, t
            else:
                odd.append((loc, t, d))
        if odd and first_dev is not None and self.wants("MP001"):
            args, kwargs = self._mismatch(
                what, first_dev, odd, args, kwargs, site=site, module=module, loss=False, first=first
            )
    return args, kwargs
