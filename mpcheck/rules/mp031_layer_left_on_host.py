"""MP031 in the linter: layers a model holds in a plain Python list (`self.blocks = [Block() for _ in range(n)]`),
which no `.to()` of the model reaches, run on the CPU while its other parts are on a GPU. A forward that sends each
layer its input where the layer is (`blk(h.to(next(blk.parameters()).device))`) runs them there without a word;
`model.parameters()` leaves them out as well, so the optimizer never trains them.

The device model knows the list's layers as never placed (instances.py, `unmoved.IN_A_PLAIN_LIST`) and notes
each call of one on the CPU by a method of a model with a part on a GPU (calls.py `LayerInPlainListOnHost`). One
finding per list, where its layers are built. (The run-time faces report the other way layers stay on the host:
a placing loop that stops early, `mpcheck/runtime/checks/host_layers.py`.)
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import LayerInPlainListOnHost
from mpcheck.devices.values import show
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class LayerLeftOnHost(Rule):
    code = "MP031"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        seen: set[int] = set()
        for ev in ctx.model.facts(LayerInPlainListOnHost):
            where = ev.holder if ev.holder is not None else ev.node
            if id(where) in seen:
                continue
            seen.add(id(where))
            layers = ctx.code(ev.holder) if ev.holder is not None else "its list"
            called = ctx.code(ev.node.func) if isinstance(ev.node, cst.Call) else ctx.code(ev.node)
            yield self.finding(
                ctx,
                where,
                f"the layers of `{layers}` are held in a plain Python list, which is no submodule: no `.to()` of the "
                f"model reaches them, so they stay on the CPU, and `{called}` runs there (line {ctx.line(ev.node)}) "
                f"while the model's other parts are on {show(ev.gpu)}; `model.parameters()` leaves them out too, so "
                f"the optimizer never trains them. Hold them in `nn.ModuleList(...)`.",
                devices=["cpu", ev.gpu],
                modules=[called],
                suggestion="hold the layers in `nn.ModuleList(...)` (or `nn.ModuleDict`)",
            )
