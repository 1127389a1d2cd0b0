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

An elementwise op of tensors broadcast against each other can enlarge its inputs as much (`on_broadcast`):
`torch.exp(-g * (d[..., None] - centers) ** 2)`, a radial basis expansion of an N x N distance matrix on 32
centres, is 32 times the distances; built on the host and then copied to the GPU, it crosses at that size. It is
remembered like an upsampling.

So is an upsampling (`on_upsampled`): `F.interpolate(lr, scale_factor=4).to(dev)` carries 16 times the
low-resolution image, which would cross and be resampled on arrival as well. Unlike an encoding, an upsampled
tensor is often computed for its own sake where it is (a super-resolution model's input, read by the first
convolution and again by the residual on the last GPU): moving its input instead would resample it twice. So it is
forgotten as soon as anything but a cast or an elementwise step reads it, and only a move that comes first is
reported. Both are reported from the second time the same line moves one: a table built once at setup, or test
images made once for a final evaluation, and moved once cost one copy, not a waste worth a warning.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.codes import RESAMPLE_MIN_FACTOR
from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.reduced_after_move import ELEMENTWISE
from mpcheck.runtime.checks.sites import Site
from mpcheck.runtime.checks.thresholds import WASTE_MIN_BYTES
from mpcheck.runtime.checks.wording import size_words, tensor_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


# The `narrow_name` of an entry made by on_encoded: a one-hot encoding, whose ids' bytes are `needed`.
ENCODED = "one-hot"
# ... and of those made by on_upsampled: a resampled tensor, or one unfolded into patches (im2col), whose input's
# bytes are `needed`.
UPSAMPLED = "upsampled"
UNFOLDED = "unfolded into patches"
# ... and by on_broadcast: an elementwise op of tensors broadcast against each other, whose inputs' bytes are `needed`.
BROADCAST = "broadcast"
# Entries that stand for the data an op enlarged, not a dtype.
_ENLARGED = (ENCODED, UPSAMPLED, UNFOLDED, BROADCAST)
# Those forgotten when anything but an elementwise step reads them (computed for their own sake where they are).
_RESAMPLED = (UPSAMPLED, UNFOLDED, BROADCAST)


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


def on_upsampled(self: Checker, src: Any, out: Any, unfolded: bool = False) -> None:
    """`out` is `F.interpolate(src, ...)` (or `F.unfold(src, k)`, `unfolded`): remembered when it is at least
    RESAMPLE_MIN_FACTOR times `src` and WASTE_MIN_BYTES more."""
    try:
        needed, nbytes = src.numel() * src.element_size(), out.numel() * out.element_size()
    except Exception:  # not tensors, or sizes not known as numbers
        return
    if nbytes < RESAMPLE_MIN_FACTOR * needed or nbytes - needed < WASTE_MIN_BYTES:
        return
    _remember_resampled(self, out, UNFOLDED if unfolded else UPSAMPLED, needed)


def on_broadcast(self: Checker, args: tuple[Any, ...], out: Any) -> None:
    """`out` is an elementwise op of tensors broadcast against each other (`d[..., None] - centers`, a radial basis
    expansion of distances): remembered when it is at least RESAMPLE_MIN_FACTOR times all its tensor inputs together
    and WASTE_MIN_BYTES more. Its move next, on a later pass of the same line, is reported (`_report_enlarged_move`)."""
    tensor = self._tensor_type
    a, b = args
    try:
        # Elements first (one call each): nearly every op's result is as large as an input, and stops here.
        n = out.numel()
        if n < RESAMPLE_MIN_FACTOR * (
            (a.numel() if isinstance(a, tensor) else 0) + (b.numel() if isinstance(b, tensor) else 0)
        ):
            return
        needed = sum(t.numel() * t.element_size() for t in args if isinstance(t, tensor))
        nbytes = n * out.element_size()
    except Exception:  # not tensors, or sizes not known as numbers
        return
    if nbytes < RESAMPLE_MIN_FACTOR * max(needed, 1) or nbytes - needed < WASTE_MIN_BYTES:
        return
    _remember_resampled(self, out, BROADCAST, needed)


def _remember_resampled(self: Checker, out: Any, how: str, needed: int) -> None:
    """An enlarged tensor forgotten at its first other read (`_RESAMPLED`), made at the user's line (a library's own
    resampling or arithmetic is not the user's to move)."""
    site = self.sites()
    if not site.context:
        _remember(self, out, (how, needed, site))
        if id(out) in self._widened:
            self._resampled.add(id(out))


