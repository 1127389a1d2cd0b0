"""Mismatches that follow from a collapse (MP007): a split model moved onto one device whose forward
still moves activations to its old stages' devices.

After `model.to('cuda:0')` on a model split over cuda:0 and cuda:1, `self.net2(x.to('cuda:1'))` finds
net2 on cuda:0: PyTorch fails there, but the line to change is the collapse, already reported as MP007.
Such an input mismatch (a module inside the collapsed model, now on the collapse's target, fed a tensor
on one of the model's devices before it), or two operands of a torch call inside that model's forward, one
on the target and one on such a device, is counted on the MP007 finding instead of being reported as
an MP001 of its own. Anything else (a module outside that model, a device it never used, a module moved
off the target since) is reported as usual.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from mpcheck.finding import Finding
from mpcheck.runtime.checks.sites import Site

_MAX_COLLAPSES = 32  # models collapsed in one run (each remembered once)
_MAX_SITES = 4  # lines listed on the MP007 finding


class Collapses:
    def __init__(self) -> None:
        # (the collapsed model, the device it went to, the devices it was split over, its MP007); the
        # model is named when asked: it may get its name (`model`) only when first called.
        self._seen: list[tuple[weakref.ref[Any], str, frozenset[str], Finding]] = []

    def record(self, module: Any, target: str, devices: tuple[str, ...], finding: Finding | None) -> None:
        if finding is None or len(self._seen) >= _MAX_COLLAPSES:
            return
        if any(ref() is module and t == target for ref, t, _, _ in self._seen):
            return
        self._seen.append((weakref.ref(module), target, frozenset(devices), finding))

    def explains(
        self,
        module_path: str | None,
        module_dev: str,
        off_dev: str,
        site: Site,
        name_of: Callable[[Any], str],
        either_way: bool = False,
    ) -> bool:
        """Is the input of `module_path` (on `module_dev`) found on `off_dev` a consequence of a
        collapse? Then it is counted on that MP007 (extra "mismatches_after", the first lines).
        `either_way`: two operands of a torch call inside the module's forward (`torch.cat([x, skip])`
        after the forward moved `x` to an old stage's device): one on the collapse's device and the
        other on one of the model's old devices, whichever comes first."""
        if not module_path or not self._seen:
            return False
        for ref, target, devices, finding in self._seen:
            model = ref()
            if model is None:
                continue
            name = name_of(model)
            inside = module_path == name or module_path.startswith(name + ".")
            ends = [(module_dev, off_dev), (off_dev, module_dev)] if either_way else [(module_dev, off_dev)]
            if inside and any(on == target and off in devices and off != target for on, off in ends):
                after = finding.extra.setdefault("mismatches_after", [])
                where = str(site)
                if where not in after and len(after) < _MAX_SITES:
                    after.append(where)
                return True
        return False
