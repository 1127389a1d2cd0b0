"""MP016 at run time: a broadcast view (`.expand()`, `.expand_as()`, `torch.broadcast_to`) moved to
another device. Its strides repeat elements that exist once; a copy to another device writes every
one of them out, so the link carries the full expanded size where moving the view's data first and
expanding it on the destination would carry only the data. A `.repeat()` before the move leaves no trace
in the tensor itself: the linter reports it. Data only reduced after its move: reduced_after_move.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.thresholds import WASTE_MIN_BYTES
from mpcheck.runtime.checks.wording import size_words, tensor_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def data_bytes(t: Any) -> int | None:
    """The bytes a tensor's elements take once each: its size without the broadcast (stride 0)
    dimensions; None for a tensor without strides (sparse)."""
    try:
        if str(t.layout) != "torch.strided":
            return None  # a sparse tensor (its stand-in on virtual GPUs may answer strides of 0: no broadcast)
        sizes, strides = tuple(t.shape), t.stride()
    except Exception:  # sparse and other layouts without strides
        return None
    n = 1
    try:
        for size, stride in zip(sizes, strides):
            if size == 0:
                return 0
            if stride != 0:
                n *= size
        return int(n * t.element_size())
    except Exception:  # a symbolic size (a jagged nested tensor's ragged dimension): not known as a number
        return None


def _check_expanded(
    self: Checker, t: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None, nbytes: int
) -> None:
    """A broadcast view moved whole, at least twice its data and WASTE_MIN_BYTES more (below that
    both copies cost about one launch). At the user's own line only: a library's copy is not theirs."""
    if src_dev == dst_dev or site is None or site.context or not self.wants("MP016"):
        return
    data = data_bytes(t)
    if data is None or nbytes < 2 * data or nbytes - data < max(self.repeat_min_bytes, WASTE_MIN_BYTES):
        return
    self.emit(
        "MP016",
        site,
        f"a broadcast view ({tensor_words(t)}: {size_words(data)} of data, expanded to {size_words(nbytes)}) "
        f"is moved {src_dev} -> {dst_dev} at its full size: the copy writes out every repeated element, "
        f"{size_words(nbytes - data)} more than its data",
        devices=(src_dev, dst_dev),
        modules=(module,) if module else (),
        suggestion=f"move the tensor before expanding it and expand it on {dst_dev} (`.expand()` there is "
        "free; add `.contiguous()` only where the result is written in place)",
        extra={"bytes_saved": nbytes - data},
    )
