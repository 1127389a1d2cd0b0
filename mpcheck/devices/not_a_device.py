"""Device arguments torch refuses: `torch.cuda.device(i)` and CUDA strings it cannot read.

`torch.cuda.device(0)` is a context manager (`with torch.cuda.device(0):` makes GPU 0 the current
device); passed where a device goes (`.to(torch.cuda.device(0))`, `device=torch.cuda.device(1)`) it
raises TypeError. A string that means a GPU but is not written as torch reads one (`"gpu"`,
`"cuda1"`, `"cuda: 0"`, `"cuda:[1, 5]"`) raises RuntimeError ("Invalid device string"). Both stop
the program at that line, before any GPU work, whatever the machine.

Only strings that start with `cuda` or `gpu` (in any case) are judged: other device types, and the
names backends register for themselves (`npu`, `hpu`), are left alone; so is a negative index, the
placeholder of a rank not yet set (`self.local_rank = -1` in __init__).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpcheck.devices.events import Fact
from mpcheck.devices.values import Const, Val

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from mpcheck.devices.interp import Interp

_VALID_CUDA = re.compile(r"cuda(?::(?:0|[1-9][0-9]*))?")  # torch.device's own grammar for CUDA
_MEANS_GPU = re.compile(r"\s*(?:cuda|gpu)", re.IGNORECASE)
# `f"cuda:{self.local_rank}"` with the rank's placeholder (-1 until set-up assigns it, in a method the
# device model may not see run first): a value read too early, not one the program uses.
_PLACEHOLDER = re.compile(r"cuda:-[0-9]+")


@dataclass(eq=False)
class DeviceContextV(Val):
    """The value of `torch.cuda.device(i)`: a context manager, not a device."""

    node: cst.CSTNode  # the call that made it (its argument is the GPU it sets)


@dataclass(frozen=True, eq=False, kw_only=True)
class NotADevice(Fact):
    """`node` (a move, a factory, torch.device) is given `arg` where a device goes, and torch refuses it."""

    arg: cst.BaseExpression | None  # the argument as written, where the call writes it
    context: DeviceContextV | None = None  # a torch.cuda.device(...) object
    text: str = ""  # else the string torch cannot read
    meant: str | None = None  # the CUDA device the string most likely meant, written as torch reads it


def refused(v: Val | None) -> tuple[DeviceContextV | None, str] | None:
    """(the context manager, '') or (None, the string) when torch refuses `v` as a device; else None."""
    if isinstance(v, DeviceContextV):
        return v, ""
    if isinstance(v, Const) and isinstance(v.value, str) and _MEANS_GPU.match(v.value):
        if not _VALID_CUDA.fullmatch(v.value) and not _PLACEHOLDER.fullmatch(v.value):
            return None, v.value
    return None


def meant(text: str) -> str | None:
    """`"cuda:1"` for `"cuda1"`, `"cuda: 1"`, `"GPU:1"`, `"cuda:01"`; `"cuda"` for `"gpu"`; else None."""
    m = re.fullmatch(r"\s*(?:cuda|gpu)\s*:?\s*([0-9]*)\s*", text, re.IGNORECASE)
    if m is None:
        return None
    return f"cuda:{int(m.group(1))}" if m.group(1) else "cuda"


def written(node: cst.Call, index: int | None) -> cst.BaseExpression | None:
    """The device argument as the call writes it: positional argument `index` (None: none), else `device=`."""
    positional = [a for a in node.args if a.keyword is None and not a.star]
    if index is not None and index < len(positional):
        return positional[index].value
    return next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "device"), None)


def record(interp: Interp, v: Val | None, arg: cst.BaseExpression | None, node: cst.CSTNode, mode: str) -> bool:
    """Records a NotADevice fact when torch refuses `v` as a device; True then (the program stops here)."""
    bad = refused(v)
    if bad is None:
        return False
    context, text = bad
    fact = NotADevice(node=node, mode=mode, arg=arg, context=context, text=text, meant=meant(text) if text else None)
    interp.recorder.record(fact)
    return True
