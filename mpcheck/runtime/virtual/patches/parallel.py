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


NCCL_AS_GLOO = (
    "NCCL needs real GPUs: the process group runs on gloo in this one process, so the placement and the DDP "
    "wrap are checked, NCCL's collectives are not"
)
# What torchrun sets for each process; the env:// rendezvous needs them. The dry run is one process of
# one: where the program was not started by torchrun, they are set for it, and restored at the end.
_TORCHRUN_ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}


def _one_process_rendezvous(p: Patches) -> None:
    """The environment of torchrun's only process, where the program was not started by torchrun."""
    import os
    import socket

    if "MASTER_ADDR" in os.environ or "RANK" in os.environ:
        return  # started by torchrun (or set by the user): theirs
    env = dict(_TORCHRUN_ENV)
    with socket.socket() as sock:  # a free port for the store of this one process
        sock.bind(("127.0.0.1", 0))
        env["MASTER_PORT"] = str(sock.getsockname()[1])
    for key, value in env.items():
        if key not in os.environ:
            p.set_item(os.environ, key, value)


def install_distributed(g: VirtualGPUs, p: Patches) -> None:
    try:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:  # pragma: no cover - torch built without distributed
        return
    if not dist.is_available():  # pragma: no cover
        return
    orig_init = dist.init_process_group

    def init_process_group(backend: Any = None, init_method: Any = None, *a: Any, **k: Any) -> Any:
        b = str(backend or "").lower()
        if "nccl" in b:
            # The program's own backend needs real GPUs; gloo runs the same process group on the CPU, so the
            # placement and the DDP wrap that follow are still checked (what NCCL itself does is not).
            g.note_limit(NCCL_AS_GLOO)
            backend = "gloo"
        if k.get("device_id") is not None:
            k["device_id"] = None  # a CUDA device to bind NCCL to: nothing to bind with gloo on the CPU
        if init_method in (None, "env://") and k.get("store") is None:
            _one_process_rendezvous(p)
        out = orig_init(backend or "gloo", init_method, *a, **k)
        # A program that never destroys its process group leaves it to the process's end; the dry run
        # may end before the process (mpcheck.dryrun in code, the tests): it goes with the virtual GPUs.
        p.on_restore(lambda: dist.destroy_process_group() if dist.is_initialized() else None)
        return out

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


def install_pipelining(g: VirtualGPUs, p: Patches) -> None:
    """torch.distributed.pipelining: building the stages runs (tracing, splitting, placing: the dry run
    checks them), a schedule's step whose stages live in other processes stops with a limit instead of
    gloo's "Pair is not connected" from a send to a rank that does not exist."""
    try:
        from torch.distributed.pipelining import schedules
    except ImportError:  # pragma: no cover - a PyTorch without it
        return

    def wrap(orig: Callable) -> Callable:
        def step(self: Any, *a: Any, **k: Any) -> Any:
            local = getattr(self, "_stages", None) or [getattr(self, "_stage", None)]
            if getattr(self, "_num_stages", 0) > len(local):
                raise g.limit(
                    f"{type(self).__name__}.step() over {self._num_stages} pipeline stages",
                    f"this process holds {len(local)} of them; the others would run in other processes (one per "
                    "rank under torchrun) and exchange activations by send/recv, and the dry run is one process. "
                    "Dry-run each stage's module on its own (a forward with one microbatch on its GPU), or the "
                    "model split by hand with .to('cuda:k') between the stages",
                )
            return orig(self, *a, **k)

        return step

    for cls in (schedules.PipelineScheduleSingle, schedules.PipelineScheduleMulti):
        if "step" in vars(cls):
            p.set(cls, "step", wrap(vars(cls)["step"]))
