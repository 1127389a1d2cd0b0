"""MP016 at run time for a tensor widened just before its move: converted to a wider dtype where it is
(`x.float().to(dev)` of bf16 activations, `clip.float().cuda()` of a uint8 video clip on the host) and then moved
whole. The conversion is exact either way, so moving the narrow tensor and converting it on arrival
(`x.to(dev).float()`) carries the same values in half (bf16 -> fp32) or a quarter (uint8 -> fp32) of the bytes.

The capture layer tells the checker of each widening conversion at the user's own line (`on_widened`: `.float()`,
`.double()`, `.to(dtype)` on the same device; an integer or floating tensor made wider, into a floating dtype,
WASTE_MIN_BYTES or more). The wide result is remembered weakly by object; its move to another device at the user's
line (`check_widened_move`) is reported there, once per line; an elementwise op of it with numbers on the way
(`clip.float().div(255)`) keeps it as wide (`carry_widened`).

A one-hot encoding is the same waste, larger: `F.one_hot(ids, C)` turns each id into a row of C values
(`on_encoded`), so moving the encoding (often cast to float first) carries C / 2 times the int64 ids in float32.
It is remembered the same way, kept through casts and elementwise steps, and its move reported with the ids'
bytes as what would do; the fix moves the ids and encodes them on arrival.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.reduced_after_move import ELEMENTWISE
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.thresholds import WASTE_MIN_BYTES
from mpcheck.runtime.checks.wording import size_words, tensor_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


# The `narrow_name` of an entry made by on_encoded: a one-hot encoding, whose ids' bytes are `needed`.
ENCODED = "one-hot"


def on_encoded(self: Checker, ids: Any, out: Any) -> None:
    """`out` is `F.one_hot(ids, C)`: remembered when it is at least twice the ids and WASTE_MIN_BYTES more."""
    try:
        needed, nbytes = ids.numel() * ids.element_size(), out.numel() * out.element_size()
    except Exception:  # not tensors, or sizes not known as numbers
        return
    if nbytes < 2 * needed or nbytes - needed < WASTE_MIN_BYTES:
        return
    site = self.sites()
    if not site.context:  # (a library's own encoding is not the user's to move)
        _remember(self, out, (ENCODED, needed, site))


def _remember(self: Checker, out: Any, entry: tuple[str, int, Site]) -> None:
    table = self._widened
    if len(table) >= PURGE_AT:
        for k in [k for k, v in table.items() if v[0]() is None]:
            del table[k]
        if len(table) >= PURGE_AT:
            return
    table[id(out)] = (weakref.ref(out), *entry)


def _carry_encoded(self: Checker, src: Any, out: Any) -> bool:
    """A cast or an elementwise step of a remembered one-hot (`F.one_hot(ids, C).float()`): as many values, the
    same ids behind them. True when `src` was one."""
    entry = self._widened.get(id(src))
    if entry is None or entry[1] != ENCODED or entry[0]() is not src:
        return False
    try:
        if out.numel() == src.numel():
            self._widened[id(out)] = (weakref.ref(out), *entry[1:])
    except Exception:  # not a tensor
        pass
    return True


def on_widened(self: Checker, src: Any, out: Any) -> None:
    """`out` is `src` converted where it is; remembered when the conversion widened it (see the module's text)."""
    if self._widened and _carry_encoded(self, src, out):
        return
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
    _remember(self, out, (str(src.dtype).replace("torch.", ""), narrow, site))


def check_widened_move(
    self: Checker, t: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None, nbytes: int
) -> None:
    """A transfer of a tensor on_widened remembered: it crosses at its wide size."""
    entry = self._widened.pop(id(t), None)
    if entry is None or entry[0]() is not t or site is None or site.context:
        return
    _, narrow_name, narrow_size, cast_site = entry
    if narrow_name == ENCODED:
        _report_encoded_move(self, t, src_dev, dst_dev, site, module, nbytes, narrow_size, cast_site)
        return
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


def _report_encoded_move(
    self: Checker,
    t: Any,
    src_dev: str,
    dst_dev: str,
    site: Site,
    module: str | None,
    nbytes: int,
    needed: int,
    encode_site: Site,
) -> None:
    """A one-hot encoding moved: the ids behind it would cross in `needed` bytes."""
    if nbytes < 2 * needed or nbytes - needed < WASTE_MIN_BYTES:
        return  # (cast down to bool or uint8 on the way: the ids would save too little)
    where = "" if (encode_site.path, encode_site.line) == (site.path, site.line) else f" at {encode_site}"
    self.emit(
        "MP016",
        site,
        f"{size_words(nbytes)} moved {src_dev} -> {dst_dev} here is a one-hot encoding made just before{where} "
        f"({tensor_words(t)}): the ids it encodes would cross in {size_words(needed)}, and encoding them is as "
        f"exact on {dst_dev}",
        devices=(src_dev, dst_dev),
        modules=(module,) if module else (),
        suggestion=f"move the ids to {dst_dev} and call `F.one_hot` there (`F.one_hot(ids.to('{dst_dev}'), C)`)",
        extra={"bytes_moved": nbytes, "bytes_needed": needed, "widened_from": ENCODED},
    )


def _method(dtype: str) -> str:
    return {"float32": "float()", "float64": "double()"}.get(dtype, f"to(torch.{dtype})")


def carry_widened(self: Checker, func: Any, args: tuple[Any, ...], out: Any) -> None:
    """An elementwise op of a widened tensor and numbers, or small tensors broadcast over it (`clip.float().div(255)`,
    `(x.float() - mean) / std`): its result is as wide, and a move of it next crosses wide too."""
    if _carry_encoded(self, args[0], out):
        return
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
