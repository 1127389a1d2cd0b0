"""Where factories without `device=` put their tensors in a file that changes the default device.

`torch.set_default_device("cuda")` (or `set_default_tensor_type(torch.cuda.FloatTensor)`) makes
`torch.zeros(n)` land on the current CUDA device instead of the CPU. The device model knows that
device only in the one shape it can be sure of: a single call with a literal argument in the
module's own top-level statements, which runs at import, before any function of the file. Any
other call (in a function, under a condition, with a variable) leaves factories unknown.
"""

from __future__ import annotations

import libcst as cst

from mpcheck.devices.names import dotted
from mpcheck.devices.values import CURRENT, device_from_str
from mpcheck.devices.walk import walk

_SETTERS = ("set_default_device", "set_default_tensor_type")
_CUDA_TENSOR_TYPES = ("cuda.FloatTensor", "cuda.HalfTensor", "cuda.DoubleTensor", "cuda.BFloat16Tensor")


def module_default_device(module: cst.Module) -> str | None:
    """The device the file's top level sets as the default ('cuda' = the current CUDA device), or None."""
    found: list[str | None] = []
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            call = small.value if isinstance(small, cst.Expr) else None
            if not isinstance(call, cst.Call):
                continue
            name = dotted(call.func) or ""
            if name.rsplit(".", 1)[-1] in _SETTERS:
                found.append(_denoted(call))
    if len(found) != 1 or _calls_anywhere(module) != 1:
        return None  # none, several, or one elsewhere (in a function, under a condition)
    return found[0]


def _calls_anywhere(module: cst.Module) -> int:
    """How many calls of a default-device setter the file has, at any depth."""
    # (walk, not a CSTVisitor, which rebuilds every node with libcst's checks on: program.is_generator)
    return sum(
        1
        for node in walk(module)
        if isinstance(node, cst.Call) and (dotted(node.func) or "").rsplit(".", 1)[-1] in _SETTERS
    )


def _denoted(call: cst.Call) -> str | None:
    if len(call.args) != 1 or call.args[0].keyword is not None:
        return None
    arg = call.args[0].value
    if isinstance(arg, cst.SimpleString):
        text = arg.evaluated_value
        if not isinstance(text, str):
            return None
        if text.startswith("torch.") and text.endswith(_CUDA_TENSOR_TYPES):
            return CURRENT
        return device_from_str(text)
    name = dotted(arg) or ""
    if name.endswith(_CUDA_TENSOR_TYPES):
        return CURRENT
    return None
