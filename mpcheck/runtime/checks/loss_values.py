"""Values of a loss: what a torch.nn.functional loss returned, and what is computed from it. A mismatch
between a loss value and another tensor is the loss's (MP008), not a missing transfer between layers:
a per-element loss weighted by a mask or by per-sample weights left beside the inputs
(`(F.cross_entropy(logits, y, reduction="none") * mask).sum()`, diffusion's SNR weights, importance
weights) is fixed as a loss's targets are, by moving the small tensor to the loss's device.

A value is a loss's when it is a loss's output itself (kept by weak reference: nothing is held alive), or
when its autograd history, walked back a few nodes, reaches a loss's node (`MseLossBackward0`,
`NllLossBackward0`, ...): `loss.mean(dim=1) * w` too. Without a graph (no_grad) only the outputs
themselves are known. Asked only when a call mixes devices: a run without a mismatch pays one weak
reference per loss call. (Not a WeakSet: its membership test compares tensors with `==`.)
"""

from __future__ import annotations

import re
import weakref
from typing import Any

from mpcheck.runtime.checks.arguments import Args, Kwargs, iter_tensors

# Autograd nodes of torch's losses: MseLoss, L1Loss (when not decomposed), SmoothL1Loss, HuberLoss,
# NllLoss (cross_entropy), NllLoss2d, BinaryCrossEntropy(WithLogits), KlDiv, CtcLoss, MultiMarginLoss...
_LOSS_NODE = re.compile(r"Loss|Nll|BinaryCrossEntropy|KlDiv")
_MAX_NODES = 64  # nodes walked back per tensor: a loss value is a few ops past its loss


class LossValues:
    def __init__(self, tensor: type) -> None:
        self._tensor = tensor
        # id(output) -> weak reference to it, dropped with the output
        self._outputs: dict[int, weakref.ref[Any]] = {}

    def note(self, out: Any) -> None:
        """`out` was returned by a loss."""
        if isinstance(out, self._tensor):
            key = id(out)
            outputs = self._outputs
            outputs[key] = weakref.ref(out, lambda _: outputs.pop(key, None))

    def _is_output(self, t: Any) -> bool:
        ref = self._outputs.get(id(t))
        return ref is not None and ref() is t

    def find(self, args: Args, kwargs: Kwargs) -> Any:
        """The first tensor of a call that is a loss's value, when another is not (a mask, weights), or None.
        Losses on two devices added up (deep supervision's per-stage losses) miss a transfer of one of
        them: MP001's, as any other pair of activations."""
        found = None
        other = False
        for _, t in iter_tensors(args, kwargs, self._tensor):
            if self._is_output(t) or _after_a_loss(getattr(t, "grad_fn", None)):
                found = t if found is None else found
            else:
                other = True
        return found if other else None


def _after_a_loss(node: Any) -> bool:
    """Does this autograd node, or one it was computed from within _MAX_NODES, belong to a loss?"""
    seen: set[int] = set()
    todo = [node]
    while todo and len(seen) < _MAX_NODES:
        n = todo.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        if _LOSS_NODE.search(type(n).__name__):
            return True
        todo.extend(fn for fn, _ in getattr(n, "next_functions", ()))
    return False
