"""MP016 at run time for a tensor widened just before its move: converted to a wider dtype where it is
(`x.float().to(dev)` of bf16 activations, `clip.float().cuda()` of a uint8 video clip on the host) and then moved
whole. The conversion is exact either way, so moving the narrow tensor and converting it on arrival
(`x.to(dev).float()`) carries the same values in half (bf16 -> fp32) or a quarter (uint8 -> fp32) of the bytes.

The capture layer tells the checker of each widening conversion at the user's own line (`on_widened`: `.float()`,
`.double()`, `.to(dtype)` on the same device; an integer or floating tensor made wider, into a floating dtype,
WASTE_MIN_BYTES or more). The wide result is remembered weakly by object; its move to another device at the user's
line (`check_widened_move`) is reported there, once per line; an elementwise op of it with numbers on the way
(`clip.float().div(255)`) keeps it as wide (`carry_widened`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.reduced_after_move import ELEMENTWISE
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.thresholds import WASTE_MIN_BYTES
from mpcheck.runtime.checks.wording import size_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def on_widened(self: Checker, src: Any, out: Any) -> None:
    """`out` is `src` converted where it is; remembered when the conversion widened it (see the module's text)."""
    try:
        narrow, wide = src.element_size(), out.element_size()
        if wide <= narrow or not out.dtype.is_floating_point or src.dtype.is_complex or src.dtype == out.dtype:
            return
        if src.dtype is self._bool_dtype or out.numel() * wide < WASTE_MIN_BYTES:
            return
    except Exception:  # not tensors, or sizes not known as numbers
        return
    site = self.sites()
    if site.context:  # a library's own conversion
        return
    table = self._widened
    if len(table) >= PURGE_AT:
        for k in [k for k, v in table.items() if v[0]() is None]:
            del table[k]
        if len(table) >= PURGE_AT:
            return
    table[id(out)] = (weakref.ref(out), str(src.dtype).replace("torch.", ""), narrow, site)


def check_widened_move(
    self: Checker, t: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None, nbytes: int
) -> None:
    """A transfer of a tensor on_widened remembered: it crosses at its wide size."""
    entry = self._widened.pop(id(t), None)
    if entry is None or entry[0]() is not t or site is None or site.context:
        return
    _, narrow_name, narrow_size, cast_site = entry
    wide_name = str(t.dtype).replace("torch.", "")
    needed = nbytes * narrow_size // max(t.element_size(), 1)
    where = "" if (cast_site.path, cast_site.line) == (site.path, site.line) else f" at {cast_site}"
    self.emit(
        "MP016",
        site,
        f"{size_words(nbytes)} moved {src_dev} -> {dst_dev} here was widened from {narrow_name} to {wide_name} "
        f"just before{where}: the {narrow_name} data it was made from would cross in {size_words(needed)}, and the "
        f"conversion is as exact on {dst_dev}",
        devices=(src_dev, dst_dev),
        modules=(module,) if module else (),
        suggestion=f"move it as {narrow_name} and convert it on {dst_dev}, with what follows the conversion "
        f"(`x.to('{dst_dev}').{_method(wide_name)}` for `x.{_method(wide_name)}.to('{dst_dev}')`)",
        extra={"bytes_moved": nbytes, "bytes_needed": needed, "widened_from": narrow_name},
    )


def _method(dtype: str) -> str:
    return {"float32": "float()", "float64": "double()"}.get(dtype, f"to(torch.{dtype})")


def carry_widened(self: Checker, func: Any, args: tuple[Any, ...], out: Any) -> None:
    """An elementwise op of a widened tensor and numbers, or small tensors broadcast over it (`clip.float().div(255)`,
    `(x.float() - mean) / std`): its result is as wide, and a move of it next crosses wide too."""
    entry = self._widened.get(id(args[0]))
    if entry is None or entry[0]() is not args[0] or getattr(func, "__name__", "") not in ELEMENTWISE:
        return
    try:
        if out.shape != args[0].shape or out.dtype != args[0].dtype:
            return
        if any(isinstance(a, self._tensor_type) and a.numel() >= out.numel() for a in args[1:]):
            return  # another tensor as large: it would have to cross too
    except Exception:  # not a tensor
        return
    self._widened[id(out)] = (weakref.ref(out), *entry[1:])
