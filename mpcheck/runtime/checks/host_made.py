"""MP001's cause: a factory (`torch.arange(T)`, `torch.zeros(n, d)`) called without `device=` inside the
forward of a module on a GPU makes its tensor on the CPU. Remembered (placement.py), and if the tensor
(or one computed from it on the CPU) meets the module's tensors unmoved, the finding is at the factory's
line, with the fix there (`device=`), not only at the op that fails.

Only tensors of one element or more are remembered (a 0-dim CPU tensor mixes with any device), only
inside a module's forward (a batch made on the CPU in the training loop is moved later, as it should be)
for a module on a GPU or a model split over GPUs, or inside an optimizer step the user wrote (a state
made for a parameter on a GPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.placement import Made
from mpcheck.runtime.checks.sites import user_frame

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def on_host_made_tensor(self: Checker, t: Any, factory: str) -> None:
    """`t` was just made on the CPU by `torch.<factory>()` without device=: remembered when that was inside
    the forward of a module on a GPU (or split over GPUs), or in an optimizer step the user wrote."""
    if not isinstance(t, self._tensor) or t.dim() == 0 or not self.wants("MP001"):
        return
    how = f"`torch.{factory}()` without device="
    if not self._tls.stack:
        # Outside any module: a batch made in the training loop is moved later, as it should be; but a
        # state that an optimizer step the user wrote makes for a parameter (`torch.zeros(p.shape)`) is
        # used there, with the parameter's gradient.
        step = _users_optimizer_step(self)
        if step is not None:
            self.placements.made(t, Made(self.sites(), how, "cpu", step, None))
        return
    owner = self._running_module()
    if owner is None:
        return
    module_dev = self.module_device(owner)
    if module_dev is None:
        # A model split over GPUs (or a holder without weights of its own): any of its GPUs may need it.
        split_over = self.gpus_below(owner)
        if len(split_over) > 1:
            self.placements.made(t, Made(self.sites(), how, "cpu", self.module_name(owner), None, split_over))
        return
    if module_dev.startswith("cuda"):
        self.placements.made(t, Made(self.sites(), how, "cpu", self.module_name(owner), module_dev))


def _users_optimizer_step(self: Checker) -> str | None:
    """`Lion.step` when the tensor is made in an optimizer step the user wrote (or in a function it
    calls): one of the frames above is that step's code, noted by the session as the step began. By
    code object, never by a frame's locals (reading `f_locals` would keep the caller's tensors alive)."""
    steps = self.user_steps
    if not steps:
        return None
    frame = user_frame(3)
    for _ in range(8):
        if frame is None:
            return None
        name = steps.get(frame.f_code)
        if name is not None:
            return name
        frame = frame.f_back
    return None
