"""What the CUDA caching allocator counts for one request, so that the virtual GPUs' `memory_allocated`
and the memory estimate read as a real GPU's `torch.cuda.memory_allocated` does.

PyTorch's allocator (c10/cuda/CUDACachingAllocator.cpp) hands out blocks, and its allocated-bytes
counter adds each block's size, not the bytes asked for:
- every request is rounded up to a multiple of 512 bytes (kMinBlockSize), and an empty one takes none;
- a request of 10 MiB or more (kMinLargeAlloc) gets a fresh segment rounded up to 2 MiB (kRoundLarge),
  and the rest of that segment is split off as a free block only when it is more than 1 MiB
  (kSmallSize); otherwise the whole segment is the block, and counts.
  Smaller requests come from 2 MiB / 20 MiB segments whose rest is always split off.
Measured on 2x H200 (issue 12, the 1.3B decoder): the four 4x1024x50257 fp32 logit-sized tensors live
at cuda:1's peak count 770,048 bytes more each than they hold, exactly as modelled here.
A block reused from the cache can be larger still (a larger free block whose rest is too small to
split); that depends on the allocation history, which is not modelled.
"""

from __future__ import annotations

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def counted_bytes(nbytes: int) -> int:
    """The bytes `torch.cuda.memory_allocated` grows by when a tensor storage of `nbytes` is made."""
    if nbytes <= 0:
        return 0
    size = -(-nbytes // MIN_BLOCK) * MIN_BLOCK
    if size < MIN_LARGE_ALLOC:
        return size
    segment = -(-size // ROUND_LARGE) * ROUND_LARGE
    return segment if segment - size <= SMALL_SIZE else size
