"""PyTorch's own errors, explained. MP012: a `.view()` refused for its strides, of a tensor that a
transfer made: the copy kept a permuted tensor's strides, and the finding is at the transfer. MP001: a
custom autograd Function's backward returned a gradient on another device than its input's (autograd's
engine refuses it when `backward()` runs): the finding is at the Function's `return`; and
`pack_padded_sequence` given its lengths on a GPU: the finding is at the user's call.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.arguments import Args, Kwargs
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.wording import tensor_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def on_op_error(self: Checker, func: Any, args: Args, kwargs: Kwargs, error: RuntimeError) -> Any:
    """PyTorch refused a call. `.view()` of a tensor that arrived by a transfer, refused for its strides:
    the copy kept the strides of a permuted (transposed, sliced) tensor (MP012, at the transfer); the fix is
    `.reshape()` after it (a strided tensor crosses as fast as a dense one: rules/MP012). With on_mismatch="move" the view is taken of a contiguous
    copy and the program goes on; otherwise PyTorch's error follows (after mpcheck's with "raise")."""
    if (
        not self._tls.suspended
        and getattr(func, "__name__", "") == "view"
        and args
        and isinstance(args[0], self._tensor)
        and "view size is not compatible" in str(error)
        and self.wants("MP012")
    ):
        hop = self._arrival(args[0])
        if hop is not None:
            src, hop_site = hop
            t = args[0]
            dst = self.devices.device_of(t)
            module = self.current_module()
            self.emit(
                "MP012",
                hop_site,
                f"this transfer {src} -> {dst} copies a non-contiguous tensor ({tensor_words(t)}, strides "
                f"{tuple(t.stride())}) and the copy keeps its strides; `.view()` of it at {self.sites()} fails "
                "with 'view size is not compatible with input tensor's size and stride'",
                devices=(src, dst),
                modules=(module,) if module else (),
                suggestion="use `.reshape(...)` in place of this `.view(...)`: it copies on the destination only "
                "where the strides need it (the strided tensor crossed as fast as a dense one would; "
                "`.contiguous()` before the copy adds a copy on the source)",
                extra={"view_site": str(self.sites())},
                fatal=True,
            )
            if self.on_mismatch == "move":
                return func(t.contiguous(), *args[1:], **kwargs)
    if self.wants("MP001") and not self._tls.suspended:
        text = str(error)
        bad = _INVALID_GRADIENT.search(text)
        if bad is not None:
            # The dry run names the Function; on real GPUs it is looked up by its node's name.
            node, index, expected, got = bad.groups()
            self._report_gradient_device(node, index, expected, got, getattr(error, "function", None))
        lengths = _GPU_LENGTHS.search(text)
        if lengths is not None and lengths.group(1).startswith("cuda"):
            self._report_gpu_lengths(lengths.group(1))
    raise error


# pack_padded_sequence's kernel, in PyTorch's words; the dry run raises the same.
_GPU_LENGTHS = re.compile(r"'lengths' argument should be a 1D CPU int64 tensor, but got \d+D (\S+) \w+ tensor")


# autograd's engine (validate_outputs), in PyTorch's words; the dry run raises the same.
_INVALID_GRADIENT = re.compile(
    r"Function (\w+) returned an invalid gradient at index (\d+) - expected device (\S+) but got (\S+)"
)


def _report_gradient_device(
    self: Checker, node: str, index: str, expected: str, got: str, function: Any = None
) -> None:
    """MP001 at the `return` of the backward whose gradient autograd refused."""
    fn = (function or _function_named(node) or object).__dict__.get("backward")
    backward = getattr(fn, "__func__", fn)  # a staticmethod's function
    site = _return_site(backward) if backward is not None else None
    name = node.removesuffix("Backward")
    self.emit(
        "MP001",
        site or self.sites(),
        f"the backward of autograd Function {name} returns its gradient for input {index} on {got}, but that "
        f"input is on {expected}: autograd refuses it when backward() runs",
        devices=(expected, got),
        suggestion=f"return it on {expected}, its input's device: `grad.to(ctx.device)` in backward, with "
        "`ctx.device = x.device` saved in forward",
        fatal=True,
    )


def _report_gpu_lengths(self: Checker, dev: str) -> None:
    """MP001 at the user's `pack_padded_sequence` call whose lengths are on a GPU."""
    module = self.current_module()
    self.emit(
        "MP001",
        self.sites(),
        f"pack_padded_sequence's lengths are on {dev}: PyTorch reads them on the host and refuses them on a "
        "GPU (\"'lengths' argument should be a 1D CPU int64 tensor\")",
        devices=(dev, "cpu"),
        modules=(module,) if module else (),
        suggestion="pass the lengths on the CPU (`lengths.cpu()`, or the CPU tensor they were before the "
        "batch was moved); the packed data may stay on the GPU",
        fatal=True,
    )


def _function_named(node: str) -> Any:
    """The autograd Function subclass whose node type is `node` ("HopBackward") and that defines its own
    `backward`; None where none or several do."""
    import torch

    name = node.removesuffix("Backward")
    found = []
    todo = list(torch.autograd.Function.__subclasses__())
    seen: set[int] = set()
    while todo:
        cls = todo.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        todo.extend(cls.__subclasses__())
        if cls.__name__ == name and "backward" in cls.__dict__:
            found.append(cls)
    return found[0] if len(found) == 1 and node != name else None


def _return_site(fn: Any) -> Site | None:
    """The line of `fn`'s `return` (its only one), else of its `def`."""
    import dis

    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    returns = [i.positions for i in dis.get_instructions(code) if i.opname.startswith("RETURN") and i.positions]
    lines = {p.lineno for p in returns}
    if len(lines) == 1 and returns[0].lineno is not None:
        col = returns[0].col_offset
        return Site(code.co_filename, returns[0].lineno, code.co_name, column=(col or 0) + 1)
    return Site(code.co_filename, code.co_firstlineno, code.co_name)
