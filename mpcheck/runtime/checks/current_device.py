"""MP004: the current device (torch.cuda.set_device, `.cuda()` without an index) where a split model
needs a named one: a tensor made on the current device inside a stage on another GPU (remembered in
placement.py, reported if it meets the stage's tensors unmoved), and a model whose stages all landed
on one GPU because an index-less placement followed set_device (checked at the root's first call).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.placement import (
    Made,
    names_device_index,
)
from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.sites import Site, user_frame

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def on_current_device_tensor(self: Checker, t: Any, how: str) -> None:
    """`t` was just made on the current device (a bare `.cuda()`, `device='cuda'`, a factory under
    set_default_device('cuda')). Made in a method of a module that lives on another GPU, it is
    remembered, and reported at this line if it meets that module's tensors unmoved."""
    if not isinstance(t, self._tensor) or not self.wants("MP004"):
        return
    frame = user_frame(2)
    owner = frame.f_locals.get("self") if frame is not None else None
    if not isinstance(owner, self._module_type):
        owner = self._running_module()  # a helper function called from a module's forward
        if owner is None:
            _made_outside_a_module(self, t, how)
            return
    module_dev = self.module_device(owner)
    if module_dev is None:
        # A module without weights of its own (a rotary table's holder, shared by stages): the stage
        # that runs it, the nearest module around it that has a device, is where its tensors must be.
        for path in reversed(self._tls.stack):
            around = self._running_module(path)
            module_dev = self.module_device(around) if around is not None else None
            if module_dev is not None:
                owner = around
                break
    dev = self.devices.device_of(t)
    if module_dev is None and dev.startswith("cuda"):
        # The forward of a model split over several GPUs (or a helper it calls): whichever GPU is current
        # is one of its stages at best; remembered in case it meets another stage's tensors unmoved.
        split_over = self.gpus_below(owner)
        if len(split_over) > 1 and dev in split_over:
            self.placements.made(t, Made(self.sites(), how, dev, self.module_name(owner), None, split_over))
        return
    if module_dev is None or module_dev == dev or not module_dev.startswith("cuda") or not dev.startswith("cuda"):
        return
    self.placements.made(t, Made(self.sites(), how, dev, self.module_name(owner), module_dev))


def _made_outside_a_module(self: Checker, t: Any, how: str) -> None:
    """A batch's bare `.cuda()` in the training loop after set_device(1), or in a `torch.cuda.device(1)`
    block: it lands on cuda:1 whatever the line meant. Remembered, and reported at this line if it meets
    tensors on another GPU unmoved (on cuda:0, the default, the line means what it says: a plain MP001 at
    the use). Each process of a distributed run picks its own GPU so: not there."""
    dev = self.devices.device_of(t)
    # With one GPU nothing can meet another: no record (each batch of a loop would pay a stack walk).
    if dev.startswith("cuda") and dev != "cuda:0" and self._gpu_count() > 1 and not _distributed():
        self.placements.made(t, Made(self.sites(), how, dev, "", None))


def _running_module(self: Checker, path: str | None = None) -> Any:
    """The module whose forward runs now (innermost; or the one at `path` of the module stack), found
    from its path in a known root model."""
    path, namer = path or self.current_module(), self.namer
    if path is None or namer is None:
        return None
    for root in namer.roots():
        name = namer(root)
        if path == name:
            return root
        if path.startswith(name + "."):
            try:
                module: Any = root.get_submodule(path[len(name) + 1 :])
            except AttributeError:  # a path through a module found by its parent (`net.<Linear>`)
                return None
            return module
    return None


def on_module_built(self: Checker, module: Any, site: Site) -> None:
    self.placements.built(module, site)


def on_root_call(self: Checker, root: Any) -> None:
    """A root model's first call: were its stages, meant for several GPUs, all put on one by set_device?
    An index-less `.cuda()` made while set_device pointed at cuda:k (k > 0), and another stage placed on
    cuda:k by name: the split collapsed silently (MP004, a waste: it runs, on one GPU). And which of its layers it
    left on the CPU beside parts on GPUs (MP031, host_layers.py)."""
    self.roots_checked[id(root)] = weakref.ref(root)
    if len(self.roots_checked) > PURGE_AT:
        for k in [k for k, r in self.roots_checked.items() if r() is None]:  # in place: the hooks hold it
            del self.roots_checked[k]
    mp004 = self.wants("MP004") and self._gpu_count() >= 2
    if not mp004 and not self.wants("MP031"):
        return
    if self.plain_devices and self._tf_depth():
        with self._no_torch_function():
            below = self._devices_below(root)
            self.note_host_layers(root, below)  # MP031: layers it left on the CPU beside its GPU parts
    else:
        below = self._devices_below(root)
        self.note_host_layers(root, below)
    if not mp004:
        return
    devs = [d for d in below if d != "cpu"]
    if len(devs) != 1 or devs[0] == "cuda:0" or _distributed():
        return
    dev = devs[0]
    implicit, explicit = None, None
    for mover, mv in self.placements.moves_inside(root):
        if mv.target != dev:
            continue
        if mv.implicit and mv.current == dev:
            implicit = implicit or (mover, mv)
        elif not mv.implicit and names_device_index(mv.site):
            # The index written out (`.to("cuda:1")`): this stage was meant for that GPU, and the other
            # for the one `.cuda()` meant. A device taken from a variable (`.to(device)`, the GPU this
            # process uses) says nothing of the kind.
            explicit = explicit or (mover, mv)
    if implicit is None or explicit is None:
        return
    (i_mod, i_mv), (e_mod, e_mv) = implicit, explicit
    self.emit(
        "MP004",
        i_mv.site,
        f"this index-less placement puts '{self.module_name(i_mod)}' on the current device {dev} (set by "
        f"torch.cuda.set_device or `with torch.cuda.device`), the GPU that '{self.module_name(e_mod)}' is "
        f"placed on by name at {e_mv.site}: every stage of '{self.module_name(root)}' sits on {dev} and the "
        "other GPUs stay unused (the split collapsed)",
        devices=(dev,),
        modules=(self.module_name(root),),
        suggestion="name the GPU this stage is meant for (`.cuda(0)` / `.to('cuda:0')`) instead of the current device",
    )


def _distributed() -> bool:
    """Is a torch.distributed process group running? (Then set_device(rank) + `.cuda()` is the DDP idiom.)"""
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())
