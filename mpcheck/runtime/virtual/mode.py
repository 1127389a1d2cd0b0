"""The virtual-device TorchFunctionMode: every torch call goes to its handler (torchapi.py)
or down the generic path (ops.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch.overrides import TorchFunctionMode

from mpcheck.runtime.virtual import autocast, ops, torchapi
from mpcheck.runtime.virtual.allocations import UNKNOWN
from mpcheck.runtime.virtual.handlers import flash_sdpa

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs


def build_tables() -> None:
    """The tables of torch functions, once per process (torch's functions must exist)."""
    torchapi.build()
    ops.build()
    autocast.build(flash_sdpa)


class VirtualMode(TorchFunctionMode):
    def __init__(self, gpus: VirtualGPUs) -> None:
        super().__init__()
        self.g = gpus
        self.tls = gpus.tls

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        g = self.g
        tls = self.tls  # this thread's (devices.PerThread)
        outer = tls.op_device
        # The device the dispatch mode (allocations.py) gives what this call's aten ops make: the generic
        # path says which; a handler labels its outputs itself.
        tls.op_device = UNKNOWN
        try:
            h = _HANDLERS.get(func)
            if h is not None:
                return h(g, func, args, kwargs)
            return _generic(g, func, args, kwargs)
        finally:
            tls.op_device = outer


_HANDLERS = torchapi.HANDLERS  # module-level names: one lookup per torch call
_generic = ops.generic
