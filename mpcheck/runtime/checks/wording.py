"""Words shared by the runtime findings' messages: a tensor described, a count with its noun."""

from __future__ import annotations

from typing import Any


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 crossing', '3 crossings', '0 crossings' ('many' for an irregular plural)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def tensor_words(t: Any) -> str:
    """'a float32 tensor of shape (2, 8)', 'a 0-dim int64 tensor': what a tensor is, for a message
    (a bare '32 tensor' reads as a dtype)."""
    dtype = str(getattr(t, "dtype", "")).removeprefix("torch.")
    shape = tuple(t.shape)
    if not shape:
        return f"a 0-dim {dtype} tensor"
    article = "an" if dtype.startswith("int") else "a"  # an int64, a uint8, a float32
    return f"{article} {dtype} tensor of shape {shape}"


def size_words(nbytes: int) -> str:
    """'512 bytes', '64 KiB', '16.0 MiB': a byte count for a message."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{nbytes} bytes"
