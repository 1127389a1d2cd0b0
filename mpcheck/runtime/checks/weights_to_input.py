"""MP014 at run time for a module that brings its own weights to its input: a module placed on one GPU, called with
its input on another, whose forward copies its parameters over to the input's device (`self.W.to(u.device)`, a
defensive move written so the layer "works anywhere"). It works, on the wrong GPU: every call copies the weights,
and backward copies their gradients back, where moving the input to the module once would do.

What counts: a module call whose inputs are off the module's device (the call's `Entry`, module_entry.py) and all on
one other GPU; in its own forward (the innermost module call running), a copy of one of its own parameters from the
module's device to that GPU. Judged when the call returns: the parameters it copied are reported when they are
larger than its off-device inputs and its output together, which is what moving the input over and the output back
would copy at most. A module that streams its weights on purpose to where the work is (an offload from the host,
a weight shared by two stages) is not this: the host is never a source here, and a weight of another module is not
the module's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.arguments import iter_tensors
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.thread_state import Entry
from mpcheck.runtime.checks.thresholds import NOT_GPU
from mpcheck.runtime.checks.transfer_events import known_bytes
from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def on_weight_move(self: Checker, p: Any, src_dev: str, dst_dev: str, site: Site | None, nbytes: int) -> None:
    """Parameter `p` is copied `src_dev` -> `dst_dev` by forward code while a module call with off-device inputs
    runs: note it on that call when it is the module's own weight brought to its input."""
    tls = self._tls
    entry = tls.entries[-1]
    if site is None or entry.device != src_dev or dst_dev in NOT_GPU or not tls.stack or tls.stack[-1] != entry.path:
        return
    device_of = self.devices.device_of
    if any(device_of(t) != dst_dev for t, _ in entry.tensors.values()):
        return
    try:
        own = any(q is p for q in entry.module.parameters())
    except Exception:  # noqa: BLE001  (a module whose parameters cannot be listed: say nothing)
        return
    if own:
        if entry.moved_weights is None:
            entry.moved_weights = []
        entry.moved_weights.append((site, nbytes))


def judge_weight_moves(self: Checker, entry: Entry, out: Any) -> None:
    """The call of `entry` returned `out`: report the weights it brought to its input, if moving the input over and
    the output back would have copied less."""
    moved = entry.moved_weights
    if not moved or entry.device is None or not self.wants("MP014"):
        return
    weights = sum(n for _, n in moved)
    inputs = sum(known_bytes(t) for t, _ in entry.tensors.values())
    outputs = sum(known_bytes(t) for _, t in iter_tensors((out,), {}, self._tensor_type))
    if weights <= inputs + outputs:
        return
    (dst,) = {self.devices.device_of(t) for t, _ in entry.tensors.values()} or {"?"}
    site = moved[0][0]
    self.emit(
        "MP014",
        site,
        f"{type(entry.module).__name__} '{entry.path}' (placed on {entry.device}) is called with its input on {dst}, "
        f"and copies its own weights "
        f"there ({size_words(weights)} per call, their gradients back in backward): the module runs on {dst}, "
        f"where moving its input ({size_words(inputs)}) to {entry.device} at {entry.site} would copy less",
        devices=(entry.device, dst),
        modules=(entry.path,),
        suggestion=f"move the input to the module's device at the call (`module(x.to('{entry.device}'))`) and drop "
        "the weights' move",
        extra={"scope": "weights", "weight_bytes": weights, "input_bytes": inputs, "output_bytes": outputs},
    )
