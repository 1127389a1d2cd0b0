"""DeviceModel: the device facts of one file, computed once and shared by the rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpcheck.devices import torchapi
from mpcheck.devices.interp import Event, Interp
from mpcheck.devices.values import single

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.rules.context import FileContext


class DeviceModel:
    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx
        self.interp = Interp(ctx.module, ctx.modname, ctx.project)
        src = ctx.source
        # torch.set_default_device() & co. change where factories put tensors: then say nothing about them.
        self.interp.default_device_changed = any(w in src for w in torchapi.DEFAULT_DEVICE_CHANGERS)
        self.interp.run_all()
        self._by_kind: dict[str, list[Event]] = {}
        for ev in self.interp.events:
            self._by_kind.setdefault(ev.kind, []).append(ev)

    def events(self, kind: str) -> list[Event]:
        return self._by_kind.get(kind, [])

    def one_target(self, ev: Event) -> str | None:
        """The device a mismatch event's operand had to be on, when it is the same
        single device on every visit of that site (each loop iteration, path and
        call); None when a visit needed another device or an unknown one."""
        seen = self.interp.operand_targets.get((id(ev.node), ev.data.get("key")))
        if not seen or len(seen) != 1:
            return None
        return single(next(iter(seen)))

    @property
    def used_modules(self) -> list[str]:
        return sorted(self.interp.used_modules)

    @property
    def classes(self):
        return self.interp.classes
