"""The checker's side of MP006 (the chains themselves: pingpong.py): what the user's frame holds on
a device when a transfer has no autograd graph to ask, and a chain judged a ping-pong turned into a
finding, with the layers that alternate between devices (or the grouped layers and the module they
share) found in the known root models.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.pingpong import Chain, Layers, describe, find_shared
from mpcheck.runtime.checks.sites import user_frame

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def _snapshot_refs() -> int:
    """The references to a frame's f_locals snapshot that no one else holds, as _holds_on_device counts
    them: the frame's own, the name it is read into and sys.getrefcount's argument."""
    local = sys._getframe().f_locals
    return sys.getrefcount(local)


_UNSHARED_SNAPSHOT_REFS = _snapshot_refs()


def _holder(self: Checker, arrived: Any) -> Callable[[str], bool]:
    """held() for PingPong.on_transfer: does the user's code making the current transfer hold a tensor
    on a device in its local variables, other than the copy arriving (MP006 without a graph: the tokens
    that stayed on that device while an expert ran elsewhere)?"""
    return lambda dev: self._holds_on_device(dev, arrived)


def _holds_on_device(self: Checker, dev: str, arrived: Any) -> bool:
    frame = user_frame(3)
    if frame is None:
        return False
    try:
        local = frame.f_locals
        values = list(local.values())
    except Exception:  # a frame whose locals cannot be read: nothing known to stay
        return False
    if (
        isinstance(local, dict)
        and frame.f_code.co_flags & inspect.CO_OPTIMIZED
        and sys.getrefcount(local) <= _UNSHARED_SNAPSHOT_REFS
    ):
        # Python < 3.13 caches this snapshot on a function's frame, holding its tensors until the
        # frame ends: drop it (locals() and tracers rebuild it first), so memory and the liveness
        # Chain.stayed asks of later transfers stay the program's. Not when anyone else holds it: the
        # program's `saved = locals()` or a debugger's view of the frame is the same dict, theirs to keep.
        # (Module and class bodies: the namespace itself, left alone; 3.13's f_locals is a view, not a
        # dict.) Reading the fast locals without the snapshot takes a C API that 3.11 and 3.12 do not have.
        local.clear()
    for v in values:
        if isinstance(v, self._tensor) and not isinstance(v, self._parameter) and v is not arrived:
            try:
                if self.devices.device_of(v) == dev:
                    return True
            except Exception:  # a tensor without a device the checks know
                continue
    return False


def _report_ping_pong(self: Checker, chain: Chain) -> None:
    site = chain.back_site
    devices = tuple(chain.distinct)
    if ("MP006", site.path, site.line, devices) in self._by_key:  # seen in an earlier pass: count it
        self.emit("MP006", site, "", devices=devices)
        return
    message, modules, suggestion = describe(chain, self._alternating_layers, self._grouped_layers)
    self.emit(
        "MP006",
        site,
        message,
        devices=devices,
        modules=modules,
        suggestion=suggestion,
        extra={"crossings": chain.crossings, "first_site": str(chain.first_site)},
    )


def _alternating_layers(self: Checker, chain: Chain) -> tuple[str, list[tuple[str, str]]] | None:
    """The module whose children, in order, alternate between the chain's devices the most:
    (its path, [(child name, device)]). Searched in the known root models, preferring modules
    above or below those that made the transfers; once per new finding."""
    namer = self.namer
    if namer is None:
        return None
    wanted = set(chain.devs)
    # (related to the modules that moved the data, changes, path, children)
    found: list[tuple[bool, int, str, list[tuple[str, str]]]] = []
    for root in namer.roots():
        root_path = namer(root)
        for sub_name, sub in root.named_modules():
            placed = [(n, self.module_device(c)) for n, c in sub.named_children()]
            children = [(n, d) for n, d in placed if d is not None and d in wanted]
            changes = sum(1 for a, b in zip(children, children[1:]) if a[1] != b[1])
            if changes >= 2:
                path = f"{root_path}.{sub_name}" if sub_name else root_path
                related = any(m == path or m.startswith(path + ".") or path.startswith(m + ".") for m in chain.modules)
                found.append((related, changes, path, children))
    if not found:
        return None
    _, _, path, children = max(found, key=lambda f: (f[0], f[1]))
    return path, children


def _grouped_layers(self: Checker, chain: Chain) -> tuple[Layers, list[str]] | None:
    """MP006 with no alternating layers: layers grouped one block per device and a module they share
    on the chain's first device (pingpong.find_shared), searched in the known root models."""
    namer = self.namer
    if namer is None:
        return None
    return find_shared(chain, [(namer(r), r) for r in namer.roots()], self.devices.device_of)
