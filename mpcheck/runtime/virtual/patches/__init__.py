"""What the dry run patches while virtual GPUs are active, one module per thing patched:
cuda.py (torch.cuda, torch.accelerator), grouping.py (foreach / optimizer grouping by device),
autograd.py (backward, custom Functions, checkpoint), data.py (DataLoader pinning, torch.load, torch.save, DLPack),
parallel.py (DataParallel and its collectives, torch.distributed, DDP, pipelining's schedules), jit.py
(torch.jit.trace's own check, which reads the real devices), lazy.py (lazy modules' first forward); base.py: the
undo record."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpcheck.runtime.virtual.patches import autograd, cuda, data, grouping, jit, lazy, parallel
from mpcheck.runtime.virtual.patches.base import Patches

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs


def install(g: VirtualGPUs, p: Patches) -> None:
    """Every patch, into `p` (p.restore() undoes them all, in reverse)."""
    cuda.install(g, p)
    grouping.install(g, p)
    autograd.install(g, p)
    data.install_pinning(g, p)
    autograd.install_python(g, p)
    data.install_load(g, p)
    data.install_save(g, p)
    data.install_dlpack(g, p)
    parallel.install_data_parallel(g, p)
    parallel.install_distributed(g, p)
    parallel.install_pipelining(g, p)
    jit.install(g, p)
    lazy.install(g, p)
