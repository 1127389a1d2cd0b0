"""MP005 for a whole model's weights: a model on the GPUs moved to the host (`model.cpu()`, `.to("cpu")`) and
placed back on the very devices it had, with nothing run on the host meanwhile and nothing else allocated on
the GPUs (a checkpoint made portable by moving the model rather than copying its state dict). Every weight
crossed the host link twice, and the GPUs' memory was never used for anything else.

Decided at the next outermost module call (the model about to run again), at a step's end, or at the end of
the run: back where they were, every tensor of the module (parameters and buffers), with no forward pass
ended since the move to the host. A face that does not count allocations (real GPUs) cannot tell this from
an offload that freed the memory for other work, and stays silent: the dry run reports it.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.thresholds import NOT_GPU, WASTE_MIN_BYTES
from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

MAX_PENDING = 8  # models moved to the host and not yet back: a program has a few
SLACK = 2  # storages the GPUs may make meanwhile besides the weights' own copies back (a scalar, a seed)


class Offload:
    """A module moved to the host: where each of its tensors was, and what the GPUs had made by then."""

    __slots__ = ("module", "site", "tensors", "made", "runs", "nbytes", "back_at", "by_moves")

    def __init__(
        self,
        module: Any,
        site: Site,
        tensors: list[tuple[weakref.ref[Any], str]],
        made: dict[str, int],
        runs: int,
        nbytes: int,
    ) -> None:
        self.module = weakref.ref(module)
        self.site, self.tensors, self.made, self.runs, self.nbytes = site, tensors, made, runs, nbytes
        self.back_at: Site | None = None
        self.by_moves: dict[str, int] = {}  # storages made by module moves since (the weights' copies back)


def on_model_to_host(self: Checker, module: Any, site: Site | None) -> None:
    """Before `module.cpu()` / `module.to("cpu")`: remember where its tensors are, if some are on GPUs."""
    allocations = self._allocations
    if allocations is None or site is None or site.context or len(self._offloads) >= MAX_PENDING:
        return
    device_of = self.devices.device_of
    tensors, nbytes, made = [], 0, {}
    for t in (*module.parameters(), *module.buffers()):
        dev = device_of(t)
        if dev in NOT_GPU:
            continue
        tensors.append((weakref.ref(t), dev))
        nbytes += int(t.numel() * t.element_size())
        if dev not in made:
            count = allocations(dev)
            if count is None:
                return  # a device whose allocations are not counted
            made[dev] = count
    if nbytes < WASTE_MIN_BYTES:
        return
    self._offloads.append(Offload(module, site, tensors, made, self.model_runs, nbytes))


def on_model_placed(self: Checker, site: Site | None) -> None:
    """A module moved to a device while a model is off on the host: maybe it is coming back (its line is named)."""
    for off in self._offloads:
        if off.back_at is None and site is not None:
            off.back_at = site


def storages_made(self: Checker) -> dict[str, int] | None:
    """Before a module move, while a model is off on the host: what each of its GPUs has made so far."""
    allocations = self._allocations
    if not self._offloads or allocations is None:
        return None
    return {dev: allocations(dev) or 0 for off in self._offloads for dev in off.made}


def after_module_move(self: Checker, before: dict[str, int]) -> None:
    """After that move: what it made on those GPUs is the weights' own copies, not other work."""
    allocations = self._allocations
    if allocations is None:
        return
    for off in self._offloads:
        for dev in off.made:
            off.by_moves[dev] = off.by_moves.get(dev, 0) + (allocations(dev) or 0) - before.get(dev, 0)


def judge_model_round_trips(self: Checker, starting: int = 0) -> None:
    """Report the models back where they were (see the module's text); forget those that ran meanwhile.
    `starting`: outermost calls counted in model_runs that are only beginning (the one about to run)."""
    if not self._offloads:
        return
    device_of, allocations = self.devices.device_of, self._allocations
    keep = []
    for off in self._offloads:
        module = off.module()
        if module is None or off.runs != self.model_runs - starting or allocations is None:
            continue  # gone, or it ran since (on the host: the move was for that)
        for ref, dev in off.tensors:
            t = ref()
            if t is None or device_of(t) != dev:
                break
        else:
            extra = sum((allocations(dev) or 0) - off.made[dev] - off.by_moves.get(dev, 0) for dev in off.made)
            if extra <= SLACK:
                _report(self, off, module)
            continue  # decided, either way: an offload whose memory served other work is silent
        keep.append(off)
    self._offloads[:] = keep


def _report(self: Checker, off: Offload, module: Any) -> None:
    devs = sorted(off.made)
    name = self.module_name(module)
    back = f" and back at {off.back_at}" if off.back_at is not None else " and back"
    self.emit(
        "MP005",
        off.site,
        f"round trip of a model's weights: `{name}` ({size_words(off.nbytes)} on {', '.join(devs)}) is moved to "
        f"the host here{back} to the same devices, with nothing run on the host and nothing else allocated on "
        "the GPUs meanwhile: every weight crosses the host link twice",
        devices=(*devs, "cpu"),
        modules=(name,),
        suggestion="keep the model where it is; for a portable checkpoint copy the state dict to the host "
        "(`{k: v.cpu() for k, v in model.state_dict().items()}`), or save it as it is and load it with "
        "`map_location='cpu'`",
        extra={"bytes": off.nbytes, "scope": "model"},
    )
