"""MP020: a GPU tensor's elements read on the host one at a time by Python (`max(t)`, `[v.item() for v in t]`):
one wait for the GPU per element, where one reduction or one `.tolist()` waits once."""

from __future__ import annotations

from collections.abc import Iterator

from mpcheck.devices.events import ElementSync
from mpcheck.devices.values import show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule, once_per_node
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS

# What each builtin's one-wait form is, for the message: the reduction on the GPU, then one read.
_ORDERING_FIX = {
    "max": "{t}.max()",
    "min": "{t}.min()",
    "sorted": "sorted({t}.tolist())",
}
_AS_NUMBER = {
    "max": " (wrap it in `int()` or `.item()` for a number)",
    "min": " (wrap it in `int()` or `.item()` for a number)",
}


class HostSyncPerElement(Rule):
    code = "MP020"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in once_per_node(ctx.model.facts(ElementSync)):
            message, suggestion = _words(ctx, ev)
            devices = sorted(ev.devs) if ev.per_parameter and ev.devs else [single(ev.devs) or ""]
            yield self.finding(ctx, ev.node, message, devices=[*devices, "cpu"], suggestion=suggestion)


def _words(ctx: FileContext, ev: ElementSync) -> tuple[str, str]:
    """The finding's message and its fix, by what reads the elements."""
    where = single(ev.devs) or ""
    dev = show(where) if where.startswith("cuda") else f"the GPU {show(where)}"
    t = ctx.code(ev.iterated)
    if ev.how == "tensor":
        return (
            f"`torch.tensor({t})` reads the value of each of its tensors, on {dev}, on the host, one wait for the "
            f"GPU each. `torch.stack({t})` keeps them on the GPU (`.detach()` for a log; `.cpu()` after it copies "
            f"them all at once).",
            f"use `torch.stack({t})`",
        )
    if ev.loop is None:
        fix = _ORDERING_FIX[ev.how].format(t=t)
        return (
            f"`{ev.how}({t})` compares the elements of `{t}`, a tensor on {dev}, one pair at a time in Python: each "
            f"comparison launches a kernel and waits for the GPU to read its answer on the host, once per element. "
            f"`{fix}` waits once{_AS_NUMBER.get(ev.how, '')}.",
            f"use `{fix}`",
        )
    if ev.per_parameter:
        on = " and ".join(show(d) for d in sorted(ev.devs or ()))
        return (
            f"`{ctx.code(ev.node)}` is computed from one parameter of `{t}` (on {on}) and read on the host per pass "
            f"of the loop over its parameters: a kernel and a wait for the GPU per parameter, every step. Compute it "
            f"for all of them on the GPU and read the result once (`torch.stack([torch.isfinite(p.grad).all() for p "
            f"in params]).all()`, `torch._foreach_norm(grads)`, per device where the model is split), or leave it to "
            f"what already does it (`GradScaler.step` skips a step with inf/NaN gradients; `clip_grad_norm_` returns "
            f"the total norm).",
            "compute the values for all parameters on the GPU and read them once",
        )
    if ev.derived:
        # `if row.argmax() == y[i]:` reads a value computed from each element: the whole tensor's at once
        # (`out.argmax(1) == y`) is one kernel, read once.
        return (
            f"`{ctx.code(ev.node)}` is computed from one element of `{t}` (on {dev}) and read on the host per "
            f"pass of the loop: a kernel and a wait for the GPU per element. Compute it for all of `{t}` at once "
            f"on the GPU, then read the result with one `.tolist()` (or reduce it there: `.sum().item()`).",
            f"compute it over all of `{t}` at once and read the result once",
        )
    return (
        f"`{ctx.code(ev.node)}` reads one element of `{t}` (on {dev}) on the host per pass of the loop: each read "
        f"waits for the GPU. Read them all with one copy, `{t}.tolist()`, and loop over that list.",
        f"loop over `{t}.tolist()`",
    )
