"""What is done to a model split over devices as a whole: wrapped in DataParallel / DDP with
device_ids (MP002), handed to DataParallel's internals (MP003), or moved entirely onto one device
(MP007, every move recorded in placement.py).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mpcheck.finding import Finding
from mpcheck.runtime.checks.sites import UNKNOWN, Site

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def on_wrap(
    self: Checker, kind: str, module: Any, *, device_ids: Any, output_device: Any, site: Site | None
) -> Finding | None:
    """Before DataParallel(...) / DistributedDataParallel(...) wraps `module`. Returns the
    finding when the wrap would fail (or, with move, the caller skips the wrap)."""
    devs = [d for d in self.model_devices(module) if d not in ("cpu", "meta")]  # (meta: not made yet)
    if len(devs) == 1 and kind == "DataParallel":
        return self._stage_off_first_device_id(module, devs[0], device_ids, site)
    if len(devs) < 2:
        return None
    if kind == "DataParallel":
        why = "DataParallel replicates a single-device module and refuses parameters on several devices"
        sugg = (
            "do not wrap a model split by hand in DataParallel; for data parallelism on top of it use "
            "DistributedDataParallel(model, device_ids=None, output_device=None), one process per split"
        )
    elif device_ids is not None or output_device is not None:
        why = "DistributedDataParallel accepts a multi-device module only with device_ids=None and output_device=None"
        sugg = "pass device_ids=None and output_device=None (or leave them out)"
    else:
        return None
    return self.emit(
        "MP002",
        site or self.sites(),
        f"{kind} wraps a model split over {', '.join(devs)}: {why}",
        devices=tuple(devs),
        modules=(self.module_name(module),),
        suggestion=sugg,
    )


def _stage_off_first_device_id(
    self: Checker, module: Any, dev: str, device_ids: Any, site: Site | None
) -> Finding | None:
    """DataParallel(stage on cuda:1) with device_ids whose first entry is another GPU (by default every
    GPU, so cuda:0): DataParallel keeps the module on device_ids[0] and its forward fails with
    "module must have its parameters and buffers on device cuda:0 (device_ids[0])"."""
    first: str | None
    if device_ids is None:
        count = self._gpu_count()
        if not count:
            return None
        first = "cuda:0"  # DataParallel's default: every visible GPU, from cuda:0
    else:
        try:
            ids = list(device_ids)
            first = self.devices.normalize(ids[0]) if ids else None
        except Exception:  # an id that names no device: PyTorch's own error follows
            return None
        if first is None or len(ids) == 1:
            return None  # one device id: DataParallel moves the module there itself
    if first == dev:
        return None
    given = "the default device_ids (every GPU)" if device_ids is None else f"device_ids={list(device_ids)!r}"
    return self.emit(
        "MP002",
        site or self.sites(),
        f"DataParallel wraps a module that lives on {dev} with {given}: DataParallel keeps the module "
        f"on device_ids[0] ({first}) and its forward fails with 'module must have its parameters and "
        f"buffers on device {first} (device_ids[0])'",
        devices=(dev, first),
        modules=(self.module_name(module),),
        suggestion=f"pass device_ids starting with {dev} (e.g. device_ids=[{dev.split(':')[-1]}, ...]); "
        "if this is one stage of a split model, do not wrap it in DataParallel",
    )


def on_parallel_primitive(self: Checker, name: str, module: Any, *, inside: bool, site: Site | None) -> Finding | None:
    """Before DataParallel's internals (torch.nn.parallel.replicate / data_parallel called on `module`,
    or scatter / gather called inside the forward of `module`, inside=True) run on a model split
    over several devices: MP003. A single-device module, or a call outside any split module's
    method (a hand-written data-parallel loop), is what these functions are for: silent."""
    devs = [d for d in self.model_devices(module) if d not in ("cpu", "meta")]  # (meta: not made yet)
    if len(devs) < 2 or (inside and self._holds_replicas(module)):
        return None
    split = f"a model split over {', '.join(devs)}"
    if inside:
        what = f"torch.nn.parallel.{name} inside the forward of {split}"
        why = (
            "scatter cuts one batch into pieces for replicas and gather concatenates the replicas' pieces; "
            "the stages of a split model each need the whole batch in turn"
        )
    else:
        what = f"torch.nn.parallel.{name} on {split}"
        why = "it copies a single-device module onto each GPU and requires every parameter on device_ids[0]"
    return self.emit(
        "MP003",
        site or self.sites(),
        f"{what}: {why}",
        devices=tuple(devs),
        modules=(self.module_name(module),),
        suggestion="move the activations between the stages with `.to('cuda:k')`; for data parallelism "
        "over a split model use DistributedDataParallel(model, device_ids=None), one process per replica",
        # replicate / data_parallel on a split model raise in PyTorch right after; a scatter or gather
        # inside a split forward runs (on the wrong data): recorded, the program goes on.
        fatal=not inside,
    )


def _holds_replicas(self: Checker, module: Any) -> bool:
    """Do `module`'s weights look like one copy per device (the same shapes on each)? Then it is a
    hand-written data-parallel wrapper, and scatter / gather in its forward is what they are for."""
    shapes: dict[str, list[tuple[int, ...]]] = {}
    for t in (*module.parameters(), *module.buffers()):
        shapes.setdefault(self.devices.device_of(t), []).append(tuple(t.shape))
    per_device = [sorted(v) for v in shapes.values()]
    return all(v == per_device[0] for v in per_device[1:])


def on_module_move(
    self: Checker, module: Any, target: str | None, *, site: Site | None, implicit: bool = False
) -> Finding | None:
    """Before `module.cuda()` / `module.to(dev)`: moving a split model onto one device collapses it.
    implicit: no index given (the current device). Every move is recorded (placement.py)."""
    if target is None:
        return None
    if target == "cpu":
        self.on_model_to_host(module, site)  # back unused later? (MP005, model_round_trip.py)
    elif self._offloads:
        self.on_model_placed(site)
    self._check_moved_in_forward(module, target, site)
    self.placements.moved(
        module,
        site or UNKNOWN,
        target,
        implicit=implicit,
        current=self.devices.normalize("cuda") if implicit else None,
    )
    devs = [d for d in self.model_devices(module) if d not in ("cpu", "meta")]  # (meta: not made yet)
    if _a_deep_copy(self, module):
        return None
    if target == "cpu":
        # Freeing the GPUs (a checkpoint, the end of a run) is no bug; training on the host next is: judged then.
        if len(devs) >= 2 and site is not None:
            self._pending_collapses.append(PendingCollapse(weakref.ref(module), None, site, "cpu", tuple(devs)))
        return None
    if len(devs) < 2:
        if devs and _placed_part_pulled(self, module, devs[0], target, site):
            return None
        _part_collapses_its_model(self, module, target, site)
        return None
    return _collapsed(
        self,
        module,
        site or self.sites(),
        target,
        tuple(devs),
        f"this moves a model split over {', '.join(devs)} entirely onto {target}",
        "remove this call: a split model's stages are placed in its __init__; move only the inputs",
    )


def _placed_part_pulled(self: Checker, module: Any, placed: str, target: str, site: Site | None) -> bool:
    """`model.to(target)` while the model is being placed part by part: some of it still on the host (or meta),
    some on the GPU `placed`, where a move of a part inside it put them (a device map applied with its root entry
    last, `{"": "cuda:0", "layers.3": "cuda:1"}`). The move takes those parts to `target` too: the split in the
    making is undone before the model ever ran (MP007). True when reported."""
    if placed == target or not placed.startswith("cuda") or not target.startswith("cuda"):
        return False
    if not set(self.model_devices(module)) & {"cpu", "meta"}:
        return False  # a model all on one GPU moved to another: a move, not a split undone
    parts = [
        (mover, mv) for mover, mv in self.placements.moves_inside(module) if mover is not module and mv.target == placed
    ]
    if not parts:
        return False
    mover, first = parts[-1]
    # (named by its path in the model: the model has not run, so no root names it yet)
    part = next((name for name, m in module.named_modules() if m is mover), "") or self.module_name(mover)
    _collapsed(
        self,
        module,
        site or self.sites(),
        target,
        (placed, target),
        f"this moves `{self.module_name(module)}` whole onto {target}, with `{part}`, which {first.site} placed on "
        f"{placed}: the model was being split",
        f"place the rest of the model part by part, or move the whole first and then the parts meant for {placed} "
        "(a device map's root entry goes first)",
    )
    return True


@dataclass(frozen=True)
class PendingCollapse:
    """A move that left a model which ran split whole on one device, judged when the model next runs: a part
    moved onto the GPU where the rest of it is (`part`), or the whole model moved to the host (`part` None)."""

    model: weakref.ref[Any]
    part: str | None
    site: Site
    target: str
    split_over: tuple[str, ...]


def _part_collapses_its_model(self: Checker, module: Any, target: str, site: Site | None) -> None:
    """Notes a move of one part of a model that has run split over GPUs when it leaves that model whole on
    `target` (a pre-hook that pulls each stage to its input's device, `module.to(args[0].device)`); MP007 once
    the model runs so (judge_pending_collapses): a swap made in two moves passes through one GPU and is no collapse.
    Only models already called (the namer's roots): a model being placed part by part is not split yet."""
    if self.namer is None:
        return
    for root in self.namer.roots():
        if root is module or not any(m is module for m in root.modules()):
            continue
        before = [d for d in self.model_devices(root) if d != "cpu"]
        if len(before) < 2:
            return
        moved = {id(t) for t in (*module.parameters(), *module.buffers())}
        device_of = self.devices.device_of
        rest = {device_of(t) for t in (*root.parameters(), *root.buffers()) if id(t) not in moved}
        if not {d for d in rest if d != "cpu"} - {target}:
            part = self.module_name(module)
            self._pending_collapses.append(
                PendingCollapse(weakref.ref(root), part, site or self.sites(), target, tuple(before))
            )
        return


def judge_pending_collapses(self: Checker, module: Any) -> None:
    """An outermost call of `module`: MP007 for each move noted for it (PendingCollapse) after which it still sits
    whole on that one device as it runs now; for the host, only when it trains there (grad on, training mode):
    a model moved to the CPU for inference or export runs there on purpose."""
    waiting = []
    for move in self._pending_collapses:
        root = move.model()
        if root is None:
            continue
        if root is not module:
            waiting.append(move)
            continue
        if move.part is None:
            if set(self.model_devices(root)) == {"cpu"} and root.training and self._grad_enabled():
                _collapsed(
                    self,
                    root,
                    move.site,
                    "cpu",
                    move.split_over,
                    f"this moves `{self.module_name(root)}`, a model split over {', '.join(move.split_over)}, to the "
                    "host (`Module.cpu()` moves the model itself, not a copy), and it trains there next",
                    "copy the weights to the host instead of moving the model: "
                    "`{k: v.cpu() for k, v in model.state_dict().items()}` (or save the state dict as it is and load "
                    "it with `map_location='cpu'`)",
                )
        elif {d for d in self.model_devices(root) if d != "cpu"} == {move.target}:
            _collapsed(
                self,
                root,
                move.site,
                move.target,
                move.split_over,
                f"this moves `{move.part}` onto {move.target}, where the rest of `{self.module_name(root)}`, a "
                f"model split over {', '.join(move.split_over)}, already is",
                "keep each part where the split placed it and move its inputs to it instead (a forward pre-hook "
                "does that by returning the moved inputs)",
            )
    self._pending_collapses = waiting


def _collapsed(
    self: Checker, module: Any, site: Any, target: str, devs: tuple[str, ...], what: str, suggestion: str
) -> Finding | None:
    """MP007 for `module`, split over `devs`, now whole on `target` (by `what`, at `site`): remembered so that the
    mismatches it causes are counted on it (collapse.py)."""
    finding = self.emit(
        "MP007",
        site,
        f"{what}: the split is undone and {target} must hold every parameter",
        devices=devs,
        modules=(self.module_name(module),),
        suggestion=suggestion,
    )
    self._collapses.record(module, target, devs, finding)
    return finding


def _a_deep_copy(self: Checker, module: Any) -> bool:
    """Is every parameter of `module` one copy.deepcopy made (capture/copying.py)? Then moving it whole
    (an EMA or a teacher kept on one GPU) leaves the split of the model it copies as it was."""
    params = list(module.parameters())
    return bool(params) and all(self.copied_params.get(id(p)) is p for p in params)


def on_model_loaded(self: Checker, loaded: Any, saved_on: dict[int, str], map_location: Any, site: Site) -> None:
    """After torch.load: a module in what it returned (the object, or a value of the dict or list it is)
    whose weights were saved from several GPUs and now all sit on one: map_location collapsed the split
    (MP007 at the load, as for `model.to(dev)`; what follows from it is counted there, collapse.py)."""
    items = loaded.values() if isinstance(loaded, dict) else loaded if isinstance(loaded, (list, tuple)) else [loaded]
    for module in items:
        if not isinstance(module, self._module_type):
            continue
        saved = set()
        for t in (*module.parameters(), *module.buffers()):
            try:
                where = saved_on.get(t.untyped_storage()._cdata)
            except Exception:  # a tensor without storage
                where = None
            if where is not None and where.startswith("cuda"):
                saved.add(self.devices.normalize(where) or where)
        now = [d for d in self.model_devices(module) if d != "cpu"]
        if len(saved) < 2 or len(now) != 1:
            continue
        target = now[0]
        devs = tuple(sorted(saved))
        _collapsed(
            self,
            module,
            site,
            target,
            devs,
            f"this load puts a model saved split over {', '.join(devs)} entirely onto {target} "
            f"(map_location={map_location!r})",
            "save and load the state_dict (`torch.save(model.state_dict(), path)`; build the split "
            "model, then `model.load_state_dict(torch.load(path, map_location='cpu'))`), or load without "
            "map_location so each stage returns to the GPU it was saved from",
        )


def on_state_assigned(self: Checker, module: Any, before: list[str], site: Site) -> None:
    """After `module.load_state_dict(sd, assign=True)`: the module now holds the state dict's own tensors,
    where they were loaded. A model split over several GPUs before whose parameters now sit on one device,
    or on the host (`torch.load(path, map_location="cpu")` then assign), is collapsed as by `model.to(dev)`
    (MP007 at the load; what follows from it is counted there, collapse.py)."""
    devs = tuple(d for d in before if d != "cpu")
    now = self.model_devices(module)
    if len(devs) < 2 or len(now) != 1:
        return
    _collapsed(
        self,
        module,
        site,
        now[0],
        devs,
        f"`load_state_dict(..., assign=True)` puts the state dict's own tensors, all on {now[0]}, into a model "
        f"split over {', '.join(devs)}",
        "drop assign=True (load_state_dict then copies each tensor into the parameter where it is), "
        "or place the model again after the load",
    )