def forget_upsampled(self: Checker, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> None:
    """A call whose ops the function mode does not see (a module the signature cache runs unchecked) was given
    these: an upsampled tensor among them was read where it is, for its own sake."""
    table, resampled = self._widened, self._resampled
    for a in (*args, *kwargs.values()) if kwargs else args:
        if id(a) in resampled and (entry := table.get(id(a))) is not None and entry[0]() is a:
            del table[id(a)]
            resampled.discard(id(a))
    for key in [k for k in resampled if (e := table.get(k)) is None or e[0]() is None]:
        resampled.discard(key)  # (freed unread, or its entry purged)


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
    if entry is None or entry[1] not in _ENLARGED or entry[0]() is not src:
        return False
    try:
        if out.numel() == src.numel():
            self._widened[id(out)] = (weakref.ref(out), *entry[1:])
            if entry[1] in _RESAMPLED:
                self._resampled.add(id(out))
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
    self._resampled.discard(id(t))
    if entry is None or entry[0]() is not t or site is None or site.context:
        return
    _, narrow_name, narrow_size, cast_site = entry
    if narrow_name in _ENLARGED:
        _report_enlarged_move(self, t, narrow_name, src_dev, dst_dev, site, module, nbytes, narrow_size, cast_site)
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


# How each kind of enlargement is told: what the moved tensor is, what would do instead, why that is as good,
# and the fix ({dst}: the destination).
_ENLARGED_WORDS = {
    ENCODED: (
        "is a one-hot encoding made",
        "the ids it encodes",
        "encoding them is as exact on {dst}",
        "move the ids to {dst} and call `F.one_hot` there (`F.one_hot(ids.to('{dst}'), C)`)",
    ),
    UPSAMPLED: (
        "was upsampled",
        "the tensor it was resampled from",
        "`F.interpolate` runs as well on {dst}",
        "move the input to {dst} and resample it there "
        "(`F.interpolate(x.to('{dst}'), ...)` for `F.interpolate(x, ...).to('{dst}')`)",
    ),
    BROADCAST: (
        "was computed by broadcasting smaller tensors",
        "the tensors it was computed from",
        "the same arithmetic runs as well on {dst}",
        "move the inputs of that arithmetic to {dst} and compute it there (`f(d.to('{dst}'), c.to('{dst}'))` for "
        "`f(d, c).to('{dst}')`)",
    ),
    UNFOLDED: (
        "was unfolded into patches",
        "the tensor it was unfolded from",
        "`F.unfold` runs as well on {dst}",
        "move the input to {dst} and unfold it there (`F.unfold(x.to('{dst}'), k)` for `F.unfold(x, k).to('{dst}')`)",
    ),
}


def _report_enlarged_move(
    self: Checker,
    t: Any,
    how: str,
    src_dev: str,
    dst_dev: str,
    site: Site,
    module: str | None,
    nbytes: int,
    needed: int,
    made_site: Site,
) -> None:
    """A tensor an op enlarged (`how`: one-hot encoded, upsampled, unfolded) moved: its input would cross in
    `needed` bytes."""
    least = 2 if how == ENCODED else RESAMPLE_MIN_FACTOR
    if nbytes < least * needed or nbytes - needed < WASTE_MIN_BYTES:
        return  # (cast down to bool or uint8 on the way: the input would save too little)
    if how in _RESAMPLED and site not in self._enlarged_moves:
        # Only a move the program makes again (a step's features built on the host, on every batch): a table built
        # once by broadcasting (positional encodings, `pos[:, None] * freqs`), or a batch of smooth test images
        # upsampled from noise and moved once for a final evaluation, costs one copy, not a waste worth a warning.
        self._enlarged_moves.add(site)
        return
    what, instead, why, fix = _ENLARGED_WORDS[how]
    where = "" if (made_site.path, made_site.line) == (site.path, site.line) else f" at {made_site}"
    self.emit(
        "MP016",
        site,
        f"{size_words(nbytes)} moved {src_dev} -> {dst_dev} here {what} just before{where} ({tensor_words(t)}): "
        f"{instead} would cross in {size_words(needed)}, and {why.format(dst=dst_dev)}",
        devices=(src_dev, dst_dev),
        modules=(module,) if module else (),
        suggestion=fix.format(dst=dst_dev),
        extra={"bytes_moved": nbytes, "bytes_needed": needed, "widened_from": how},
    )


def _method(dtype: str) -> str:
    return {"float32": "float()", "float64": "double()"}.get(dtype, f"to(torch.{dtype})")


def carry_widened(self: Checker, func: Any, args: tuple[Any, ...], out: Any) -> None:
    """An elementwise op of a widened tensor and numbers, or small tensors broadcast over it (`clip.float().div(255)`,
    `(x.float() - mean) / std`): its result is as wide, and a move of it next crosses wide too."""
    entry = self._widened.get(id(args[0]))
    if entry is not None and entry[1] in _RESAMPLED and getattr(func, "__name__", "") not in ELEMENTWISE:
        del self._widened[id(args[0])]  # read for its own sake where it is (a convolution): computed to be used there
        self._resampled.discard(id(args[0]))
        return
    try:
        if any(isinstance(a, self._tensor_type) and a.numel() >= out.numel() for a in args[1:]):
            return  # another tensor as large (noise added at full size): its data would have to cross too
    except Exception:  # not a tensor
        return
    if _carry_encoded(self, args[0], out):
        return
    if entry is None or entry[0]() is not args[0] or getattr(func, "__name__", "") not in ELEMENTWISE:
        return
    try:
        if out.shape != args[0].shape or out.dtype != args[0].dtype:
            return
    except Exception:  # not a tensor
        return
    self._widened[id(out)] = (weakref.ref(out), *entry[1:])
