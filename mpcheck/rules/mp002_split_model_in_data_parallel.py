"""MP002: a model split over several devices wrapped in DataParallel, or in DDP with device_ids; and
DataParallel around one module on a GPU that is not its device_ids[0] (a stage on cuda:1, default ids)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.describe import split_desc, split_devices, split_modules
from mpcheck.devices.events import DataParallelOffFirstId, DataParallelWrap, DdpDeviceIds
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext


class SplitModelInDataParallel(Rule):
    code = "MP002"
    needs = ("DataParallel", "data_parallel")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in ctx.model.facts(DataParallelWrap):
            mod = ev.module
            what = _wrapped(ctx, ev.node)
            wrapper = "data_parallel()" if ev.q.endswith("data_parallel") else "nn.DataParallel"
            yield self.finding(
                ctx,
                ev.node,
                f"{wrapper} wraps `{what}`, {split_desc(mod)}: DataParallel replicates a module that lives on "
                f"one device and fails on one whose parameters span devices. Drop DataParallel (the split already "
                f"uses those GPUs), or run one split replica per process with "
                f"DistributedDataParallel({what}, device_ids=None).",
                devices=split_devices(mod),
                modules=split_modules(mod),
                suggestion=f"DistributedDataParallel({what}, device_ids=None, output_device=None), one process per replica",
            )
        for off in ctx.model.facts(DataParallelOffFirstId):
            what = _wrapped(ctx, off.node)
            given = "device_ids starting with " + off.first if off.given else "the default device_ids (every GPU)"
            index = off.dev.split(":")[-1]
            yield self.finding(
                ctx,
                off.node,
                f"nn.DataParallel wraps `{what}`, which lives on {off.dev}, with {given}: DataParallel keeps the "
                f"module on device_ids[0] ({off.first}) and its forward fails with 'module must have its parameters "
                f"and buffers on device {off.first} (device_ids[0])'. If `{what}` is one stage of a split model, do "
                f"not wrap it in DataParallel; otherwise pass device_ids=[{index}, ...].",
                devices=[off.dev, off.first],
                suggestion=f"drop DataParallel around this stage, or DataParallel({what}, device_ids=[{index}, ...])",
            )
        for ddp in ctx.model.facts(DdpDeviceIds):
            mod = ddp.module
            what = _wrapped(ctx, ddp.node)
            given = " and ".join(ddp.args)
            yield self.finding(
                ctx,
                ddp.node,
                f"DistributedDataParallel gets {given} for `{what}`, {split_desc(mod)}: a module on several "
                f"devices must be wrapped with device_ids=None and output_device=None (PyTorch raises a "
                f"ValueError otherwise). Write DistributedDataParallel({what}, device_ids=None).",
                devices=split_devices(mod),
                modules=split_modules(mod),
                suggestion=f"DistributedDataParallel({what}, device_ids=None, output_device=None)",
            )


def _wrapped(ctx: FileContext, call: cst.CSTNode) -> str:
    for a in call.args if isinstance(call, cst.Call) else ():
        if a.keyword is None or a.keyword.value == "module":
            return ctx.code(a.value)
    return "the model"
