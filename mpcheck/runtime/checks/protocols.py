"""What a face gives the checks: `Devices` (where a tensor's device comes from, how one is moved,
how a transfer is timed: real GPUs or virtual ones) and `ModuleNames` (how modules are named in
findings). The checks know nothing else of the face that runs them.
"""

from __future__ import annotations

from typing import Any, Protocol

from mpcheck.runtime.checks.ledger import TransferTiming


class Devices(Protocol):
    """Where devices come from. Real GPUs: real/devices.py's CudaDevices; virtual: virtual/devices.py's VirtualGPUs."""

    name: str  # "cuda" or "virtual"

    def device_of(self, t: Any) -> str:
        """ "cuda:1", "cpu", "meta" (for a real or a virtual device alike)."""

    def normalize(self, device_like: Any) -> str | None:
        """A user's device argument ('cuda', 1, torch.device('cuda', 1), 'cuda:1') as device_of
        would name it ('cuda' means the current device); None when it names no device."""

    def move(self, t: Any, device: str) -> Any:
        """Used by on_mismatch="move"."""

    def gpu_count(self) -> int:
        """How many CUDA devices exist (real: torch.cuda.device_count(); virtual: --gpus), for MP009.
        Optional: a Devices without it is never asked about device ordinals."""

    def start_transfer(self, src: str, dst: str, nbytes: int) -> TransferTiming | None:
        """Called just BEFORE the copy is enqueued; the returned timing's stop() is called
        right after. Real: CUDA events on the source device's current stream, read at step
        end. Virtual: time from the link model."""


class ModuleNames(Protocol):
    """Names modules in findings (capture's ModuleNamer): `model.blocks.7.attn`."""

    def __call__(self, module: Any) -> str:
        """The module's path from its root model, else its class name."""

    def roots(self) -> list[Any]:
        """The root models seen so far (searched for MP006's alternating layers)."""
