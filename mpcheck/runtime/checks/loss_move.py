"""MP014: predictions moved to the targets' GPU, unchanged, only to meet targets far smaller than
themselves at a torch.nn.functional loss: moving the targets the other way copies fewer bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpcheck.runtime.checks.arguments import Args, Kwargs, iter_tensors
from mpcheck.runtime.checks.storage_ref import version_of
from mpcheck.runtime.checks.thresholds import NOT_GPU, WASTE_MIN_BYTES
from mpcheck.runtime.checks.wording import size_words, tensor_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def on_loss(self: Checker, args: Args, kwargs: Kwargs) -> None:
    """A torch.nn.functional loss is called: were its predictions moved here from another GPU,
    unchanged since, only to meet targets (and weights) far smaller than themselves? Moving the
    targets the other way copies fewer bytes, in forward and again in backward."""
    if not self._tls.stack:
        self.end_top_pass()
    if self._tls.suspended or not self.wants("MP014"):
        return
    tensors = [t for _, t in iter_tensors(args, kwargs, self._tensor)]
    if len(tensors) < 2:
        return
    preds, rest = tensors[0], tensors[1:]
    nbytes = preds.numel() * preds.element_size()
    if nbytes < max(self.repeat_min_bytes, WASTE_MIN_BYTES):
        return
    small = sum(t.numel() * t.element_size() for t in rest)
    if small * 4 > nbytes:  # the targets are not much smaller: either way costs about the same
        return
    try:
        storage = preds.untyped_storage()
    except Exception:
        return
    with self._lock:
        entry = self._arrivals.get(id(storage))
    if entry is None:
        return
    ref, came_from, move_site = entry
    here = self.devices.device_of(preds)
    if ref.ref() is not storage or ref.version is None or ref.version != version_of(preds):
        return
    # From a GPU to another, or to the host in training (`F.cross_entropy(logits.to(labels.device), labels)` with the
    # labels of a host dataset: the loss and the start of backward run on the CPU); not from the host.
    if came_from in NOT_GPU or (here in NOT_GPU and not (here == "cpu" and preds.requires_grad)) or came_from == here:
        return  # (an evaluation's loss on the host, without grad, is a choice)
    if here in NOT_GPU and _deterministic():
        return  # a loss whose CUDA backward is not deterministic (`F.ctc_loss`) may be run on the host for that
    if id(storage) in self._read_arrivals:
        return  # read here before the loss (a refiner on this GPU takes them too): the move was needed
    if any(self.devices.device_of(t) != here for t in rest):
        return  # a mismatch: check_op reports it
    loss_site = self.sites()
    module = self.current_module()
    others = "the targets" if len(rest) == 1 else "the targets and weights"
    backward = ", and as much again in backward (the predictions' gradient crosses back)" if preds.requires_grad else ""
    self.emit(
        "MP014",
        move_site,
        f"the predictions ({tensor_words(preds)}, {size_words(nbytes)}) are moved {came_from} -> {here} here "
        f"only to meet {others} ({size_words(small)}) at the loss at {loss_site}: moving {others} to "
        f"{came_from} instead copies {size_words(nbytes - small)} less per forward{backward}",
        devices=(came_from, here),
        modules=(module,) if module else (),
        suggestion=f"compute the loss on {came_from}: keep the predictions there (drop this move) and move "
        f"{others} with `.to('{came_from}')`",
        fatal=False,
        extra={"loss_site": str(loss_site), "bytes_saved": nbytes - small},
    )


def _deterministic() -> bool:
    import torch

    return bool(torch.are_deterministic_algorithms_enabled())
