"""DataParallel, its collectives, torch.distributed and DDP on virtual GPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from mpcheck.runtime.virtual.patches.base import Patches

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs


def install_data_parallel(g: VirtualGPUs, p: Patches) -> None:
    """DataParallel cannot replicate onto virtual GPUs (scatter and broadcast are CUDA kernels): it runs its
    module once on device_ids[0], after the checking core has reported a split model at the wrap."""
    from torch.nn.parallel import DataParallel

    def dp_forward(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        dst = f"cuda:{self.device_ids[0]}" if isinstance(self.device_ids[0], int) else g.parse(self.device_ids[0])

        def to_dst(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return x.to(dst)
            if isinstance(x, (list, tuple)):
                return type(x)(to_dst(v) for v in x)
            if isinstance(x, dict):
                return {k: to_dst(v) for k, v in x.items()}
            return x

        return self.module(*to_dst(inputs), **to_dst(kwargs))

    p.set(DataParallel, "forward", dp_forward)

    # DataParallel's internals are CUDA collectives (torch._C._scatter, _broadcast, ...), absent from a CPU
    # build; calling them by hand around a manual split is a misuse anyway (MP003 in the linter).
    import torch.nn.parallel.comm as comm

    def comm_limit(name: str) -> Callable:
        def limited(*a: Any, **k: Any) -> Any:
            raise g.limit(
                f"torch.nn.parallel {name}",
                "DataParallel's scatter/gather/broadcast are CUDA collectives. To move a tensor to the next "
                "stage of a model split by hand, use tensor.to('cuda:k')",
            )

        return limited

    for name in ("scatter", "gather", "broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced"):
        if hasattr(comm, name):
            p.set(comm, name, comm_limit(name))


def install_distributed(g: VirtualGPUs, p: Patches) -> None:
    try:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:  # pragma: no cover - torch built without distributed
        return
    if not dist.is_available():  # pragma: no cover
        return
    orig_init = dist.init_process_group

    def init_process_group(backend: Any = None, *a: Any, **k: Any) -> Any:
        b = str(backend or "").lower()
        if "nccl" in b:
            raise g.limit(
                "NCCL",
                "it needs real GPUs. Use backend='gloo' for the dry run (one process is enough to check "
                "placement and the DDP wrap)",
            )
        return orig_init(backend or "gloo", *a, **k)

    p.set(dist, "init_process_group", init_process_group)
    orig_ddp_init = DistributedDataParallel.__init__

    def ddp_init(self: Any, module: Any, device_ids: Any = None, output_device: Any = None, *a: Any, **k: Any) -> None:
        if g.backing == "meta":
            raise g.limit(
                "DistributedDataParallel with --backing meta",
                "DDP broadcasts and all-reduces real tensor data; run with --backing cpu",
            )
        devices = {g.device_of(t) for t in module.parameters()} | {g.device_of(t) for t in module.buffers()}
        if len(devices) > 1 or device_ids is not None:
            # The checking core reports device_ids on a split model (MP002) at the user's line; DDP itself
            # runs on the backing device, where device_ids would name a real GPU: go on without them.
            device_ids = None
            output_device = None
        orig_ddp_init(self, module, device_ids, output_device, *a, **k)

    p.set(DistributedDataParallel, "__init__", ddp_init)
