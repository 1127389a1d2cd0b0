"""DataParallel, its collectives, torch.distributed and DDP on virtual GPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from mpcheck.runtime.virtual.errors import VirtualDeviceError
from mpcheck.runtime.virtual.patches.base import Patches

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs


def install_data_parallel(g: VirtualGPUs, p: Patches) -> None:
    """DataParallel runs its module once on device_ids[0], after the checking core has reported a split model
    at the wrap: replicas would repeat the same checks on every GPU at N times the cost."""
    from torch.nn.parallel import DataParallel

    def dp_forward(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        if not self.device_ids:
            return self.module(*inputs, **kwargs)

        def device(d: Any) -> str | None:
            return f"cuda:{d}" if isinstance(d, int) else g.parse(d)

        def moved(x: Any, dst: str | None) -> Any:
            if dst is None:
                return x  # a device this emulation cannot name: left where it is
            if isinstance(x, torch.Tensor):
                return x.to(dst)
            if isinstance(x, (list, tuple)):
                return type(x)(moved(v, dst) for v in x)
            if isinstance(x, dict):
                return {k: moved(v, dst) for k, v in x.items()}
            return x

        dst = device(self.device_ids[0])
        out = self.module(*moved(inputs, dst), **moved(kwargs, dst))
        # gathered on `output_device` (device_ids[0] unless given), as DataParallel's own gather does
        gathered = getattr(self, "output_device", None)
        there = device(gathered) if gathered is not None else None
        return moved(out, there) if there is not None and there != dst else out

    p.set(DataParallel, "forward", dp_forward)

    install_comm(g, p)


def install_comm(g: VirtualGPUs, p: Patches) -> None:
    """torch.nn.parallel.comm on virtual GPUs: scatter, gather, broadcast and reduce_add are CUDA kernels
    (torch._C._scatter, ...), absent from a CPU build. Each is what it computes, written as the copies it
    makes (`Tensor.to`), so the checks and the transfer ledger see every piece moved, and a program that
    feeds replicas by hand (`scatter` / `replicate` / `parallel_apply` / `gather`, the functional
    `data_parallel`) runs to its end. A call that hands them a split model is reported by the checks
    (MP003) before it gets here."""
    import torch.nn.parallel.comm as comm

    def dev(d: Any, what: str) -> str:
        # Not checked against the virtual GPUs here: the copy to it (`Tensor.to`) goes through the checks,
        # which report a device that does not exist (MP009) at the user's line before CUDA's error.
        if isinstance(d, int) and not isinstance(d, bool):
            return "cpu" if d == -1 else f"cuda:{d}"
        try:
            parsed = d if isinstance(d, torch.device) else torch.device(d)
        except (RuntimeError, TypeError):
            raise ValueError(f"torch.nn.parallel.comm.{what}: expected a device, got {d!r}") from None
        if parsed.type == "cuda":
            return f"cuda:{g.current if parsed.index is None else parsed.index}"
        return str(parsed)

    def devs(devices: Any, what: str) -> list[str]:
        if devices is None:
            raise TypeError(f"torch.nn.parallel.comm.{what}: devices must be given")
        return [dev(d, what) for d in devices]

    def into(outs: list[torch.Tensor], out: Any) -> Any:
        if out is None:
            return outs
        for dst, src in zip(out, outs):
            dst.copy_(src)
        return out

    def scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):  # noqa: ANN001,ANN202
        targets = devs(devices, "scatter") if out is None else [str(o.device) for o in out]
        sizes = chunk_sizes if chunk_sizes is not None else ([o.shape[dim] for o in out] if out is not None else None)
        pieces = tensor.split(list(sizes), dim) if sizes is not None else tensor.chunk(len(targets), dim)
        moved = [piece.contiguous().to(d) for piece, d in zip(pieces, targets)]
        return tuple(into(moved, out))

    def gather(tensors, dim=0, destination=None, *, out=None):  # noqa: ANN001,ANN202
        if out is not None:
            return out.copy_(torch.cat([t.to(out.device) for t in tensors], dim))
        dst = dev(destination, "gather") if destination is not None else f"cuda:{g.current}"
        return torch.cat([t.to(dst) for t in tensors], dim)

    def broadcast(tensor, devices=None, *, out=None):  # noqa: ANN001,ANN202
        targets = devs(devices, "broadcast") if out is None else [str(o.device) for o in out]
        return tuple(into([tensor.to(d) for d in targets], out))

    def broadcast_coalesced(tensors, devices, buffer_size=10485760):  # noqa: ANN001,ANN202
        targets = devs(devices, "broadcast_coalesced")
        if not targets:
            raise VirtualDeviceError("Expected at least one device to broadcast to")
        # CUDA's own check (torch/csrc/cuda/comm.cpp): `replicate` of a model split over several devices,
        # or of one not on device_ids[0], stops here on real GPUs. The checks reported it (MP003, MP002)
        # before: the dry run stops where the GPUs would.
        if any(g.device_of(t) != targets[0] for t in tensors):
            first = devices[0] if isinstance(devices[0], int) else torch.device(devices[0]).index
            raise VirtualDeviceError(f"All tensors must be on devices[0]: {first}")
        return tuple(tuple(t.to(d) for t in tensors) for d in targets)

    def reduce_add(inputs, destination=None):  # noqa: ANN001,ANN202
        dst = dev(destination, "reduce_add") if destination is not None else f"cuda:{g.current}"
        total = inputs[0].to(dst)
        for t in inputs[1:]:
            total = total + t.to(dst)
        return total

    def reduce_add_coalesced(inputs, destination=None, buffer_size=10485760):  # noqa: ANN001,ANN202
        return [reduce_add(list(same), destination) for same in zip(*inputs)]

    # Scatter of a CPU batch copies on a side stream per GPU (torch.Stream(index): the accelerator's, which a
    # CPU build lacks); on virtual GPUs a stream orders nothing.
    import torch.nn.parallel._functions as functions

    if hasattr(functions, "_get_stream"):
        from mpcheck.runtime.virtual.streams import VirtualStream

        def get_stream(device: Any) -> Any:
            return None if torch.device(device).type == "cpu" else VirtualStream(device)

        p.set(functions, "_get_stream", get_stream)

    for name, fn in (
        ("scatter", scatter),
        ("gather", gather),
        ("broadcast", broadcast),
        ("broadcast_coalesced", broadcast_coalesced),
        ("reduce_add", reduce_add),
        ("reduce_add_coalesced", reduce_add_coalesced),
    ):
        if hasattr(comm, name):
            p.set(comm, name, fn)


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
