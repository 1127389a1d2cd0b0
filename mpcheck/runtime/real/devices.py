"""Real devices for the debug mode: devices as PyTorch reports them, transfers timed with CUDA events.

A cross-GPU copy runs on the source device's current stream, so the event pair
is recorded there, around the enqueue. The events are read only at a step end,
and only once the GPU has passed them (`query()`), so timing never
synchronizes the program. Copies that start on the CPU are timed on the
destination's stream (that is where a host-to-device copy runs).
"""

from __future__ import annotations

from typing import Any

import torch


class CudaTiming:
    __slots__ = ("device", "start", "end")

    def __init__(self, device: torch.device) -> None:
        self.device = device
        stream = torch.cuda.current_stream(device)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.start.record(stream)

    def stop(self) -> None:
        # The current stream of the start event's device; record() without a stream
        # would use the current device's stream, which may be another GPU.
        self.end.record(torch.cuda.current_stream(self.device))

    def ready(self) -> bool:
        return self.end.query()

    def elapsed_ms(self) -> float | None:
        try:
            self.end.synchronize()
            return self.start.elapsed_time(self.end)
        except RuntimeError:  # an event never recorded (the copy raised)
            return None


class CudaDevices:
    name = "cuda"
    # device_of reads only `t.device`, PyTorch's own: the checker may read it with the torch
    # function modes off (a virtual device, by contrast, is answered by a mode).
    plain_device_of = True

    def __init__(self, *, time_transfers: bool = True) -> None:
        self.time_transfers = time_transfers and torch.cuda.is_available()
        self._names: dict[torch.device, str] = {}
        self._gpu_count: int | None = None  # read once: CUDA_VISIBLE_DEVICES is fixed for the process

    def device_of(self, t: Any) -> str:
        dev = t.device
        name = self._names.get(dev)
        if name is None:
            name = self._names[dev] = str(dev)
        return name

    def normalize(self, device_like: Any) -> str | None:
        if device_like is None:
            return None
        try:
            dev = torch.device(device_like) if not isinstance(device_like, int) else torch.device("cuda", device_like)
        except (RuntimeError, TypeError):
            return None
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        return str(dev)

    def move(self, t: Any, device: str) -> Any:
        return t.to(device)

    def gpu_count(self) -> int:
        if self._gpu_count is None:
            self._gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return self._gpu_count

    def start_transfer(self, src: str, dst: str, nbytes: int) -> CudaTiming | None:
        if not self.time_transfers:
            return None
        on = src if src.startswith("cuda") else dst
        if not on.startswith("cuda"):
            return None
        return CudaTiming(torch.device(on))

    def peak_allocated(self, device: str) -> int | None:
        if device.startswith("cuda") and torch.cuda.is_available():
            # The nested statistics: max_memory_allocated() flattens all of them into one dict
            # first (~300 Python calls a device, at each of the first steps' memory snapshots).
            stats = torch.cuda.memory_stats_as_nested_dict(torch.device(device))
            try:
                peak: int = stats["allocated_bytes"]["all"]["peak"]
            except (KeyError, TypeError):  # no statistics (CUDA not initialised yet): none allocated
                return torch.cuda.max_memory_allocated(torch.device(device))
            return peak
        return None
