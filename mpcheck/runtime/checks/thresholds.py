"""How large a wasted transfer must be to be reported (MP011, and MP005's host detour and MP014,
which compare two ways of moving the same data), and which devices are no GPU.

One place for the sizes: the linter shares REPEAT_MIN_BYTES (mpcheck/codes.py), and a user sets
another threshold with MPCHECK_REPEAT_MIN_BYTES.
"""

from __future__ import annotations

import os

from mpcheck import codes

# MP011 reports a repeated transfer of at least this many bytes. Below it a copy costs about its
# fixed launch cost whatever the link: on 2x H200 (NVLink; README "Transfer costs", measured with
# bench/transfer_costs.py) 21 us for 98 KB and 21.3 us for 524 KB, while at pageable host-to-device
# speed (7 GB/s, the slowest link measured) 64 KiB adds 9 us to a ~20 us launch. So a repeated copy
# of a small index, flag or scalar (a beam index moved to each layer's device, a fan-out of a tiny
# tensor) wastes one launch, the cost of one small kernel: not worth a warning. Above it the waste
# grows with the size. MPCHECK_REPEAT_MIN_BYTES (or Checker(repeat_min_bytes=...)) sets another
# threshold; 0 reports every repeat. See rules/MP011-repeated-transfer.md.
REPEAT_MIN_BYTES = codes.REPEAT_MIN_BYTES
REPEAT_MIN_BYTES_ENV = "MPCHECK_REPEAT_MIN_BYTES"


def repeat_min_bytes_from_env() -> int:
    """The MP011 threshold: MPCHECK_REPEAT_MIN_BYTES when set (a whole number of bytes), else REPEAT_MIN_BYTES."""
    raw = os.environ.get(REPEAT_MIN_BYTES_ENV, "").strip()
    if not raw:
        return REPEAT_MIN_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{REPEAT_MIN_BYTES_ENV} must be a whole number of bytes, not {raw!r}") from None
    if value < 0:
        raise ValueError(f"{REPEAT_MIN_BYTES_ENV} must be 0 or more, not {value}")
    return value


# The waste findings that compare two ways of moving data (a host detour, MP005; logits moved to the
# targets, MP014) stay silent below this size: both ways then cost about one copy's launch (~21 us on
# NVLink up to ~0.5 MB, notes in rules/MP005-round-trip-transfer.md), so the difference is noise.
WASTE_MIN_BYTES = codes.REPEAT_MIN_BYTES
# A tensor kept on the host while its GPU copy is freed is an offload (MP005 silent) only when it frees at least
# this share of what its GPU holds: below it, the memory saved is noise beside the model's, and the two copies
# per use are the cost (a recurrent state sent to the host between two chunks of truncated BPTT).
OFFLOAD_MIN_SHARE = 0.05
# A fresh copy of unchanging data made every call (MP011 by provenance) from one GPU to another is reported from
# this size: a peer copy below it costs about its launch (~21 us up to ~0.5 MB on 2x H200 NVLink, above), about
# what making the data again where it is needed costs (a kernel or a few), so the copy is no clear waste. From the
# host (pageable, 7-13 GB/s, and the host fills it first) REPEAT_MIN_BYTES holds.
GPU_CONST_COPY_MIN_BYTES = 1024 * 1024
# Devices a copy to or from is no GPU-to-GPU waste (MP005's detour, MP014 compare GPUs).
NOT_GPU = frozenset({"cpu", "meta"})
