"""DeviceModel: the device facts of one file, computed once and shared by the rules.

Rules ask for the facts of one type (`model.facts(Transfer)`, see events.py);
they never reach into the interpreter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import libcst as cst

from mpcheck.devices import torchapi
from mpcheck.devices.default_device import module_default_device
from mpcheck.devices.events import Fact, Mismatch
from mpcheck.devices.interp import Interp
from mpcheck.devices.program import ClassInfo
from mpcheck.devices.values import Devs, single

F = TypeVar("F", bound=Fact)


class DeviceModel:
    def __init__(
        self,
        module: cst.Module,
        source: str,
        modname: str = "",
        project: Mapping[str, dict[str, Any]] | None = None,
        gpu_count: int | None = None,
        callers: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        with Interp(
            module,
            modname,
            dict(project) if project is not None and not isinstance(project, dict) else project,
            gpu_count,
            callers,
        ) as interp:
            # torch.set_default_device() & co. change where factories put tensors: then say nothing about them.
            interp.default_device_changed = any(w in source for w in torchapi.DEFAULT_DEVICE_CHANGERS)
            # ...unless the file sets it once, at its top level, to a device it names: factories land there.
            interp.default_device = module_default_device(module) if interp.default_device_changed else None
            interp.run_all()
            self._by_type: dict[type, list[Any]] = {}
            for fact in interp.recorder.facts:
                self._by_type.setdefault(type(fact), []).append(fact)
            for step in interp.recorder.crossings:
                self._by_type.setdefault(type(step), []).append(step)
            self.used_modules: list[str] = sorted(interp.used_modules)
            # Calls of other files' functions with arguments of known devices (devices/callers.py).
            self.outgoing: list[tuple[cst.CSTNode, dict[str, Any]]] = interp.outgoing
            self.classes: dict[str, ClassInfo] = interp.classes
            self._needs: dict[tuple[int, Any], set[Devs]] = interp.recorder.needs
            # devices/gpucount.py: whether the file asked torch.cuda.device_count() (then it is worth
            # interpreting again per assumed count), and where the assumed count was refuted, if it was.
            self.asks_gpu_count = interp.gpus.asked
            self.gpu_count = gpu_count
            self.count_refuted_at: cst.CSTNode | None = interp.gpus.refuted_at
            # Under an assumed count: the tests it decided and the GPUs modules went to (MP032).
            self.count_decided: dict[cst.CSTNode, bool | None] = interp.gpus.decided
            self.placed_gpus: frozenset[str] = frozenset(interp.gpus.placed_gpus)

    def facts(self, kind: type[F]) -> list[F]:
        """The facts of one type, in the order the interpreter saw them."""
        return self._by_type.get(kind, [])

    def known_targets(self, fact: Mismatch) -> set[str]:
        """The single devices a mismatch's operand had to be on over the visits of its site that
        knew one (two or more: the line runs for several devices, as a loop over blocks does); a symbol
        (`sym:dev`, a parameter's device in a run of the class on its own) is none."""
        seen = self._needs.get((id(fact.node), fact.site), ())
        return {d for devs in seen if (d := single(devs)) is not None and not d.startswith("sym:")}

    def one_target(self, fact: Mismatch) -> str | None:
        """The device a mismatch's operand had to be on, when it is the same single
        device on every visit of that site (each loop iteration, path and call);
        None when a visit needed another device or an unknown one."""
        seen = self._needs.get((id(fact.node), fact.site))
        if not seen or len(seen) != 1:
            return None
        return single(next(iter(seen)))
