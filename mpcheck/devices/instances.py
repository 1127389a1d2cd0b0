"""Instances of the classes of a file: their __init__ interpreted with the
constructor's arguments (memoised per argument values), and where that puts
their parts (split over several devices, on one, or left to be moved whole).
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from mpcheck.devices import device_loops
from mpcheck.devices.events import (
    EntryPointRun,
    IndexlessBesideFirstGpu,
    PlacedTwice,
    SplitBuiltAfterSetDevice,
    StagesPlacedOnCurrent,
)
from mpcheck.devices.names import dotted
from mpcheck.devices.program import MAX_DEPTH, ClassInfo, Part, Scope, State
from mpcheck.devices.unmoved import on_cpu, parts_moved_from_outside, reaches_parts_by_name
from mpcheck.devices.values import (
    CURRENT,
    UNPLACED,
    DictV,
    Obj,
    SeqV,
    Summarized,
    Val,
    is_moduleish,
    is_split_devs,
    one,
    placements,
    value_key,
)


class Instances(Part):
    def default_instance(self, cinfo: ClassInfo, at_import: State | None = None) -> Obj:
        """The instance a class's methods are checked on: built with no arguments, on the current
        device that a top-level set_device of the file selected (`at_import`, Interp), if any. Its
        __init__'s index-less placements then land there: in a class meant to be split (as it is
        built without that set_device), that is MP004's entry point of its own."""
        plain = self.instantiate(cinfo, [], {}, None, None)
        if at_import is None:
            return plain
        obj = self.instantiate(cinfo, [], {}, at_import, None)
        init = cinfo.method("__init__")
        placed = self.interp.init_placements.get(id(obj), ())
        if init is not None and placed and plain.split:
            self.interp.recorder.record(
                EntryPointRun(node=init.node, name=f"{cinfo.name}.__init__", builds_split=True, placements=placed)
            )
        return obj

    def instantiate(
        self, cinfo: ClassInfo, args: list[Val], kwargs: dict[str, Val], st: State | None, node: cst.CSTNode | None
    ) -> Obj:
        cur = st.cur if st else CURRENT
        # Built in a branch of a test the model cannot decide (`if __name__ == "__main__":`), an
        # index past the last GPU is not recorded (GpuCount.guarded): that build is no stand-in
        # for the one the class is checked on (default_instance).
        guarded = self.interp.gpus.guarding
        key = (
            tuple(value_key(a) for a in args),
            tuple(sorted((k, value_key(v)) for k, v in kwargs.items())),
            cur,
            guarded,
        )
        if key in cinfo.instances:
            obj = cinfo.instances[key]
            self._check_built_after_setdev(cinfo, obj, args, kwargs, st, node)
            return self._one_object(cinfo, obj, st)
        obj = Obj("module", None, label=cinfo.name, cls=cinfo, attrs={})
        cinfo.instances[key] = obj
        self._inherit_summarized(cinfo, obj)
        init = cinfo.method("__init__")
        scope = Scope(f"{cinfo.name}.__init__")
        if init is None and cinfo.generated_init:
            # `Cfg(head_device="cuda:1")` of a dataclass: its fields, in order, then by name, then the defaults
            # `field()` gives the others; then its `__post_init__` (devices derived from the fields).
            assert obj.attrs is not None  # an instance
            obj.attrs.update(zip(cinfo.fields, args))
            obj.attrs.update((k, v) for k, v in kwargs.items() if k in cinfo.fields)
            self._field_defaults(cinfo, obj)
            init = cinfo.method("__post_init__")
            scope = Scope(f"{cinfo.name}.__post_init__")
            args, kwargs = [], {}
        if init is not None and len(self.interp.stack) < MAX_DEPTH:
            env = dict(self.interp.globals)
            self.interp.calls.bind(init, env, obj, args, kwargs)
            ist = State(env, cur, st.setdev if st else None, "", obj, True, scope)
            start = len(self.interp.ident_names) + 1  # after binding: a default argument is shared
            sites = self.interp.recorder.sites
            sites.append(None)  # __init__'s facts are the class's own, whoever builds it (Fact.via)
            try:
                self.interp.stmts.run_body(init, ist)
            finally:
                sites.pop()
            assert obj.attrs is not None  # an instance
            obj.built_idents = (start, len(self.interp.ident_names) + 1)
        self._finish_instance(obj)
        if init is not None and cur == CURRENT and not (st and st.setdev):
            self._note_indexless_beside_first_gpu(obj)
        device_loops.check_instance(self.interp, obj, scope.device_loops)
        self.interp.init_placements[id(obj)] = tuple(scope.placements)
        if init is not None:
            self._record_own_setdev(init.node, obj, scope, st.setdev if st else None)
        self._check_built_after_setdev(cinfo, obj, args, kwargs, st, node)
        return self._one_object(cinfo, obj, st)

    def _field_defaults(self, cinfo: ClassInfo, obj: Obj) -> None:
        """The defaults a dataclass's `field()` gives the fields not passed: `field(default=x)`, and
        `field(default_factory=...)` of a lambda of no parameters (`lambda: [0, 1]`), `list` or `dict`. (A plain
        default, `lr: float = 1e-3`, is read off the class body where it is used: Expressions._class_attr.)"""
        assert obj.attrs is not None  # an instance
        exprs = self.interp.exprs
        for name in cinfo.fields:
            expr = cinfo.class_attr(name)
            if name in obj.attrs or not (isinstance(expr, cst.Call) and exprs.qname(expr.func) == "dataclasses.field"):
                continue
            given = {a.keyword.value: a.value for a in expr.args if a.keyword is not None}
            st = State.fresh(dict(self.interp.globals), "<class>")
            if "default" in given:
                obj.attrs[name] = exprs.ev(given["default"], st)
            factory = given.get("default_factory")
            if isinstance(factory, cst.Lambda) and not factory.params.params:
                obj.attrs[name] = exprs.ev(factory.body, st)
            elif isinstance(factory, cst.Name) and factory.value in ("list", "dict"):
                obj.attrs[name] = SeqV((), kind="list") if factory.value == "list" else DictV({})

    def _note_indexless_beside_first_gpu(self, obj: Obj) -> None:
        """Parts placed from settings of their own, one on the index-less 'cuda' (cuda:0, with no set_device)
        and a sibling on cuda:0 by name (events.IndexlessBesideFirstGpu)."""
        assert obj.attrs is not None  # an instance
        placed = [
            (attr, v, setting)
            for attr, v in obj.attrs.items()
            if isinstance(v, Obj) and (setting := _placed_from_setting(v))
        ]
        for attr, v, setting in placed:
            if v.devs != one(CURRENT):
                continue
            sibling = next(
                ((a, s) for a, w, s in placed if w.devs == one("cuda:0") and s != setting and a != attr), None
            )
            if sibling is not None:
                self.interp.recorder.record(
                    IndexlessBesideFirstGpu(
                        node=v.at, attr=attr, sibling=sibling[0], setting=setting, sibling_setting=sibling[1]
                    )
                )

    def _one_object(self, cinfo: ClassInfo, obj: Obj, st: State | None) -> Obj:
        """The instance one construction gives. Inside an __init__ (where stages are built and
        placed) each construction is an object of its own (Obj.ident), sharing the memoised
        interpretation of its __init__; elsewhere the memoised instance itself."""
        if st is None or not st.in_init:
            return obj
        return obj.with_(ident=self.interp.new_ident(cinfo.name))

    def _inherit_summarized(self, cinfo: ClassInfo, obj: Obj) -> None:
        """A base class from another checked file places its parts before our __init__ runs."""
        assert obj.attrs is not None  # an instance
        for b in cinfo.bases:
            base = self.interp.globals.get(b) if b and "." not in b else None
            if isinstance(base, Summarized) and base.kind == "class":
                for attr, dev in base.summary.get("split") or []:
                    obj.attrs.setdefault(attr, Obj("module", one(dev), origin=f"placed by {base.name}.__init__"))
                devs = base.summary.get("devs")
                if devs and len(devs) == 1 and not base.summary.get("split"):
                    obj.attrs.setdefault(f"<{base.name}>", Obj("module", one(devs[0]), origin=f"placed by {base.name}"))

    def _record_own_setdev(self, init: cst.CSTNode, obj: Obj, scope: Scope, outer: cst.CSTNode | None) -> None:
        """An __init__ that calls set_device itself and then places a stage index-lessly is an entry
        point of its own for MP004: its index-less placements after its own set_device, in a class
        that ends up split (one set_device before the build is SplitBuiltAfterSetDevice's business)."""
        own = tuple(p for p in scope.placements if p.setdev is not outer)
        if own:
            self.interp.recorder.record(
                EntryPointRun(node=init, name=scope.name, builds_split=bool(obj.split), placements=own)
            )
        on_current = tuple(
            p
            for p in scope.placements
            if p.setdev is outer
            and not (p.of_tensor or p.of_loss or p.under_device_context)
            and p.dev is not None
            and p.dev.startswith("cuda:")
            and p.dev != "cuda:0"
        )
        if on_current and obj.split:
            self.interp.recorder.record(StagesPlacedOnCurrent(node=init, placements=on_current))

    def _note_placed_twice(self, obj: Obj) -> None:
        """A submodule placed twice by __init__ while a sibling module is never placed (events.PlacedTwice)."""
        assert obj.attrs is not None  # an instance
        unplaced = tuple(
            a for a, v in obj.attrs.items() if isinstance(v, Obj) and v.kind == "module" and "never placed" in v.origin
        )
        if not unplaced:
            return
        for attr, v in obj.attrs.items():
            again = self.interp.placed_again.get(id(v))
            if again is None or again[0] is not v:
                continue
            _, first, first_dev, second = again
            self.interp.recorder.record(
                PlacedTwice(node=second, attr=attr, module=v, first=first, first_dev=first_dev, unplaced=unplaced)
            )

    def _check_built_after_setdev(
        self,
        cinfo: ClassInfo,
        obj: Obj,
        args: list[Val],
        kwargs: dict[str, Val],
        st: State | None,
        node: cst.CSTNode | None,
    ) -> None:
        where = [p.node for p in self.interp.init_placements.get(id(obj), ())]
        if st is None or st.setdev is None or not where or node is None:
            return
        # Built after set_device: would it be split with the default current device?
        plain = self.instantiate(cinfo, args, kwargs, None, None)
        if plain.split and obj.split != plain.split and obj.split != _on_first_gpu(plain.split):
            self.interp.recorder.record(
                SplitBuiltAfterSetDevice(
                    node=node, mode=st.mode, setdev=st.setdev, plain=plain, obj=obj, where=tuple(where)
                )
            )

    def finish_placed(self, obj: Obj, depth: int = 0) -> None:
        """Where the parts of a copy of an instance are once a method placed them (placing.py); first
        those of its parts that are instances of the file's classes, whose own parts it may have moved
        in place (`self.encoder.head.to(d)`)."""
        assert obj.attrs is not None  # an instance
        if depth < 4:
            for attr, v in list(obj.attrs.items()):
                if isinstance(v, Obj) and v.cls is not None and v.attrs is not None and v.kind == "module":
                    inner = v.with_(attrs=dict(v.attrs), split=None, devs=None)
                    self.finish_placed(inner, depth + 1)
                    if inner.split or inner.devs is not None:
                        obj.attrs[attr] = inner
        self._finish_instance(obj)

    def _finish_instance(self, obj: Obj) -> None:
        assert obj.attrs is not None  # an instance
        placed: list[tuple[str, str, Any]] = []
        refs = obj.cls.refs if obj.cls is not None else set()
        for attr, v in obj.attrs.items():
            if attr in refs:
                continue  # held by reference: another module's placement, not this one's
            for d, at in placements(v):
                placed.append((attr, d, at))
        devs = [d for _, d, _ in placed]
        split = bool(placed) and is_split_devs(devs)
        # A class that places parts on a given GPU by hand is not moved as a whole later:
        # what it leaves unplaced stays on the CPU. Any other class may be moved whole
        # (model.cuda()), so its CPU parameters, buffers and unplaced modules are of unknown
        # device; a plain tensor attribute (`self.table = torch.zeros(...)`, kind "tensor") is
        # not: Module.to() and .cuda() move parameters and buffers only.
        hand_placed = split or any(d.startswith("cuda:") and d != "cuda:0" for d in devs)
        if hand_placed and obj.cls is not None and reaches_parts_by_name(obj.cls):
            hand_placed = False  # a getattr loop over a map not known here may have placed the rest
        # A part that the file moves from outside its class (`block.norm.to("cuda:0")` in a script,
        # `self.block.norm.cuda(1)` in another class) may be placed after all: Module.to() works in place.
        moved_outside = parts_moved_from_outside(self.interp) if hand_placed else frozenset()
        for attr, v in list(obj.attrs.items()):
            if hand_placed and isinstance(v, (SeqV, DictV)) and attr not in moved_outside:
                obj.attrs[attr] = on_cpu(v)  # the unplaced layers of a stage `nn.Sequential(...)`
            elif isinstance(v, SeqV) and not v.module and v.items and attr not in parts_moved_from_outside(self.interp):
                # `self.blocks = [Block() for ...]`: a plain list is no submodule, so neither this class's
                # `.to()` nor any later move of the model reaches its unplaced layers: on the CPU.
                obj.attrs[attr] = on_cpu(v, plain=True)
            if not isinstance(v, Obj):
                continue
            if hand_placed and v.kind == "module" and v.devs is None and v.origin == UNPLACED:
                if attr not in moved_outside:
                    obj.attrs[attr] = on_cpu(v)
            elif not hand_placed and v.devs == one("cpu") and v.kind in ("module", "param", "buffer", "any"):
                obj.attrs[attr] = v.with_(devs=None)
                self.interp.cpu_as_built.setdefault(id(obj), {})[attr] = v
        self._note_placed_twice(obj)
        if split:
            obj.split = tuple(dict.fromkeys((attr, d) for attr, d, _ in placed))
            obj.devs = None
        elif placed and len(set(devs)) == 1 and all(placements(v) for v in obj.attrs.values() if is_moduleish(v)):
            obj.devs = one(devs[0])


def _on_first_gpu(split: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """`split` where the current device is cuda:0, as in a process that never changed it: a
    `set_device(0)` before the build lands the index-less stages where they would land anyway."""
    return tuple((attr, "cuda:0" if dev == CURRENT else dev) for attr, dev in split)


def _placed_from_setting(v: Obj) -> str | None:
    """`decoder_device` for a module placed by `.to(decoder_device)` (or `.to(cfg.decoder_device)`,
    `.cuda(gpu)`): the setting, as the code reads it; None for a literal or anything else."""
    if not (v.kind == "module" and isinstance(v.at, cst.Call)):
        return None
    call = v.at
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value in ("to", "cuda") and len(call.args) == 1):
        return None
    arg = call.args[0].value
    return dotted(arg) if isinstance(arg, (cst.Name, cst.Attribute)) else None
