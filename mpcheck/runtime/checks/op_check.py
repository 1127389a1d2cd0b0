"""MP001 / MP008 at a torch call: are its tensors on one device? `check_op` is the path every
intercepted torch call pays, so its fast paths (`_mixed_plain`, `_mixed`) are written for speed;
only a call whose tensors disagree takes `_check_op_slow`, which names the odd tensors and hands
them to mismatch.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.codes import is_metric_function
from mpcheck.runtime.checks.arguments import Args, Kwargs, Where, iter_tensors, op_name
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.torchapi import (
    CPU_BATCH_SIZES_NAMES,
    CPU_INDEX_NAMES,
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
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], tensor):
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
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], tensor):
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
    device_of = self.devices.device_of
    first_dev = None
    first = None
    odd: list[tuple[Where, Any, str]] = []
    cpu_index_ok = None
    for loc, t in iter_tensors(args, kwargs, self._tensor):
        d = device_of(t)
        if d == first_dev:
            continue
        if d == "cpu" and t.dim() == 0:
            continue  # a 0-dim CPU tensor mixes with any device
        if first_dev is None:
            first_dev = d
            first = t
            continue
        if cpu_index_ok is None:
            cpu_index_ok = getattr(func, "__name__", "") in CPU_INDEX_NAMES
        if cpu_index_ok and d == "cpu":
            continue
        if d == "cpu" and loc == (1, None) and t.dtype == self._int64:
            if getattr(func, "__name__", "") in CPU_BATCH_SIZES_NAMES:
                continue  # a packed sequence's batch sizes: on the CPU by PyTorch's rule
        odd.append((loc, t, d))
    fname = getattr(func, "__name__", "")
    loss = is_loss(fname)
    metric = False
    if odd and not loss:
        # A metric's predictions against its targets (`out.argmax(1) == y`, or an op inside `dice_score`):
        # the targets follow the predictions, as for a loss (MP008).
        site = site or self.sites()
        metric = is_comparison(fname) or is_metric_function(site.function)
    if not odd or not self.wants("MP008" if loss or metric else "MP001"):
        return args, kwargs
    what = name or op_name(func)
    if phase == "backward":
        what += " (in backward)"
    assert first_dev is not None  # the odd tensors are those off the first device
    return self._mismatch(
        what, first_dev, odd, args, kwargs, site=site, module=module, loss=loss or metric, metric=metric, first=first
    )


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
