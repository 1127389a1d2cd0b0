"""MP001 / MP008 at a module call: its inputs against the device of its parameters and buffers.
A torch.nn leaf is checked at once (`check_module_entry`); a module that may move its inputs
itself (a user module, one with pre-hooks) only notes them (`enter_module`, `enter_root`), and a
noted tensor that reaches a torch call unmoved is blamed on that module call (`_entry_of`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.arguments import Args, Kwargs, Where, describe_where, iter_tensors, replace_tensors
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.thread_state import Entry
from mpcheck.runtime.checks.torchapi import (
    is_loss_module,
)
from mpcheck.runtime.checks.wording import tensor_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def check_module_entry(
    self: Checker, module: Any, path: str, args: Args, kwargs: Kwargs, *, site: Site | None = None
) -> tuple[Args, Kwargs]:
    """Inputs vs the one device the module's parameters and buffers live on (when
    they live on one; a split container checks nothing: its children do). Sound only for
    a module whose forward uses its inputs unmoved (a torch.nn leaf without pre-hooks):
    any other module goes through enter_module()."""
    dev = self.module_device(module)
    if dev is None:
        return args, kwargs
    if self.inputs_on(dev, args, kwargs):
        return args, kwargs  # the common case: every input on the module's device
    odd = self._off_device(dev, args, kwargs)
    if is_loss_module(module):
        return self._loss_weights_mismatch(module, path, dev, odd, args, kwargs, site=site)
    if not odd or not self.wants("MP001"):
        return args, kwargs
    return self._mismatch(
        f"input of {type(module).__name__} '{path}'",
        dev,
        odd,
        args,
        kwargs,
        site=site,
        module=path,
        expected_is="the module's parameters and buffers are",
        module_obj=module,
    )


def _loss_weights_mismatch(
    self: Checker,
    module: Any,
    path: str,
    dev: str,
    odd: list[tuple[Where, Any, str]],
    args: Args,
    kwargs: Kwargs,
    *,
    site: Site | None,
) -> tuple[Args, Kwargs]:
    """A loss module (nn.CrossEntropyLoss(weight=w)) whose class weights sit on `dev` and whose
    inputs do not: MP008. The weights are small and the predictions large: move the criterion."""
    if not odd or not self.wants("MP008"):
        return args, kwargs
    preds = next((t for _, t in iter_tensors(args, kwargs, self._tensor)), None)
    target = self.devices.device_of(preds) if preds is not None else odd[0][2]
    loc, t, d = odd[0]
    self.emit(
        "MP008",
        site or self.sites(),
        f"input of {type(module).__name__} '{path}': {describe_where(loc)} ({tensor_words(t)}) is on {d}, "
        f"the loss's weights are on {dev}",
        devices=(dev, d),
        modules=(path,),
        suggestion=f"move the loss module (its weights) to the predictions' device with `.to('{target}')`, "
        "and the targets with it",
    )
    if self.on_mismatch == "move":
        try:
            with self.suspend():
                moved = {loc: self.devices.move(t, dev) for loc, t, _ in odd}
            return replace_tensors(args, kwargs, moved)
        except Exception:  # e.g. out of a meta tensor: leave it, PyTorch decides
            pass
    return args, kwargs


def enter_module(self: Checker, module: Any, path: str, dev: str, args: Args, kwargs: Kwargs) -> bool:
    """A module that may move or ignore its inputs (a user module, a module with pre-hooks)
    is called with inputs off its device `dev`: nothing is reported yet. Its forward may move
    them (`blk(h.to(blk.weight.device))`), a pre-hook may (accelerate), or it may never use
    one (T5's mask when a position bias is given). Only when one of these very tensors
    reaches a torch call unmoved and mismatched is it reported, at this call's line (see
    _entry_of). Returns True when an entry was pushed: the caller pops it with leave_module()."""
    odd = self._off_device(dev, args, kwargs)
    if not odd:
        return False
    site = self.sites()
    self._tls.entries.append(
        Entry(
            f"input of {type(module).__name__} '{path}'",
            path,
            dev,
            site,
            {id(t): (t, loc) for loc, t, _ in odd},
            module,
        )
    )
    return True


def enter_root(self: Checker, module: Any, path: str, args: Args, kwargs: Kwargs) -> bool:
    """The outermost call of a model spread over several devices (or of none): no device to compare its
    inputs with yet. Its tensor inputs are noted; one that reaches a module or torch call on another
    device unmoved is reported at this call's line (the caller did not move it, as the linter says),
    naming the use. A model whose forward moves its inputs never reaches that."""
    # Only an input on none of the model's devices (CPU data for a GPU model): one already on a
    # device of the model is the forward's to carry between stages (`h.to(dev)` but not `t`), and
    # is reported inside it, where the hop is missing.
    self.module_device(module)  # one walk places the model and remembers the devices under each module
    entry = self._subtree_devices.get(id(module))
    devs = entry[1] if entry is not None and entry[0]() is module else frozenset(self.model_devices(module))
    device_of = self.devices.device_of
    tensors = {id(t): (t, loc) for loc, t in iter_tensors(args, kwargs, self._tensor) if device_of(t) not in devs}
    if not tensors:
        return False
    self._tls.entries.append(
        Entry(f"input of {type(module).__name__} '{path}'", path, None, self.sites(), tensors, module)
    )
    return True


def leave_module(self: Checker, out: Any = None) -> None:
    """The call of the last entry returned `out` (None when it raised)."""
    entry = self._tls.entries.pop()
    if entry.moved_weights is not None:
        self.judge_weight_moves(entry, out)  # its own weights brought to its input (weights_to_input.py)


def _entry_of(self: Checker, t: Any, expected: str) -> tuple[Entry, Where, Any] | None:
    """The outermost module call that received `t` itself (or the input `t` is a view of), unmoved,
    while living on `expected`: the line where the transfer is missing. (entry, the input's place in
    that call, the input)."""
    key = id(t)
    for entry in self._tls.entries:
        hit = entry.tensors.get(key)
        if hit is not None and hit[0] is t and entry.device in (expected, None):
            return entry, hit[1], t
    # A view of an input is that input, unmoved (`src, dst = edge_index`, `mask[:, None]`): a view never
    # changes device, so the transfer is still missing at the call that let the input in. `_base` is
    # the root of a chain of views: an input that is itself a view shares it.
    with self._no_torch_function():  # reading `_base` is a call a function mode would see
        base = t._base
        if base is None:
            return None
        for entry in self._tls.entries:
            if entry.device not in (expected, None):
                continue
            for u, loc in entry.tensors.values():
                if u is base or (u._base is not None and u._base is base):
                    return entry, loc, u
    return None


def _off_device(self: Checker, dev: str, args: Args, kwargs: Kwargs) -> list[tuple[Where, Any, str]]:
    device_of = self.devices.device_of
    odd = []
    for loc, t in iter_tensors(args, kwargs, self._tensor):
        d = device_of(t)
        if d != dev and not (d == "cpu" and t.dim() == 0):
            odd.append((loc, t, d))
    return odd


def inputs_on(self: Checker, dev: str, args: Args, kwargs: Kwargs) -> bool:
    """Are all tensor arguments on `dev`? (The fast path of the module-entry check.)"""
    if self.plain_devices and self._tf_depth():
        with self._no_torch_function():
            return self._all_on(dev, args, kwargs)
    return self._all_on(dev, args, kwargs)


def _all_on(self: Checker, dev: str, args: Args, kwargs: Kwargs) -> bool:
    device_of = self.devices.device_of
    tensor = self._tensor
    for a in args:
        if isinstance(a, tensor) and device_of(a) != dev:
            return False
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, tensor) and device_of(a) != dev:
                return False
    return True
