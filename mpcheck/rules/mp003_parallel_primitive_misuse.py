"""MP003: DataParallel's internals (scatter, gather, replicate, parallel_apply, comm) used on a split model."""

from __future__ import annotations

from collections.abc import Iterator

from mpcheck.devices.describe import split_desc, split_devices, split_modules
from mpcheck.devices.events import ParallelPrimitive
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext

_ADVICE = {
    "replicate": "replicate() copies a module that lives on one device; to run several copies of a split model, "
    "use DistributedDataParallel(model, device_ids=None) with one replica per process",
    "parallel_apply": "parallel_apply() runs replicas made by replicate(); a split model is one module: call it "
    "and move activations between stages with .to()",
    "scatter": "scatter() splits a batch over replicas; the stages of a split model need the whole batch in turn: "
    "move the activations to the next stage with `h = h.to(<stage device>)`",
    "scatter_kwargs": "scatter_kwargs() splits inputs over replicas; move the inputs to the first stage's device instead",
    "gather": "gather() concatenates replica outputs; the stages of a split model do not produce pieces of one "
    "batch: take the last stage's output (and move it with .to() if needed)",
}


class ParallelPrimitiveMisuse(Rule):
    code = "MP003"
    needs = ("nn.parallel", "cuda.comm", "import comm")  # `from torch.cuda import comm`

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in ctx.model.facts(ParallelPrimitive):
            q = ev.q
            short = q.rsplit(".", 1)[-1]
            mod = ev.module
            where = f"on {split_desc(mod)}" if ev.on_arg else f"inside {split_desc(mod)} to feed or collect its stages"
            advice = _ADVICE.get(
                short,
                "DataParallel's collectives assume one replica per device; move tensors "
                "between the stages of a split model with .to()",
            )
            yield self.finding(
                ctx,
                ev.node,
                f"`{q}` is one of DataParallel's internals, used here {where}: {advice}.",
                devices=split_devices(mod),
                modules=split_modules(mod),
                suggestion=advice,
            )
