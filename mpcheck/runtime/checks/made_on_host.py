"""MP019 at run time: a tensor made on the host by a factory from a shape alone (`torch.randn(x.shape)`),
whose first use is its copy to a GPU, on every step: made there (`device=`, `randn_like`), it costs
neither the host's fill nor the copy (rules/MP019-made-on-host.md has the measurements).

The factory's output is remembered weakly, as an arrival is (arrivals.py: `arrived_objects`), with a
`HostMade` record in place of a storage id, so that the ops that read it mark it read. At a transfer
from the host to a GPU of such a tensor, unread and unchanged since it was made, the finding is taken
when the transfer's line is the one that made it (`torch.randn(x.shape).to(dev)`, as the linter asks)
and sizes it after a tensor (`.shape`, `.size(`, `len(`: a script's stand-in batch, `torch.randn(8,
128).to(dev)`, is data, not an activation's noise). It is reported the first time inside a module's forward
(which runs on every step), elsewhere the second time that line does so: once is set-up, every step is the
cost.
"""

from __future__ import annotations

import linecache
import re
import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.devices.torchapi import SHAPE_FACTORIES  # the linter's list, by torch's function name
from mpcheck.runtime.checks.sites import Site

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

_SIZED_AFTER_A_TENSOR = re.compile(r"\.shape\b|\.size\(|\blen\(")


class HostMade:
    """A factory's output on the host, not read yet (`read`), and its version counter when made."""

    __slots__ = ("factory", "read", "version")

    def __init__(self, factory: str, version: int) -> None:
        self.factory = factory
        self.version = version
        self.read = False


def note_host_made(self: Checker, t: Any, factory: str, args: tuple[Any, ...]) -> None:
    """`t` was just made on the CPU by `torch.<factory>(*args)` without device=."""
    if self.wants("MP019"):
        remember_made(self, t, factory, args, HostMade)


def remember_made(self: Checker, t: Any, factory: str, args: tuple[Any, ...], record: type[HostMade]) -> None:
    """Remember `t`, made by `torch.<factory>(*args)`, as a `record` until an op reads it: when it was made from
    a shape alone (no tensor's values), by a factory of SHAPE_FACTORIES."""
    if factory not in SHAPE_FACTORIES or any(isinstance(a, self._tensor) for a in args):
        return
    try:
        version = t._version
    except Exception:  # an inference tensor: no version counter
        return
    self.arrived_objects[id(t)] = (weakref.ref(t), record(factory, version))


def on_host_made_move(self: Checker, t: Any, src_dev: str, dst_dev: str, site: Site | None) -> None:
    """A transfer of `t`: MP019 when `t` is a host-made tensor moved at once, on its line, to a GPU."""
    hit = self.arrived_objects.get(id(t))
    if hit is None or not isinstance(hit[1], HostMade) or t is None or hit[0]() is not t:
        return
    if type(hit[1]) is not HostMade:  # made on a GPU (made_on_gpu.py): copied to the host first?
        if dst_dev == "cpu":
            self.on_gpu_made_to_host(t, "cpu")
        else:
            del self.arrived_objects[id(t)]
        return
    made = hit[1]
    del self.arrived_objects[id(t)]  # its first use is this copy: decided here, once
    if made.read or src_dev != "cpu" or not dst_dev.startswith("cuda") or site is None:
        return
    try:
        version = getattr(t, "_version", None)
    except Exception:  # an inference tensor: no version counter
        return
    if version != made.version:
        return  # filled in place first (`torch.empty(n).uniform_()`): made from more than a shape
    line = linecache.getline(site.path, site.line)
    if f"{made.factory}(" not in line or _SIZED_AFTER_A_TENSOR.search(line) is None:
        return
    # Inside a module's forward it runs every step by nature (and a later step may run it unchecked: the
    # signature cache); elsewhere (a loss helper, the training loop) the second time says so.
    key = (site.path, site.line, dst_dev)
    seen = self._host_made_moves.get(key, 0) + 1
    self._host_made_moves[key] = seen
    if seen != (1 if self._tls.stack else 2):
        return
    like = f" (or `torch.{made.factory}_like(x)` for one shaped after `x`)" if made.factory in _LIKE else ""
    self.emit(
        "MP019",
        site,
        f"`torch.{made.factory}(...)` makes this tensor on the host and the line copies it to {dst_dev}, on every "
        f"step: the host fills it and the copy from pageable memory waits for the host. Make it there: "
        f"`torch.{made.factory}(..., device=...)`{like}.",
        devices=("cpu", dst_dev),
        suggestion=f"pass `device=` to `torch.{made.factory}(...)` and drop the move",
    )


_LIKE = frozenset({"zeros", "ones", "empty", "full", "rand", "randn", "randint"})
