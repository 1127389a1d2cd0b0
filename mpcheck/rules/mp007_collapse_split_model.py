"""MP007: .cuda() / .to(device) on a model split over several devices moves every stage onto one."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.describe import split_desc, split_devices, split_modules
from mpcheck.devices.events import Collapse, SharedModuleMoved
from mpcheck.devices.values import Obj, show, single
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS


class CollapseSplitModel(Rule):
    code = "MP007"
    needs = FLOW_WORDS + (
        "parallelize(",
        "dispatch_model",
        "and_dispatch",
        "Pipe(",
        "tensor_parallel(",
    )  # device_map= with .to("cuda") says cuda

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for ev in ctx.model.facts(Collapse):
            mod = ev.module
            call = ev.node
            recv = (
                ctx.code(ev.owner)
                if ev.owner is not None
                else ctx.code(call.func.value)
                if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                else "the model"
            )
            target = single(ev.devs)
            if target == "meta":
                continue  # a skeleton (`copy.deepcopy(model).to("meta")` for torch.func): no weights go anywhere
            onto = show(target) if target else "one device"
            meth = ev.meth
            if meth in ("load_state_dict", "load"):
                message, suggestion = (
                    (
                        f"`{ctx.code(call)}` keeps the checkpoint's tensors where torch.load put them ({onto}): every "
                        f"stage of `{recv}` ({split_desc(mod)}) ends up there, and the split is undone. Load without "
                        f"`assign=True` (load_state_dict then copies into the placed parameters), or load before "
                        f"placing the model.",
                        "drop `assign=True`, or load the checkpoint before the model is split",
                    )
                    if meth == "load_state_dict"
                    else (
                        f"`{ctx.code(call)}` loads the whole model this file saved there ({split_desc(mod)}) with "
                        f"every tensor mapped to {onto}: the split is undone. Load it without `map_location` (each "
                        f"tensor goes back to the GPU it was saved from), or save the state dict and load it into a "
                        f"newly split model.",
                        "drop `map_location`, or load a state dict into the split model",
                    )
                )
                yield self.finding(
                    ctx,
                    call,
                    message,
                    devices=split_devices(mod) + ([target] if target else []),
                    modules=split_modules(mod),
                    suggestion=suggestion,
                )
                continue
            if isinstance(mod, Obj) and mod.dispatched.startswith("a device map"):  # its devices are not known
                undone = (
                    "where the map splits it, the split is undone (accelerate refuses to move a model with "
                    "offloaded parts). Drop the call; to load it whole on one device, pass `device_map={'': device}`"
                )
            elif isinstance(mod, Obj) and mod.dispatched.startswith("device_map="):
                # loaded split by a library: the script may have wanted it whole on one device all along
                undone = (
                    "the split is undone and the memory it saved is needed again. Remove the call and let each "
                    "stage stay where it was placed; to have the model whole on one device, load it there "
                    "(`device_map={'': device}`)"
                )
            else:
                undone = (
                    "the split is undone and the memory it saved is needed again. Remove the call and let each "
                    "stage stay where it was placed"
                )
            if meth == "to_empty":
                # Materialising a meta model stage by stage, then the root for its own tensors: recurse=False.
                undone = (
                    "the stages placed before are made anew there, and the split is undone. Pass `recurse=False` to "
                    "materialise only the model's own parameters and buffers"
                )
                tail, suggestion = ".", "pass `recurse=False`; the stages are already placed"
            else:
                tail = "; to change only the dtype, use `.to(dtype=...)`."
                suggestion = f"remove `.{meth}(...)`; the stages are already placed"
            yield self.finding(
                ctx,
                call,
                f"`{ctx.code(call)}` moves every stage of `{recv}` ({split_desc(mod)}) onto {onto}: {undone}{tail}",
                devices=split_devices(mod) + ([target] if target else []),
                modules=split_modules(mod),
                suggestion=suggestion,
            )
        for shared in ctx.model.facts(SharedModuleMoved):
            yield self._shared(ctx, shared)

    def _shared(self, ctx: FileContext, ev: SharedModuleMoved) -> Finding:
        """A module object held by two stages, moved to the second stage's device."""
        dev, first_dev = single(ev.devs), single(ev.first_devs)
        first_line = ctx.line(ev.first)
        if ev.undoes:
            # `self.tail.to(d1)` of layers aliased from the backbone, then `self.backbone.to(d0)`.
            part = _receiver(ctx, ev.first)
            message = (
                f"`{ctx.code(ev.node)}` also moves the modules `{part}` holds, which line {first_line} placed on "
                f"{show(first_dev)}: `{part}` holds parts of `{_receiver(ctx, ev.node)}`, and `.to()` moves the "
                f"objects, so they end on {show(dev)} and the placement at line {first_line} is undone. Move the "
                f"whole first, then the part."
            )
            suggestion = f"move `{part}` after this line"
        else:
            message = (
                f"`{ctx.code(ev.node)}` also moves {_objects(ev.count, ev.name)} that line {first_line} placed on "
                f"{show(first_dev)}: both stages hold the same objects (one list of blocks used twice, or a default "
                f"argument built once for every call), and `.to()` moves the object, not a copy, so the stage placed "
                f"at line {first_line} ends on {show(dev)} too. Build separate instances for each stage (a new list "
                f"per stage; a default of None and a new module in the body)."
            )
            suggestion = f"give each stage its own `{ev.name}` instances"
        return self.finding(
            ctx,
            ev.node,
            message,
            devices=[d for d in (first_dev, dev) if d],
            modules=[ev.name],
            suggestion=suggestion,
        )


def _receiver(ctx: FileContext, move: cst.CSTNode) -> str:
    """`self.tail` for `self.tail.to(d)`."""
    if isinstance(move, cst.Call) and isinstance(move.func, cst.Attribute):
        return ctx.code(move.func.value)
    return ctx.code(move)


def _objects(n: int, name: str) -> str:
    """'the `PReLU` object', '4 `Block` objects'."""
    return f"the `{name}` object" if n == 1 else f"{n} `{name}` objects"
