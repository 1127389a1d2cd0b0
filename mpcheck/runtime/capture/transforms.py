"""torch.func's transforms read their inputs where they are.

Inside `vmap(f)(x)` or `grad(f)(params, x)` every op sees functorch's wrappers of `x`
(BatchedTensor, GradTrackingTensor), never `x` itself, so the checker's record of what
was read where it arrived (arrivals.note_reads, by object) misses the read: a tensor
sent to cuda:0 for a per-sample-gradient step and then on to cuda:1 looked like a
GPU detour (MP005). Here a transformed function, when called, reads its tensor
arguments (every tensor in them, nested) as any op would. The transforms are patched
on `torch.func` and `torch` while the session runs: a script that imported them
before the session began (`from torch.func import vmap` above `with mpcheck.debug()`)
keeps the originals, and such reads stay unseen there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from mpcheck.runtime.capture import hooks

# Transforms that return a function to call later, and those that call the function they are given at once.
_RETURN_A_FUNCTION = ("vmap", "grad", "grad_and_value", "jacrev", "jacfwd", "hessian")
_CALL_AT_ONCE = ("vjp", "jvp", "functional_call")


def install(checker: Any) -> list[hooks.Undo]:
    """Patch the transforms so that each call of what they transform notes its tensor inputs as read."""
    from torch.utils._pytree import tree_leaves

    def note(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if checker.arrived_objects:  # (as the mode does: nothing to note while nothing has arrived)
            checker.note_reads(
                tuple(leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)), {}
            )

    def reading(transformed: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(transformed)
        def call(*args: Any, **kwargs: Any) -> Any:
            note(args, kwargs)
            return transformed(*args, **kwargs)

        return call

    def returning_reader(transform: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(transform)
        def make(*args: Any, **kwargs: Any) -> Any:
            return reading(transform(*args, **kwargs))

        return make

    undos: list[hooks.Undo] = []
    func = getattr(torch, "func", None)
    if func is None:
        return undos
    for name in (*_RETURN_A_FUNCTION, *_CALL_AT_ONCE):
        orig = getattr(func, name, None)
        if orig is None:
            continue
        new = returning_reader(orig) if name in _RETURN_A_FUNCTION else reading(orig)
        undos.append(hooks.patch(func, name, new))
        if getattr(torch, name, None) is orig:  # torch.vmap is torch.func.vmap
            undos.append(hooks.patch(torch, name, new))
    return undos
