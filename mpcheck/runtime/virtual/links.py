"""Link presets and the transfer-time model of the dry run.

A virtual transfer takes `latency + bytes / bandwidth`. Each preset says where
its numbers come from; none of them is a promise about a given machine.

| preset | bandwidth (GB/s, one direction) | per-copy latency | source |
|---|---|---|---|
| nvlink | 400 | 21 us | measured: 2x H200, NV18, torch 2.11, fp32 `x.to('cuda:1')`, 2026-11-29 (notes/h200-transfers.md): 1.07 GB in 2724 us (394 GB/s), 268 MB at 386 GB/s; copies up to ~0.5 MB take ~21 us whatever the size. The link's nominal peak is ~450 GB/s per direction. |
| pcie5 | 50 | 21 us | PCIe 5.0 x16 nominal 63 GB/s per direction (32 GT/s x 16 lanes, 128b/130b), times 0.8 for protocol overhead: an assumption, not measured here. |
| pcie4 | 25 | 21 us | PCIe 4.0 x16 nominal 31.5 GB/s per direction (16 GT/s x 16 lanes, 128b/130b), times 0.8: an assumption, not measured here. |
| a number, e.g. `--link 100` | that many GB/s | 21 us | given by the user |

The 21 us latency was measured on NVLink and is dominated by launching the
copy, not by the wire, so it is used for every link.
"""

from __future__ import annotations

from dataclasses import dataclass

LATENCY_US = 21.0


@dataclass(frozen=True)
class Link:
    name: str
    gb_per_s: float  # one direction, effective
    latency_us: float = LATENCY_US
    source: str = ""

    def time_ms(self, nbytes: int) -> float:
        return self.latency_us / 1e3 + nbytes / (self.gb_per_s * 1e9) * 1e3

    def as_dict(self) -> dict:
        return {"name": self.name, "gb_per_s": self.gb_per_s, "latency_us": self.latency_us, "source": self.source}


PRESETS: dict[str, Link] = {
    "nvlink": Link(
        "nvlink",
        400.0,
        source="measured on 2x H200 NV18 (1.07 GB copy at 394 GB/s, ~21 us per small copy), notes/h200-transfers.md",
    ),
    "pcie5": Link("pcie5", 50.0, source="PCIe 5.0 x16 nominal 63 GB/s per direction x 0.8 (assumed efficiency)"),
    "pcie4": Link("pcie4", 25.0, source="PCIe 4.0 x16 nominal 31.5 GB/s per direction x 0.8 (assumed efficiency)"),
}


def parse_link(spec: str | float | int | Link) -> Link:
    """'nvlink' | 'pcie4' | 'pcie5' | a bandwidth in GB/s ('100', '100GB/s', 100.0)."""
    if isinstance(spec, Link):
        return spec
    if isinstance(spec, (int, float)):
        gbps = float(spec)
    else:
        text = spec.strip().lower()
        if text in PRESETS:
            return PRESETS[text]
        for suffix in ("gb/s", "gbps", "gb"):
            if text.endswith(suffix):
                text = text[: -len(suffix)].strip()
                break
        try:
            gbps = float(text)
        except ValueError:
            raise ValueError(
                f"unknown link {spec!r}: use one of {', '.join(PRESETS)} or a bandwidth in GB/s such as 100"
            ) from None
    if not gbps > 0:
        raise ValueError(f"link bandwidth must be positive, got {spec!r}")
    return Link(f"{gbps:g}GB/s", gbps, source="given on the command line")


class ModelTiming:
    """A TransferTiming (see checks/ledger.py) whose time comes from the link model, not from a clock."""

    __slots__ = ("_ms",)

    def __init__(self, ms: float) -> None:
        self._ms = ms

    def stop(self) -> None:
        pass

    def ready(self) -> bool:
        return True

    def elapsed_ms(self) -> float:
        return self._ms


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1e3,
    "kb": 1e3,
    "m": 1e6,
    "mb": 1e6,
    "g": 1e9,
    "gb": 1e9,
    "t": 1e12,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


def parse_bytes(spec: str | int | float) -> int:
    """'80GiB', '141GB', '1.5TiB', 1024 -> bytes."""
    if isinstance(spec, (int, float)):
        n = float(spec)
    else:
        text = spec.strip().lower().replace(" ", "")
        i = len(text)
        while i and not (text[i - 1].isdigit() or text[i - 1] == "."):
            i -= 1
        unit = text[i:]
        if unit not in _UNITS:
            raise ValueError(f"unknown memory size {spec!r}: write e.g. 80GiB, 141GB or 24000MiB")
        try:
            n = float(text[:i]) * _UNITS[unit]
        except ValueError:
            raise ValueError(f"unknown memory size {spec!r}: write e.g. 80GiB, 141GB or 24000MiB") from None
    if not n > 0:
        raise ValueError(f"memory size must be positive, got {spec!r}")
    return int(n)


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
