"""MP001's cause: a factory (`torch.arange(T)`, `torch.zeros(n, d)`) called without `device=` inside the
forward of a module on a GPU makes its tensor on the CPU. Remembered (placement.py), and if the tensor
(or one computed from it on the CPU) meets the module's tensors unmoved, the finding is at the factory's
line, with the fix there (`device=`), not only at the op that fails.

Only tensors of one element or more are remembered (a 0-dim CPU tensor mixes with any device), only
inside a module's forward (a batch made on the CPU in the training loop is moved later, as it should be),
and only for a module on a GPU or a model split over GPUs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.placement import Made

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def on_host_made_tensor(self: Checker, t: Any, factory: str) -> None:
    """`t` was just made on the CPU by `torch.<factory>()` without device=, inside a module's forward."""
    if not isinstance(t, self._tensor) or t.dim() == 0 or not self.wants("MP001"):
        return
    owner = self._running_module()
    if owner is None:
        return
    how = f"`torch.{factory}()` without device="
    module_dev = self.module_device(owner)
    if module_dev is None:
        # A model split over GPUs (or a holder without weights of its own): any of its GPUs may need it.
        split_over = tuple(sorted(d for d in self._devices_below(owner) if d.startswith("cuda")))
        if len(split_over) > 1:
            self.placements.made(t, Made(self.sites(), how, "cpu", self.module_name(owner), None, split_over))
        return
    if module_dev.startswith("cuda"):
        self.placements.made(t, Made(self.sites(), how, "cpu", self.module_name(owner), module_dev))
