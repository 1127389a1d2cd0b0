"""MP012: PyTorch's own error, explained. A `.view()` refused for its strides, of a tensor that a
transfer made: the copy kept a permuted tensor's strides, and the finding is at the transfer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.arguments import Args, Kwargs
from mpcheck.runtime.checks.wording import tensor_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def on_op_error(self: Checker, func: Any, args: Args, kwargs: Kwargs, error: RuntimeError) -> Any:
    """PyTorch refused a call. `.view()` of a tensor that arrived by a transfer, refused for its strides:
    the copy kept the strides of a permuted (transposed, sliced) tensor, and the fix is `.contiguous()`
    before the copy (MP012, at the transfer). With on_mismatch="move" the view is taken of a contiguous
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
                suggestion="make it contiguous before the copy (`x.permute(...).contiguous().to(...)`): the copy "
                "is then one dense block, and the view works; or use `.reshape()` after it",
                extra={"view_site": str(self.sites())},
                fatal=True,
            )
            if self.on_mismatch == "move":
                return func(t.contiguous(), *args[1:], **kwargs)
    raise error
