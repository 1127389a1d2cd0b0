"""Processes of one job (torchrun, `mpcheck dryrun --nproc`): which rank this is, which GPUs it
owns, and MP013, a rank placing something on a GPU another rank owns.

A job that combines data parallelism over processes with a split model inside each (DDP around a
split replica, `device_ids=None`) gives each process its own GPUs: with G GPUs on a node and L
processes on it, local rank r owns cuda:r*G/L .. cuda:(r+1)*G/L-1 (the tutorial's `dev0 = 2 * rank`,
`dev1 = 2 * rank + 1` for 2 GPUs a process). A rank that puts a stage on another rank's GPU shares it
with that rank: the memory of two replicas on one GPU, and NCCL refuses two ranks on one device.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CODE = "MP013"


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RankEnv | None:
        """The rank torchrun (or any launcher setting RANK and WORLD_SIZE) gave this process; None
        for a single process."""
        env = os.environ if env is None else env
        try:
            world = int(env.get("WORLD_SIZE", "1"))
            rank = int(env["RANK"])
        except (KeyError, ValueError):
            return None
        if world < 2:
            return None
        local_rank = int(env.get("LOCAL_RANK", rank))
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
        return cls(rank, world, local_rank, local_world)

    def owned(self, gpu_count: int) -> list[int] | None:
        """The CUDA indices this rank owns, or None where the GPUs cannot be dealt evenly (one GPU
        per process under CUDA_VISIBLE_DEVICES: each sees cuda:0 as its own)."""
        per = gpu_count // self.local_world_size if self.local_world_size else 0
        if per < 1 or gpu_count % self.local_world_size:
            return None
        return list(range(self.local_rank * per, (self.local_rank + 1) * per))


def _cuda_index(device_like: Any) -> int | None:
    import torch

    if isinstance(device_like, bool):
        return None
    if isinstance(device_like, int):
        return device_like
    if isinstance(device_like, (str, torch.device)):
        try:
            dev = torch.device(device_like)
        except (RuntimeError, TypeError, ValueError):
            return None
        return dev.index if dev.type == "cuda" else None
    return None


def watch_owned_devices(checker: Any, env: RankEnv) -> None:
    """MP013 at each place this rank puts a tensor or module on a GPU it does not own. Every device
    argument reaches `checker.check_device` (MP009's entry: `.to`, `.cuda`, factories' `device=`,
    Module.to/.cuda), so it is wrapped on the instance; cached per device value like MP009."""
    count_of = getattr(checker.devices, "gpu_count", None)
    gpus = count_of() if count_of is not None else 0
    owned = env.owned(gpus)
    if not owned:
        return
    per = len(owned)
    check_device = checker.check_device
    foreign: dict[Any, int | None] = {}

    def check_device_and_owner(device_like: Any) -> None:
        check_device(device_like)
        try:
            index = foreign.get(device_like, -1)
        except TypeError:  # unhashable: not a device
            return
        if index == -1:
            index = _cuda_index(device_like)
            if index is not None and (index in owned or index >= gpus):
                index = None  # its own GPU, or one that does not exist (MP009's)
            foreign[device_like] = index
        if index is not None and checker.wants(CODE) and not checker.suspended:
            _report(checker, env, owned, index, per)

    checker.check_device = check_device_and_owner


def _report(checker: Any, env: RankEnv, owned: list[int], index: int, per: int) -> None:
    mine = ", ".join(f"cuda:{i}" for i in owned)
    other = index // per
    module = checker.current_module()
    checker.emit(
        CODE,
        checker.sites(),
        f"rank {env.rank} (LOCAL_RANK {env.local_rank}) places this on cuda:{index}, a GPU of local rank {other}; "
        f"this rank owns {mine}: two processes share cuda:{index}",
        devices=(f"cuda:{index}",),
        modules=(module,) if module else (),
        suggestion=f"derive the devices from LOCAL_RANK ({per} GPU{'s' if per > 1 else ''} a process: "
        f"`dev0 = {per} * local_rank`"
        + (", `dev1 = dev0 + 1`" if per > 1 else "")
        + "), not from a fixed index or the global rank",
    )
