"""MP009 (lint): a CUDA index computed from torch.cuda.device_count() that lands past the last GPU,
or any CUDA index past the GPUs that the file's own CUDA_VISIBLE_DEVICES leaves visible.

The device model gives `NonexistentDevice` facts only in the runs that assume a GPU
count (devices/gpucount.py); analysis.py keeps the finding when every count the
code allows gives it (rules/gpucounts.py), so the message here speaks of one count.
"""

from __future__ import annotations

from collections.abc import Iterator

from mpcheck.devices.gpucount import NonexistentDevice
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext


class NonexistentDeviceRule(Rule):
    code = "MP009"
    needs = ("device_count", "CUDA_VISIBLE_DEVICES")  # the sources of a count the linter knows

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in once_per_node(ctx.model.facts(NonexistentDevice)):
            n = ev.count
            last = f"cuda:{n - 1}"
            if ev.what == "index":
                head = f"`{ctx.code(ev.node)}` reads entry {ev.dev[5:]} of the list of the {n} GPUs' devices"
                fails = "Python raises IndexError"
            else:
                head = f"`{ctx.code(ev.node)}` names {ev.dev}"
                fails = "CUDA stops with 'invalid device ordinal'"
            if ev.visible is not None:
                seen = ev.visible
                message = (
                    f"{head}: with CUDA_VISIBLE_DEVICES={seen.value!r} (line {ctx.line(seen.node)}) the process sees "
                    f"{n} GPU{'s' if n != 1 else ''}, renumbered from cuda:0, so {ev.dev} does not exist (the last is "
                    f"{last}), and {fails}. Inside the process, index the visible GPUs: cuda:0 to {last}."
                )
            else:
                message = (
                    f"{head}: {ev.dev} does not exist with {n} GPUs (the last is {last}), and {fails}. Keep the "
                    f"index below `torch.cuda.device_count()`: stop one stage earlier, or wrap around with `% n`."
                )
            yield self.finding(
                ctx,
                ev.node,
                message,
                devices=[ev.dev],
                suggestion="keep the device index below torch.cuda.device_count()",
            )
