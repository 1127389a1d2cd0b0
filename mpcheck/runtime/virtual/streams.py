"""CUDA streams and events on virtual GPUs: they order nothing and time nothing."""

from __future__ import annotations

from typing import Any

import torch

from mpcheck.runtime.virtual.active import ACTIVE


class VirtualStream(torch.Stream):
    """A CUDA stream that orders nothing: every op on virtual GPUs runs at once, in program order.
    (A torch.Stream underneath, on the CPU, so that `tensor.record_stream(s)` accepts it.)"""

    def __new__(cls, device: Any = None, priority: int = 0, **_: Any) -> VirtualStream:
        return super().__new__(cls, device="cpu")

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        g = ACTIVE[-1]
        self._vdevice = torch.device(f"cuda:{g.index(device)}")
        self.priority = priority
        self.cuda_stream = 0

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self._vdevice

    def wait_event(self, event: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    # A virtual stream records virtual events (torch's stub names its own Event class).
    def record_event(self, event: Any = None) -> VirtualEvent:  # type: ignore[override]
        event = event if event is not None else VirtualEvent()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def is_capturing(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<virtual cuda stream on {self._vdevice}>"


class VirtualEvent:
    """A CUDA event that is always complete; it measures no time (there is none to measure)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.recorded = False

    def record(self, stream: Any = None) -> None:
        self.recorded = True

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: Any) -> float:
        ACTIVE[-1].note_limit(
            "CUDA event timing: virtual GPUs run nothing on a GPU, so Event.elapsed_time() returns 0.0 ms"
        )
        return 0.0


class StreamContext:
    """`with torch.cuda.stream(s):`. As in PyTorch (its torch.cuda.set_stream sets the current device to the
    stream's), the stream's device is the current one for the block (a bare `device="cuda"` there lands on
    it), and the device current before is again after it."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.prev: int | None = None

    def __enter__(self) -> Any:
        if isinstance(self.stream, VirtualStream):
            g = ACTIVE[-1]
            self.prev, g.current = g.current, self.stream.device.index
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        if self.prev is not None:
            ACTIVE[-1].current, self.prev = self.prev, None
