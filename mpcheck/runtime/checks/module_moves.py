"""MP011 at run time for a module moved inside a forward pass: `self.cond.to(device)` in a method that
forward calls for each stage's device, so the module's weights cross to wherever it is asked for, again
on every call. The same once the model has run, between module calls (an inference loop calling each
stage, then a shared exit head moved to the stage's GPU). A move that changes nothing (the module is already there) costs nothing; the second move
from one line that does change the module's device is reported, with the bytes each move copies.
Moving the module's input to it, and its (usually far smaller) output back, does the same work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.thresholds import NOT_GPU
from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def _check_moved_in_forward(self: Checker, module: Any, target: str, site: Site | None) -> None:
    """Before `module.to(target)` / `.cuda(target)` inside a forward pass (a module call is running)."""
    if site is None or site.context or target in NOT_GPU or not self.wants("MP011"):
        return
    if not self._tls.stack and not self.model_runs:
        return  # before any forward pass, outside one: placement (between two stages' calls, it is not)
    devs = [d for d in self.model_devices(module) if d not in NOT_GPU]
    if len(devs) != 1 or devs[0] == target:
        return  # already there (no copy), on the host, or split (MP007's)
    key = (id(module), site)
    with self._lock:
        seen = self._forward_module_moves.get(key, 0) + 1
        if len(self._forward_module_moves) >= PURGE_AT:
            self._forward_module_moves.clear()  # modules made and moved per call: counts start again
        self._forward_module_moves[key] = seen
    if seen < 2:
        return  # once may be a lazy placement on the first call
    nbytes = sum(p.numel() * p.element_size() for p in module.parameters())
    nbytes += sum(b.numel() * b.element_size() for b in module.buffers())
    name = self.module_name(module)
    self.emit(
        "MP011",
        site,
        f"repeated transfer: `{name}` is moved {devs[0]} -> {target} while the model runs, and this line moves it "
        f"from one device to another again and again: each move copies all its weights ({size_words(nbytes)}) "
        "over the link, on every call",
        devices=tuple(sorted({devs[0], target})),  # one finding for the line, whichever way it moves
        modules=(name,),
        suggestion=f"keep `{name}` on one device: move its input there and its output to {target} "
        "(activations are usually far smaller than the weights)",
        extra={"scope": "module", "bytes": nbytes},
    )
