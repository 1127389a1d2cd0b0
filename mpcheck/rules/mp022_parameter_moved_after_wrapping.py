"""MP022: a parameter made and then moved (`nn.Parameter(t).to(dev)`): the move returns a plain tensor."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import Transfer
from mpcheck.devices.names import dotted
from mpcheck.devices.values import show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext

_PARAMETER = frozenset({"Parameter", "nn.Parameter", "torch.nn.Parameter", "torch.nn.parameter.Parameter"})
_MOVES = frozenset({"to", "cuda", "cpu"})


class ParameterMovedAfterWrapping(Rule):
    code = "MP022"
    needs = ("Parameter",)

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in once_per_node(ctx.model.facts(Transfer)):
            call = ev.node
            if not (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and call.func.attr.value in _MOVES
                and isinstance(call.func.value, cst.Call)
                and dotted(call.func.value.func) in _PARAMETER
            ):
                continue
            src, dst = single(ev.value.devs), single(ev.devs)
            if src is None or dst is None or src == dst or src.startswith("sym:") or dst.startswith("sym:"):
                continue  # where either end is not known, or the move changes nothing (it returns the parameter)
            made = call.func.value
            data = ctx.code(made.args[0].value) if made.args else "data"
            meth = call.func.attr.value
            moved = f"{data}.{meth}({', '.join(ctx.code(a) for a in call.args)})"
            yield self.finding(
                ctx,
                call,
                f"`{ctx.code(call)}` moves a parameter just made on {show(src)} to {show(dst)}: a move to another "
                f"device returns a copy, a plain tensor that autograd made from the parameter, not a Parameter. A "
                f"module does not register it (it is missing from `parameters()` and `state_dict()`, so it is "
                f'never trained nor saved), and an optimizer given it raises "can\'t optimize a non-leaf Tensor". '
                f"Move the data first, then wrap it: `nn.Parameter({moved})`.",
                devices=[src, dst],
                suggestion=f"`nn.Parameter({moved})`",
            )
