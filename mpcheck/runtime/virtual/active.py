"""The virtual GPUs now active, innermost last: what the objects torch.cuda's patched classes make
(streams, events) refer to. VirtualGPUs adds itself on entry and removes itself on exit."""

from __future__ import annotations

from typing import Any

ACTIVE: list[Any] = []
