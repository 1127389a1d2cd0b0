"""MP007: .cuda() / .to(device) on a model split over several devices moves every stage onto one."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.describe import split_desc, split_devices, split_modules
from mpcheck.devices.events import Collapse
from mpcheck.devices.values import Obj, show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class CollapseSplitModel(Rule):
    code = "MP007"
    needs = FLOW_WORDS + (
        "parallelize(",
        "dispatch_model",
        "and_dispatch",
        "Pipe(",
        "tensor_parallel(",
    )  # device_map= with .to("cuda") says cuda

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in ctx.model.facts(Collapse):
            mod = ev.module
            call = ev.node
            recv = (
                ctx.code(call.func.value)
                if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                else "the model"
            )
            target = single(ev.devs)
            onto = show(target) if target else "one device"
            meth = ev.meth
            if isinstance(mod, Obj) and mod.dispatched.startswith("a device map"):  # its devices are not known
                undone = (
                    "where the map splits it, the split is undone (accelerate refuses to move a model with "
                    "offloaded parts). Drop the call; to load it whole on one device, pass `device_map={'': device}`"
                )
            else:
                undone = (
                    "the split is undone and the memory it saved is needed again. Remove the call and let each "
                    "stage stay where it was placed"
                )
            yield self.finding(
                ctx,
                call,
                f"`{ctx.code(call)}` moves every stage of `{recv}` ({split_desc(mod)}) onto {onto}: {undone}; "
                f"to change only the dtype, use `.to(dtype=...)`.",
                devices=split_devices(mod) + ([target] if target else []),
                modules=split_modules(mod),
                suggestion=f"remove `.{meth}(...)`; the stages are already placed",
            )
