"""A device mismatch found by op_check.py or module_entry.py, reported where its bug is: at the module
call that let the tensor in unmoved, at its root cause before the call (placement.py: a tensor made
on the current device, a module never placed or placed on the current device), or at the call itself;
a module's input off a collapsed split's device is counted on that collapse's MP007 instead. With
on_mismatch="move" the odd tensors are moved and the call goes on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.arguments import Args, Kwargs, Where, describe_where, iter_tensors, replace_tensors
from mpcheck.runtime.checks.placement import (
    Cause,
    contains,
    made_cause,
    module_cause,
)
from mpcheck.runtime.checks.plain_attributes import plain_attribute
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.tied import tied_partner
from mpcheck.runtime.checks.wording import tensor_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def _mismatch(
    self: Checker,
    what: str,
    expected: str,
    odd: list[tuple[Where, Any, str]],
    args: Args,
    kwargs: Kwargs,
    *,
    site: Site | None,
    module: str | None,
    expected_is: str = "the other tensors are",
    loss: bool = False,
    metric: bool = False,
    first: Any = None,
    module_obj: Any = None,
    targets: str | None = None,
) -> tuple[Args, Kwargs]:
    """Report each tensor of `odd` off `expected` (the device of `first`, the call's first tensor);
    loss: the call is a loss or a metric (predictions and targets), or weighs a loss's value; metric: a
    metric's (reported once per metric function); targets: what the fix moves, when not the loss's targets
    ("it": a mask or weights applied to a loss's value); module_obj: the module whose input this is
    (a module-entry check). Where the root cause lies before this call (placement.py), it is reported there."""
    site = site or self.sites()
    module = module or self.current_module()
    if self.unmoved.records:
        again = self.unmoved.consequence(expected, first, odd, site)
        if again is not None:  # a later use of a tensor already reported unmoved: the same bug
            return _repair(self, args, kwargs, odd, expected, again)
    # Where a repaired call goes on (on_mismatch="move"): the odd tensors join the first one, unless the
    # first one is the module input that came in unmoved, off its module's device: then everything
    # joins the module's device, as the fix would have it (else the call's result would land off the
    # module, and every later use of it would be reported again, a consequence of the repair).
    repair_to = expected
    for loc, t, d in odd:
        attribute = _plain_attribute_met(self, t, first)
        if attribute is not None:
            # The module's own tensor was left behind by its move, not the input let in unmoved: reported at the
            # use, and the call goes on with the attribute where the input is (as the fix, a buffer, puts it).
            held, on, meets = attribute
            _report_plain_attribute(self, what, site, module, held, on, meets)
            self.unmoved.note(held[0], on, meets, site)
            if held[0] is first:
                repair_to = d
            continue
        # A tensor that reached this call unmoved from a module's input, off that module's device:
        # blame the module call. Either the odd tensor (`self.lin(h) + mask`) or the first one
        # (`mask + self.lin(h)`: the mask is the one off the module's device).
        blamed = None
        if self._tls.entries and not loss:  # a loss or metric: the targets or weights follow the predictions (MP008)
            entry = self._entry_of(t, expected)
            if entry is not None:
                blamed = (entry, t, d, expected)
            elif first is not None:
                entry = self._entry_of(first, d)
                if entry is not None:
                    blamed = (entry, first, expected, d)
        if blamed is not None:
            (e, e_loc, e_input), _, bt_dev, module_dev = blamed
            msg = f"{e.what}: {describe_where(e_loc)} ({tensor_words(e_input)}) is on {bt_dev}, "
            modules: tuple[str, ...] = (e.path,)
            if e.device is None:  # a model over several devices: name where the input is first needed
                msg += f"and is used unmoved at {site} ({what}), which needs {module_dev}"
                if module and module != e.path:
                    modules += (module,)
            else:
                msg += f"the module's parameters and buffers are on {module_dev}"
            where, target, off = e.site, module_dev, bt_dev
            holder = e.module if e.device is not None else None
        else:
            msg = f"{what}: {describe_where(loc)} ({tensor_words(t)}) is on {d}, {expected_is} on {expected}"
            modules = (module,) if module else ()
            where, target, off = site, expected, d
            holder = module_obj
        tied = (
            None
            if holder is None
            else tied_partner(
                holder, target, self.namer.roots() if self.namer else (), self.module_name, self.devices.device_of
            )
        )
        if tied is not None:
            msg += f"; its `{tied[0]}` is also `{tied[1]}` (tied weights: one Parameter, on one device)"
        cause = self._root_cause(t, d, expected, first, blamed, module_obj, module, site, what)
        if cause is not None:
            self.emit(
                cause.code,
                cause.site,
                cause.message,
                devices=cause.devices,
                modules=cause.modules,
                suggestion=cause.suggestion,
                extra={"use_site": str(site)},
                fatal=True,
            )
        else:
            code = "MP001"
            if loss and blamed is None:  # the targets follow the predictions; no module should move for a loss
                code = "MP008"
                if targets is not None:
                    sugg = f"move {targets} to the loss's device with `.to('{target}')` before this line"
                else:
                    which = "the targets" if loc[0] in (1, "target") else describe_where(loc)
                    sugg = f"move {which} to the predictions' device with `.to('{target}')` before the loss"
            elif tied is not None:
                sugg = (
                    f"place the modules that share `{tied[1]}` on one device (a device map must keep tied weights "
                    "together), or untie them"
                )
            else:
                sugg = f"move it with `.to('{target}')` before this call (or place the producing module on {target})"
            # A module's input off its (collapsed) device, or two operands inside a collapsed model's forward
            # (the forward still moves activations to the old stages' devices): the collapse's, counted on
            # its MP007.
            module_input = blamed is not None or module_obj is not None
            explained = code == "MP001" and self._collapses.explains(
                e.path if blamed else module, target, off, where, self.module_name, either_way=not module_input
            )
            # A metric function is reported once: its targets' one missing move shows at each of its operations.
            in_metric = (where.path, where.function) if metric and code == "MP008" else None
            if not explained and in_metric not in self._metrics_reported:
                self.emit(code, where, msg, devices=(target, off), modules=modules, suggestion=sugg)
                if in_metric is not None:
                    self._metrics_reported.add(in_metric)
        # Its later uses, and what is computed from it where it is, are this finding's (unmoved.py).
        reported_at = cause.site if cause is not None else where
        if cause is not None and cause.misplaced is not None:
            # The module is what is off its device: its weights there are, and the call goes on beside
            # the input, where the fix puts the module.
            off_module, input_dev = cause.devices[0], cause.devices[1]
            for w in (*cause.misplaced.parameters(), *cause.misplaced.buffers()):
                if self.devices.device_of(w) == off_module:
                    self.unmoved.note(w, off_module, input_dev, reported_at)
            repair_to = input_dev
            continue
        if blamed is not None:
            self.unmoved.note(blamed[0][2], off, target, reported_at)
            self.unmoved.note(blamed[1], off, target, reported_at)
        else:
            self.unmoved.note(t, d, expected, reported_at)
        if blamed is not None and blamed[1] is first:
            repair_to = blamed[3]
    return _repair(self, args, kwargs, odd, expected, repair_to)


def _plain_attribute_met(self: Checker, t: Any, first: Any) -> tuple[tuple[Any, Any, str], str, str] | None:
    """((tensor, its module, attribute), its device, the device it meets) when `t` or `first`, the two sides of
    this mismatch, is a plain tensor attribute of a module the call is inside (plain_attributes.py)."""
    if not self.wants("MP001"):
        return None
    modules = [e.module for e in self._tls.entries if e.module is not None]
    modules += self.namer.roots() if self.namer else []
    device_of = self.devices.device_of
    for held in (t, first):
        if held is None:
            continue
        found = plain_attribute(modules, held)
        if found is not None:
            other = first if held is t else t
            return (held, found[0], found[1]), device_of(held), device_of(other)
    return None


def _report_plain_attribute(
    self: Checker, what: str, site: Site, module: str | None, held: tuple[Any, Any, str], on: str, meets: str
) -> None:
    tensor, owner, attr = held
    path, cls = self.module_name(owner), type(owner).__name__
    self.emit(
        "MP001",
        site,
        f"{what}: `{path}.{attr}` ({tensor_words(tensor)}) is on {on}, the tensors it meets are on {meets}: it is "
        f"a plain tensor attribute of {cls} '{path}', not a parameter or a buffer, which a move of the "
        "module (`.to()`, `.cuda()`) does not carry",
        devices=(meets, on),
        modules=tuple(dict.fromkeys(m for m in (path, module) if m)),
        suggestion=f"register it as a buffer in {cls}.__init__ (`self.register_buffer('{attr}', tensor)`) so that "
        "moving the module moves it",
    )


def _repair(
    self: Checker, args: Args, kwargs: Kwargs, odd: list[tuple[Where, Any, str]], expected: str, repair_to: str
) -> tuple[Args, Kwargs]:
    """on_mismatch="move": the call goes on with its tensors on `repair_to`: the odd ones, and where
    `repair_to` is not `expected`, those on `expected` too."""
    if self.on_mismatch != "move":
        return args, kwargs
    moved = {}
    to_move = [(loc, t) for loc, t, _ in odd]
    if repair_to != expected:  # the first tensor, and any other on its device, go too
        device_of = self.devices.device_of
        to_move += [(loc, t) for loc, t in iter_tensors(args, kwargs, self._tensor) if device_of(t) == expected]
    for loc, t in to_move:
        if self.devices.device_of(t) == repair_to:
            continue
        try:
            with self.suspend():
                moved[loc] = self.devices.move(t, repair_to)
        except Exception:  # e.g. out of a meta tensor: leave it, PyTorch decides
            pass
    if moved:
        return replace_tensors(args, kwargs, moved)
    return args, kwargs


def _root_cause(
    self: Checker,
    t: Any,
    d: str,
    expected: str,
    first: Any,
    blamed: Any,
    module_obj: Any,
    module: str | None,
    site: Site,
    what: str,
) -> Cause | None:
    """The line behind a mismatch of `t` (on `d`, the call wants `expected`): a tensor made on the
    current device inside a stage on another GPU, or the module's own placement (shared, placed on the
    current device, never placed). None: the mismatch is reported where it happens."""
    placements = self.placements
    if blamed is not None:  # a module's input that reached a torch call unmoved
        (entry, _, bt), _, bt_dev, module_dev = blamed  # bt: the module's input (a view of it reached the call)
        if entry.device is None:  # a spread model's input: only a tensor made on the current device says more
            made = placements.made_of(bt)
            return (
                made_cause(made, site, what, module_dev)
                if made is not None and made.explains(bt_dev, module_dev)
                else None
            )
        return self._cause_for_input(bt, bt_dev, entry.module, entry.path, module_dev, entry.site, what)
    if module_obj is not None:
        return self._cause_for_input(t, d, module_obj, module or "", expected, site, what)
    made = placements.made_of(t)
    if made is not None and made.explains(d, expected):
        return made_cause(made, site, what, expected)
    if first is not None:
        made = placements.made_of(first)
        if made is not None and made.explains(expected, d):
            return made_cause(made, site, what, d)
    return None


def _cause_for_input(
    self: Checker, t: Any, t_dev: str, module: Any, path: str, module_dev: str, use: Site, what: str
) -> Cause | None:
    made = self.placements.made_of(t)
    if made is not None and made.explains(t_dev, module_dev):
        return made_cause(made, use, what, module_dev)
    if not (self.wants("MP001") or self.wants("MP004") or self.wants("MP007")):
        return None
    return module_cause(
        self.placements,
        module,
        path,
        module_dev,
        t_dev,
        use,
        name=self.module_name,
        outermost_unplaced=self._outermost_unplaced,
    )


def _outermost_unplaced(self: Checker, module: Any) -> Any:
    """The outermost module containing `module` (in a known root model) whose weights all sit on the CPU."""
    namer = self.namer
    if namer is None:
        return module
    for root in namer.roots():
        if not contains(root, module):
            continue
        chain = [root]
        for name, sub in root.named_modules():
            if sub is module:
                parts = name.split(".") if name else []
                chain = [root] + [root.get_submodule(".".join(parts[: i + 1])) for i in range(len(parts))]
                break
        for m in chain:
            if set(self.model_devices(m)) <= {"cpu"}:
                return m
    return module
