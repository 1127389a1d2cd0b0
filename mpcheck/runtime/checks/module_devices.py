"""Where a module lives: the one device of its parameters and buffers (or None: none, or several),
and the devices of its whole subtree, each module read once and remembered until placements change
(Checker.invalidate_placement). The module-entry check reads `module_device` on every module call.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def module_device(self: Checker, module: Any) -> str | None:
    entry = self._placement.get(id(module))
    if entry is not None and entry[0]() is module:
        return entry[1]
    if self.plain_devices and self._tf_depth():
        with self._no_torch_function():
            return self._module_device(module)
    return self._module_device(module)


def _module_device(self: Checker, module: Any) -> str | None:
    self._devices_below(module)  # places `module` and every module under it
    entry = self._placement.get(id(module))
    if entry is not None and entry[0]() is module:
        return entry[1]
    self._subtree_devices.pop(id(module), None)  # remembered without its placement: walk again
    self._devices_below(module)
    return self._placement[id(module)][1]


def gpus_below(self: Checker, module: Any) -> tuple[str, ...]:
    """The CUDA devices of `module`'s weights and its submodules', sorted: more than one for a model
    split over GPUs (a tensor made in its forward may be needed on any of them)."""
    return tuple(sorted(d for d in self._devices_below(module) if d.startswith("cuda")))


def _devices_below(self: Checker, module: Any) -> frozenset[str]:
    """The devices of `module`'s parameters and buffers and of all its submodules' (the devices
    of `module.parameters()` and `module.buffers()`), remembered per module until placements
    change. The walk places each module it passes too (`_placement`: the one device of its own
    weights, or a container's children's if they agree): the first step asks the placement of
    every module, root model first, and each would otherwise walk its own subtree again.
    Each distinct set of devices is kept once (`_device_sets`): a model's modules share a few."""
    memo = self._subtree_devices
    key = id(module)
    entry = memo.get(key)
    if entry is not None and entry[0]() is module:
        return entry[1]
    ref = weakref.ref(module)
    memo[key] = (ref, _NONE)  # a module that holds itself: no endless walk
    device_of = self.devices.device_of
    own: set[str] = set()
    for p in module._parameters.values():
        if p is not None:
            own.add(device_of(p))
    buffers = module._buffers
    if buffers:
        for b in buffers.values():
            if b is not None:
                own.add(device_of(b))
    below = own
    children = module._modules
    if children:
        below = set(own)
        walk = self._devices_below
        for child in children.values():
            if child is not None:
                below |= walk(child)
    found = frozenset(below)
    found = self._device_sets.setdefault(found, found)
    memo[key] = (ref, found)
    devs = own or found
    self._placement[key] = (ref, next(iter(devs)) if len(devs) == 1 else None)
    return found


_NONE: frozenset[str] = frozenset()


def modules_of(roots: Iterable[Any]) -> list[Any]:
    """The modules of the root models, each once, in the order of `root.modules()` (pre-order): walked
    through `_modules` without its generators and names (once per session, over every module, in the
    first step's memory table and provenance listing)."""
    out: list[Any] = []
    seen: set[int] = set()
    stack = list(roots)
    stack.reverse()
    while stack:
        module = stack.pop()
        if module is None or id(module) in seen:
            continue
        seen.add(id(module))
        out.append(module)
        children = module._modules
        if children:
            stack.extend(reversed(children.values()))
    return out


def model_devices(self: Checker, module: Any) -> list[str]:
    devs = {self.devices.device_of(p) for p in module.parameters()}
    devs |= {self.devices.device_of(b) for b in module.buffers()}
    return sorted(devs)
