"""Keep version counters true for in-place ops over lists of tensors run under a TorchDispatchMode.

A foreach op that writes a list of tensors in place (`_foreach_add_`, `_foreach_lerp_`: what an optimizer
runs with foreach=True, PyTorch's default on CUDA) bumps the version counters of the tensors it writes
only when no dispatch mode handles it: under one, PyTorch 2.11-2.13 leave them as they were (a single
tensor's `add_` is bumped either way). A fused optimizer's op (`_fused_adamw_`) bumps none even without a
mode, on CUDA: it is left as it is, so that a program runs the same with mpcheck and without it. The transfer checks ask "the
same unchanged data?" by storage and version (checks/storage_ref.py): a parameter that AdamW had just
updated would look unchanged, and its per-step copy to an EMA's GPU would read as a repeated transfer
(MP011). The dry run's AllocationMode and the debug mode's StrictMode are dispatch modes; both run such
ops through `call_keeping_versions`, which bumps what the op wrote and PyTorch did not.
"""

from __future__ import annotations

from typing import Any

import torch

from mpcheck.runtime.checks.storage_ref import version_of

_increment_version = torch._C._increment_version

# For each aten op seen: the (position, name) of its arguments that are lists of tensors it writes in
# place; empty for every other op (the common case: one dictionary lookup per op).
_WRITTEN_LISTS: dict[Any, tuple[tuple[int, str], ...]] = {}


def written_lists(func: Any) -> tuple[tuple[int, str], ...]:
    """The (position, name) of `func`'s arguments that are tensor lists it writes, from its schema."""
    found = _WRITTEN_LISTS.get(func)
    if found is None:
        try:
            arguments = func._schema.arguments
        except AttributeError:
            arguments = ()
        # Only the foreach ops: a fused optimizer's op (`_fused_adamw_`) bumps nothing even without a mode
        # (on CUDA; checks/checker.py's step_end forgets the moves of its parameters instead).
        foreach = getattr(func, "__name__", "").startswith("_foreach_")
        found = tuple(
            (i, a.name)
            for i, a in enumerate(arguments)
            if foreach and a.alias_info is not None and a.alias_info.is_write and str(a.type).startswith("List[Tensor")
        )
        _WRITTEN_LISTS[func] = found
    return found


def call_keeping_versions(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run the aten op `func`; where it wrote lists of tensors in place, bump the version counter of
    each written tensor that the op left unchanged, as a run without the mode would have."""
    written = written_lists(func)
    if not written:
        return func(*args, **kwargs)
    tensors: list[torch.Tensor] = []
    for i, name in written:
        value = args[i] if i < len(args) else kwargs.get(name)
        if isinstance(value, (list, tuple)):
            tensors.extend(t for t in value if isinstance(t, torch.Tensor))
    before = [version_of(t) for t in tensors]  # None: an inference tensor, which has no counter
    out = func(*args, **kwargs)
    # Each entry once, as PyTorch does without a mode (a tensor listed twice is bumped twice).
    stale = [t for t, version in zip(tensors, before) if version is not None and t._version == version]
    if stale:
        _increment_version(stale)
    return out
