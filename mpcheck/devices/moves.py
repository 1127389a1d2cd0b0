"""Moves: `.to()`, `.cuda()`, `.cpu()` of tensors, modules and split models.

A move of a tensor is an `events.Transfer` (and, with known ends, a step of
the activation's lineage: `events.Crossing`); a move of a split model is an
`events.Collapse`; an index-less `.cuda()` after set_device is noted in the
entry point's scope (`events.IndexlessPlacement`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from mpcheck.devices import memo, not_a_device
from mpcheck.devices import torchapi as T
from mpcheck.devices.events import (
    Collapse,
    Crossing,
    HostMadeMove,
    IndexlessPlacement,
    ModuleMovedInForward,
    OversizedMove,
    Transfer,
)
from mpcheck.devices.names import dotted
from mpcheck.devices.pre_hooks import POST_HOOKS_KEY, PRE_HOOKS_KEY
from mpcheck.devices.program import ClassInfo, FuncInfo, Part, State
from mpcheck.devices.shared import note_move
from mpcheck.devices.unmoved import MODULE_BASES
from mpcheck.devices.values import (
    CURRENT,
    FAILED,
    HOOKS_KEY,
    MADE_ON_CPU_BY_DEFAULT,
    MOVED_SOMEWHERE,
    OFF_CHAIN,
    UNK,
    UNPLACED,
    Const,
    DeviceV,
    Devs,
    DictV,
    DtypeV,
    FuncRef,
    Obj,
    QName,
    SeqV,
    SymV,
    Val,
    as_device,
    conflict,
    failed,
    is_module,
    is_splitish,
    join,
    made_by,
    one,
    placements,
    show,
    single,
    with_part_replaced,
)
from mpcheck.devices.walk import assigned, target_names, walk

_DEVICE_WORDS = ("device", "dev", "gpu", "cuda", "rank")
# Kinds of value that are certainly tensors (not a module, not a value of unknown kind).
_TENSOR_KINDS = frozenset(("tensor", "param", "buffer", "scalar"))

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.interp import Interp


class Moves(Part):
    def __init__(self, interp: Interp) -> None:
        super().__init__(interp)
        # class (by id) -> method -> what it assigns on self
        self._rebound_by_class: dict[int, dict[cst.FunctionDef, set[str]]] = {}
        self._call_sites: dict[int, int] = {}  # a call of an unknown callable (by node id) -> its stage ident

    def indexless(self, node: cst.CSTNode, st: State, *, of_tensor: bool = False, of_loss: bool = False) -> None:
        """An index-less `.cuda()` / 'cuda' while set_device or `with torch.cuda.device` is in effect;
        `of_tensor`: it places a tensor (made or moved), not a module; `of_loss`: a loss criterion."""
        if st.setdev is None:
            return
        # Inside `with torch.cuda.device(k)` an index-less placement says "k" on purpose;
        # set_device() leaks into everything after it.
        st.scope.placements.append(
            IndexlessPlacement(
                node=node,
                setdev=st.setdev,
                dev=st.cur,
                under_device_context=id(st.setdev) in self.interp.with_devices,
                of_tensor=of_tensor,
                of_loss=of_loss,
            )
        )

    def note_indexless_arg(self, v: Val, node: cst.CSTNode, st: State, *, of_tensor: bool = False) -> None:
        if isinstance(v, (Const, DeviceV)) and as_device(v, ints_are_cuda=False) == one(CURRENT):
            self.indexless(node, st, of_tensor=of_tensor)

    def move_target(
        self,
        meth: str,
        args: list[Val],
        kwargs: dict[str, Val],
        node: cst.Call,
        st: State,
        *,
        of_tensor: bool = False,
        of_loss: bool = False,
    ) -> tuple[Devs, bool | None]:
        """(devs, is_device_move) for .to/.cuda/.cpu; is_device_move None when unclear."""
        if meth == "cpu":
            return one("cpu"), True
        if meth == "cuda":
            a = args[0] if args else kwargs.get("device")
            if a is None or (isinstance(a, Const) and a.value is None):
                self.indexless(node, st, of_tensor=of_tensor, of_loss=of_loss)
                return st.resolve_current(one(CURRENT)), True
            devs = as_device(a)
            if isinstance(a, SymV):
                self.interp.cuda_symbols.add(a.name)
            if devs is None and isinstance(a, SymV):
                devs = one(f"sym:{a.name}")
            return devs, True
        # .to(...)
        a = args[0] if args else kwargs.get("device", kwargs.get("other"))
        if a is None:
            return None, False  # .to(dtype=...), .to(memory_format=...)
        if isinstance(a, DtypeV) or (isinstance(a, QName) and T.is_dtype_name(a.q)):
            return None, False
        if isinstance(a, SymV) and "dtype" in a.name.rsplit(".", 1)[-1].lower():
            return None, False  # `.to(weight_dtype)`, `.to(self.dtype)`: a cast, not a move
        if isinstance(a, Obj) and a.kind != "module":
            return a.devs, True
        devs = as_device(a)
        if devs is not None:
            if devs == one(CURRENT):
                self.indexless(node, st, of_tensor=of_tensor, of_loss=of_loss)
            return st.resolve_current(devs), True
        if isinstance(a, DeviceV):
            return None, True
        first = node.args[0].value if node.args else None
        text = (dotted(first) or "") if first is not None else ""
        if text and any(w in text.rsplit(".", 1)[-1].lower() for w in _DEVICE_WORDS):
            return (one(f"sym:{text}") if isinstance(a, SymV) else None), True
        return None, None

    def move(
        self,
        recv: Val,
        meth: str,
        args: list[Val],
        kwargs: dict[str, Val],
        node: cst.Call,
        st: State,
        recv_expr: cst.BaseExpression | None = None,
    ) -> Val:
        """`recv.meth(*args, **kwargs)` at `node`; `recv_expr`: the expression that names `recv`, when it is
        not the receiver of `node` (a module moved tensor by tensor: devices/data_moves.py)."""
        if meth != "cpu":
            given = args[0] if args else kwargs.get("device")
            if not_a_device.record(self.interp, given, not_a_device.written(node, 0), node, st.mode):
                return FAILED  # `.to(torch.cuda.device(0))`, `.to("gpu")`: torch raises here
        of_tensor = isinstance(recv, Obj) and recv.kind in _TENSOR_KINDS
        of_loss = isinstance(recv, Obj) and recv.kind == "loss"
        devs, is_device = self.move_target(meth, args, kwargs, node, st, of_tensor=of_tensor, of_loss=of_loss)
        target = args[0] if args else kwargs.get("device")
        if is_device and not isinstance(target, DeviceV):  # a torch.device(...) was checked where it was made
            if self.interp.gpus.check_device(devs, node) and isinstance(recv, Obj) and recv.kind in _TENSOR_KINDS:
                return FAILED  # CUDA stops at this move (MP009): what would follow it is not judged
        if not is_device:
            if is_device is False:
                return recv
            if not isinstance(recv, Obj) or recv.kind != "module":
                return UNK
            if recv.origin == UNPLACED or (recv.cls is not None and not recv.origin):
                # Moved somewhere not known here (`.to(args.device)`): no longer "built without a device",
                # so never "never placed" (unmoved.py; an instance of the file's class: its parts neither);
                # Module.to() works in place, hence the in-place edit.
                recv.origin = MOVED_SOMEWHERE.format(meth=meth)
                recv.at = node
            return recv
        if recv_expr is None:
            recv_expr = node.func.value if isinstance(node.func, cst.Attribute) else None
        if st.in_init and recv is st.self_obj and isinstance(recv, Obj) and recv.attrs is not None:
            # self.to(device) in __init__: everything placed so far goes there.
            for attr, v in list(recv.attrs.items()):
                # (Not a plain list of modules: Module.to() moves registered submodules only.)
                if (isinstance(v, SeqV) and v.module) or (
                    isinstance(v, Obj) and v.kind in ("module", "any", "param", "buffer", "tensor")
                ):
                    part = cst.Attribute(recv_expr, cst.Name(attr)) if recv_expr is not None else None
                    recv.attrs[attr] = (
                        # (moved as `self.<attr>`: the container, not `self`, is what that move rebinds)
                        self.move(v, meth, args, kwargs, node, st, part)
                        if isinstance(v, SeqV)
                        else (
                            v.with_(
                                devs=devs,
                                origin=f"moved with the whole module by self.{meth}()",
                                at=node,
                                made_by=made_by(v),
                            )
                            if v.kind != "passthrough"
                            else v
                        )
                    )
            return recv
        if isinstance(recv, Obj) and recv.kind == "module":
            self.interp.gpus.on_module_placed(devs)
        if st.in_init:
            note_move(self.interp, recv, devs, node, st)
        elif recv_expr is not None and _self_part(recv_expr) and is_module(recv) and self.in_forward():
            self.interp.recorder.record(
                ModuleMovedInForward(node=node, mode=st.mode, devs=devs, owner=recv_expr), key=devs
            )
        if (
            is_splitish(recv)
            and not (isinstance(recv, Obj) and (recv.extra or {}).get("deep_copy"))
            and not _placed_whole_here(recv, node)
        ):
            st.scope.split_seen = True
            # .cpu() frees the GPUs on purpose (saving, deparallelize); it crams nothing. Under a test of
            # whether the model is split (Statements.under_split_test) the move is what the test decided.
            if devs != one("cpu") and not self.interp.stmts.under_split_test(st):
                self.interp.recorder.record(
                    Collapse(node=node, mode=st.mode, module=recv, devs=devs, meth=meth, owner=recv_expr)
                )
            # What its forward does now (it may still move activations to the devices the
            # split had) is not known: calling it checks nothing and gives an unknown value.
            # The one bug is MP007's.
            res = Obj(
                "module",
                devs,
                label=getattr(recv, "label", ""),
                origin=f"moved whole by .{meth}()",
                at=node,
                opaque=True,
                extra={"collapsed": True},
            )
            self.rebind(recv_expr, res, st)
            return res
        where = show(single(devs)) if single(devs) else "a device"
        if isinstance(recv, SeqV) and recv.module:
            # Each item is moved as `<container>[k]`: an item's move rebinds no name (the container is rebound
            # below), where the call's own receiver (`self` of `self.to(d)`) would be taken for the item's name.
            moved = [
                self.move(i, meth, args, kwargs, node, st, _item_of(recv_expr, k))
                if isinstance(i, (Obj, SeqV))
                else _placed_any(devs, where, node)
                for k, i in enumerate(recv.items or ())
            ]
            elem = (
                self.move(recv.elem, meth, args, kwargs, node, st, _item_of(recv_expr, 0))
                if recv.items is None and isinstance(recv.elem, (Obj, SeqV))
                else _placed_any(devs, where, node)
            )
            seq = SeqV(
                tuple(moved) if recv.items is not None else None,
                elem=elem,
                kind=recv.kind,
                module=True,
                hooks=recv.hooks,
            )
            self.rebind(recv_expr, seq, st)
            self.rebind_holders(recv, seq, st)
            return seq
        if isinstance(recv, DictV) and recv.module:
            # An nn.ModuleDict moves its entries (`self.parts["stem"].to(dev)`, a ModuleDict inside one).
            entries = {
                k: self.move(v, meth, args, kwargs, node, st, _item_of(recv_expr, k))
                if isinstance(v, (Obj, SeqV, DictV))
                else v
                for k, v in recv.items.items()
            }
            table = DictV(entries, module=True)
            self.rebind(recv_expr, table, st)
            self.rebind_holders(recv, table, st)
            return table
        if isinstance(recv, Obj) and recv.kind in ("module", "passthrough", "loss"):
            if recv.kind == "loss" and recv.extra:
                # `nn.CrossEntropyLoss(weight=w).to(d)`: its weight is a buffer, moved with it.
                origin = f"moved to {where} with its loss by .{meth}()"
                moved_w = {
                    k: w.with_(devs=devs, origin=origin, at=node, made_by=made_by(w)) if isinstance(w, Obj) else w
                    for k, w in recv.extra.items()
                }
                moved_loss = recv.with_(extra=moved_w)
                # Module.to() works in place: `criterion.to("cuda:1")` on a line of its own moves it too.
                self.rebind(recv_expr, moved_loss, st)
                return moved_loss
            if recv.kind in ("passthrough", "loss"):
                return recv
            if st.in_init and recv.cls is None and recv.attrs is None:
                # Module.to() works in place: `for layer in self.layers: layer.to(dev)` places
                # the items of the container too (only while __init__ builds them).
                if recv.origin.startswith("moved to") and single(recv.devs) and single(devs):
                    # Placed again by a statement of __init__: a copy-paste slip often hides here.
                    self.interp.placed_again[id(recv)] = (recv, recv.at, single(recv.devs), node)
                origin = f"moved to {where} by .{meth}()"
                summarized = _moved_summarized(recv, devs, origin, node)
                if summarized is not None:
                    # A class of another file: where its forward needs its input follows the move too
                    # (its summary's "in" is where it was built, e.g. a CPU table of a part).
                    recv.in_devs, recv.out_devs = summarized.in_devs, summarized.out_devs
                    recv.split, recv.extra = summarized.split, summarized.extra
                recv.devs, recv.origin, recv.at = devs, origin, node
                return recv
            res = (
                moved_instance(recv, devs, f"moved to {where} by .{meth}()", node)
                or _moved_summarized(recv, devs, f"moved to {where} by .{meth}()", node)
                or Obj(
                    "module",
                    devs,
                    label=recv.label,
                    origin=f"moved to {where} by .{meth}()",
                    at=node,
                    opaque=recv.opaque or recv.cls is not None,
                    nn_class=recv.nn_class,  # an LSTM moved is still one (its state must follow it)
                    ident=recv.ident,  # the same object, moved in place
                )
            )
            self.rebind(recv_expr, res, st)
            self.rebind_holders(recv, res, st)
            return res
        if isinstance(recv, Obj):
            self._note_host_made(recv, devs, node, st)
            lineage, hop = self.lineage_step(recv, devs, node)
            reads_attribute = self._reads_unchanging_attribute(recv, devs, st, node)
            reads_global = not reads_attribute and self._reads_global_constant(recv, st, node)
            again_of = _copied_before(recv, devs, node, st)
            # Enlarged before its move (MP016). A constant's copy on every call is MP011's too: both fixes
            # agree (move its data once, enlarge it there). Not ids or a mask repeated per beam or per sample:
            # a batch-by-sequence tensor, whose copy costs the link's latency at any size; the measured cost
            # is an activation's or a bias'.
            if (
                recv.enlarged_at is not None
                and devs is not None
                and devs != recv.devs
                and not recv.index_like
                and self._enlarged_only_to_move(recv, recv_expr, node)
            ):
                self.interp.recorder.record(
                    OversizedMove(
                        node=node,
                        mode=st.mode,
                        src=recv.devs,
                        dst=devs,
                        enlarged=recv.enlarged_at,
                        constant=recv.invariant,
                    ),
                    key=(recv.devs, devs),
                )
            self.interp.recorder.record(
                Transfer(
                    node=node,
                    mode=st.mode,
                    # As it is now: a later use marks the value worked in place (values.used), which must
                    # not hide that nothing used it before this transfer.
                    value=recv if recv.worked else recv.with_(),
                    devs=devs,
                    reads_unchanging_attribute=reads_attribute,
                    reads_global_constant=reads_global,
                    bound_outside_loop=self._bound_outside_loop(recv, node),
                    target_fixed_in_loop=self._target_fixed_in_loop(node, devs),
                    host_constant_bytes=self.interp.host_constants.get(id(recv.at), 0)
                    if recv.invariant and recv.devs == one("cpu")
                    else 0,
                    again_of=again_of,
                    host_work_of=_host_work_of(recv, devs),
                    rows_of=recv.row_of,
                ),
                # A table of self moved to its input's device (`self.pe.to(x.device)`): the method's own
                # run (x unknown) comes first and must not hide the run a caller makes with x on a known
                # GPU, so one fact per pair of ends. Other moves keep the first run's (an activation
                # fanned out to experts in a loop is judged as its own forward sees it), except a move back
                # to a GPU of a value that came idle from there: a hop helper's first run (`to_enc(x)`, x
                # from the caller) must not hide the round trip of a later call (`to_enc(h)`, h just moved
                # away). Back to the host, the first run's fact stays: the helpers this opens up are stage
                # hops, and a host copy made of a helper's GPU result by a later caller is more often a side
                # copy (numpy, a check) of a tensor that goes on being used on the GPU.
                # A second copy of one value (again_of) is kept from whichever run makes it: a stage of a
                # Sequential on another GPU than the first one's.
                # A module's constant: one fact per destination, so that a helper that takes it to each device of
                # a loop once (MP011 asks for one destination) shows two.
                key=(recv.devs, devs)
                if reads_attribute
                else ("global", devs)
                if reads_global
                else (
                    ("back", devs)
                    if _idle_back_to_gpu(recv, devs)
                    else ("through", devs)
                    if _idle_through_gpu(recv, devs, node)
                    else ("again", devs)
                    if again_of
                    else None
                ),
            )
            return recv.with_(
                kind="tensor"
                if recv.kind in ("param", "buffer") or (recv.kind == "scalar" and devs != one("cpu"))
                else recv.kind,
                devs=devs,
                origin=f"moved to {where}",
                at=node,
                moved_from=recv.devs,
                moved_at=node,
                worked=False,
                lineage=lineage,
                hop=hop,
                # A reported value moved to a known device is there whatever the fix of that report:
                # what it meets next is judged again (`self.b(h.cuda(1))` after a mismatch at `self.a`).
                extra=None if failed(recv) and devs is not None else recv.extra,
                # `.to()` to where it already is gives the same tensor back, still enlarged
                enlarged_at=recv.enlarged_at if devs is not None and devs == recv.devs else None,
                reducible_move=(node, recv.devs, recv.at) if plain_device_move(node) and devs != recv.devs else None,
            )
        if devs is None:
            return UNK
        return Obj("any", devs, origin=f"moved to {where}", at=node)

    def lineage_step(self, recv: Obj, devs: Devs, node: cst.CSTNode) -> tuple[int | None, int]:
        """Records a step of an activation's lineage (events.Crossing); returns the lineage and hop the moved value has."""
        src, dst = single(recv.devs), single(devs)
        if recv.lineage == OFF_CHAIN:
            return OFF_CHAIN, 0  # a loss or a metric moved (to be summed, logged): no crossing of the activations
        if recv.row_statistic:
            return recv.lineage, recv.hop  # a statistic per row (Obj.row_statistic): no stage's crossing either
        if src is None or dst is None or src == dst or src.startswith("sym:__") or self.interp.second_pass:
            return recv.lineage, recv.hop
        lineage = recv.lineage
        recorder = self.interp.recorder
        if not recv.worked and recv.moved_from is not None and single(recv.moved_from) == dst:
            # Straight back where it came from, idle: MP005's business, not a stage crossing.
            if lineage is not None:
                recorder.cross(Crossing(node=node, lineage=lineage, src=src, dst=dst, undoes=True))
            return lineage, recv.hop
        opens = lineage is None  # its first crossing opens the lineage
        if lineage is None:
            lineage = self.interp.new_lineage()
        hop = self.interp.next_hop(lineage)
        recorder.cross(
            Crossing(
                node=node,
                lineage=lineage,
                src=src,
                dst=dst,
                hop=hop,
                opens=opens,
                reported=opens and recorder.live,
                made_at=recv.hop if not opens else 0,
                made_by=id(recv.at) if recv.at is not None else 0,
            )
        )
        return lineage, hop

    def merge(self, a: Obj, b: Obj, node: cst.CSTNode) -> None:
        """Two values of one lineage meet on one device, one made before the other's last crossings:
        those crossings were a branch that came back (Crossing.merge)."""
        dev = single(a.devs)
        if a.lineage in (None, OFF_CHAIN) or a.lineage != b.lineage or a.hop == b.hop or self.interp.second_pass:
            return
        if dev is None or dev != single(b.devs):
            return
        assert a.lineage is not None
        older = a if a.hop < b.hop else b
        self.interp.recorder.cross(
            Crossing(
                node=node,
                lineage=a.lineage,
                src=dev,
                dst=dev,
                merge=older.hop,
                made_by=id(older.at) if older.at is not None else 0,
            )
        )

    def stage_call(self, mod: Obj, lead: Val, node: cst.CSTNode) -> Val:
        """Records a call of module object `mod` on the activation `lead` (a Crossing with `stage`);
        returns `lead` with the lineage it has from now on (a new one when it had none)."""
        # Only calls made outside any forward are stages (as at run time): inside one, the parts of
        # instances built by one memoised __init__ share their idents and would end passes early.
        # Outside an __init__ a module may have no Obj.ident; its attributes (an instance of a class of
        # the file) or where it was placed stand in for it. A key that merges two modules only ends a
        # pass early, which can hide an MP006, never make one.
        key: object = mod.ident
        if key is None:
            key = id(mod.attrs) if mod.attrs is not None else (id(mod.at), mod.devs) if mod.at is not None else None
        if key is None or not isinstance(lead, Obj) or lead.kind == "module" or self.interp.second_pass:
            return lead
        if self.in_forward():
            return lead
        if lead.lineage == OFF_CHAIN:
            return lead
        recorder = self.interp.recorder
        if lead.lineage is None:
            lineage = self.interp.new_lineage()
            recorder.cross(
                Crossing(node=node, lineage=lineage, src="", dst="", stage=key, opens=True, reported=recorder.live)
            )
            return lead.with_(lineage=lineage)
        recorder.cross(Crossing(node=node, lineage=lead.lineage, src="", dst="", stage=key))
        return lead

    def opaque_call(self, lead: Val, node: cst.CSTNode) -> Val:
        """An activation given to a callable the model does not know (a model passed in as an argument,
        a callback): a stage of unknown devices, keyed by its call site, so that calling it again on the
        same activation (`eps = model(z)` in a sampling loop) starts a new pass, as for a known module.
        Returns `lead` with the lineage it has from now on (stage_call)."""
        ident = self._call_sites.get(id(node))
        if ident is None:
            ident = self._call_sites[id(node)] = self.interp.new_ident("a callable the model does not know")
        return self.stage_call(Obj("module", None, ident=ident), lead, node)

    @staticmethod
    def _moved_expr(node: cst.Call | None) -> cst.BaseExpression | None:
        return node.func.value if node is not None and isinstance(node.func, cst.Attribute) else None

    def _reads_unchanging_attribute(self, recv: Obj, devs: Devs, st: State, node: cst.Call) -> bool:
        """The moved expression reads an unchanging attribute of self (self.causal[:n, :n], self.table.t()),
        in a method other than __init__: the same tensor is moved on every call."""
        expr = self._moved_expr(node)
        so = st.self_obj
        root = expr
        while isinstance(root, (cst.Subscript, cst.Call)):
            root = (
                root.value
                if isinstance(root, cst.Subscript)
                else (root.func.value if isinstance(root.func, cst.Attribute) else None)
            )
        if st.in_init or not self.in_forward() or not isinstance(so, Obj) or not so.attrs:
            return False
        if (
            isinstance(root, cst.Attribute)
            and root.attr.value in ("weight", "bias")
            and isinstance(root.value, cst.Attribute)
            and isinstance(root.value.value, cst.Name)
            and root.value.value.value == "self"
        ):
            # `self.items.weight.to(q.device)`: a torch.nn layer's own parameter, moved on every call. Not a
            # layer the class also calls (an embedding tied to a head on another GPU needs that copy).
            name = root.value.attr.value
            holder = so.attrs.get(name)
            return (
                isinstance(holder, Obj)
                and holder.kind == "module"
                and holder.cls is None
                and recv.kind == "param"
                and so.cls is not None
                and not _calls_self_attr(so.cls.node, name)
                and (conflict(recv.devs, devs) is None or name not in self.rebound_attributes(so))
            )
        if isinstance(root, cst.Attribute) and isinstance(root.value, cst.Name) and root.value.value == "self":
            attr = so.attrs.get(root.attr.value)
            return (
                isinstance(attr, Obj)
                and attr.invariant
                and (attr is recv or root is not expr)
                # (the scan of the class only where the move certainly copies: MP011's only question)
                and (conflict(recv.devs, devs) is None or root.attr.value not in self.rebound_attributes(so))
            )
        return False

    def _reads_global_constant(self, recv: Obj, st: State, node: cst.Call) -> bool:
        """The moved expression is a module-level constant the function only reads (`CLASS_WEIGHTS.to(dev)`),
        moved by a function that runs again and again: in a forward, or under a loop of any caller. The
        same tensor is copied on every pass."""
        expr = self._moved_expr(node)
        if not (isinstance(expr, cst.Name) and recv.invariant and self.interp.stack):
            return False
        if self.interp.globals.get(expr.value) is not recv or self.interp.stmts.bindings_here(expr.value):
            return False
        return self.in_forward() or self.interp.in_loop() or bool(self.interp.in_unknown_loop)

    def rebound_attributes(self, so: Obj, besides: cst.FunctionDef | None = None) -> frozenset[str]:
        """The attributes of self that a method other than __init__ assigns (`self.proj = ...` in a
        setter, a cache refreshed in forward): their value may change between calls. `besides`: leave
        out what that one method assigns (its first call, the one followed, still meets __init__'s state)."""
        cls = so.cls
        if cls is None:
            return frozenset()
        if besides is not None:
            return frozenset(
                name
                for c in [cls, *cls.local_bases]
                for node, names in self._own_rebound(c).items()
                if node is not besides
                for name in names
            )
        got = self.interp.rebound.get(id(cls))
        if got is None:
            got = self.interp.rebound[id(cls)] = frozenset(
                name for c in [cls, *cls.local_bases] for names in self._own_rebound(c).values() for name in names
            )
        return got

    def _own_rebound(self, cls: ClassInfo) -> dict[cst.FunctionDef, set[str]]:
        """What each method of `cls` itself, bar __init__, assigns on self (walked once per class:
        a class deep in a hierarchy is asked about by each subclass)."""
        got = self._rebound_by_class.get(id(cls))
        if got is None:
            got = self._rebound_by_class[id(cls)] = {}
            for m in cls.methods.values():
                if m.name != "__init__":
                    _self_targets(m.node, got.setdefault(m.node, set()))
        return got

    def _enlarged_only_to_move(self, recv: Obj, recv_expr: cst.BaseExpression | None, node: cst.Call) -> bool:
        """A resampled tensor (`F.interpolate(x, scale_factor=4)`, `F.unfold(h, 3)`) is moved for nothing but the move: the call
        itself is moved, or a name read nowhere else. One also used where it was made (a super-resolution
        model's upsampled input, kept for the residual on the last GPU) was computed for its own sake; moving
        its input instead would resample it twice. Expansions and one-hot encodings cost nothing to redo."""
        enlarging = recv.enlarged_at
        func = enlarging.func if isinstance(enlarging, cst.Call) else None
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if name not in T.ENLARGING_FUNCTIONS:
            return True
        if recv_expr is None:
            return False
        return recv_expr is enlarging or self.interp.exprs.read_only_here(recv_expr, node)

    def _note_host_made(self, recv: Obj, devs: Devs, node: cst.Call, st: State) -> None:
        """MP019: `torch.randn(x.shape).to(dev)`, the factory's call right under the move (a dtype cast between
        them, `torch.arange(n).long().cuda()`, changes nothing), with no device=, moved to a GPU, in a forward
        or a loop (once in an __init__ or a script's set-up costs nothing worth saying), shaped after a tensor
        (`x.shape`, `x.size(0)`, or a name the function set from one: an activation's size, where the copy
        costs; `torch.ones(64, 64)` may be a few bytes, and `torch.randn(8, 128).to(dev)` a script's stand-in
        data)."""
        dst = single(devs)
        if (
            st.in_init
            or dst is None
            or not dst.startswith("cuda")
            or recv.devs != one("cpu")
            or not recv.origin.startswith(MADE_ON_CPU_BY_DEFAULT.split("{", 1)[0])
        ):
            return  # (the cheap tests first: every move of the file comes here)
        fn = self.interp.stack[-1].node if self.interp.stack else None
        made = _factory_under_casts(node)
        derived = False
        if made is None or not _is_shape_factory(made):  # `torch.triu(torch.full((t, t), -inf), 1).to(dev)`
            made, derived = _factory_through_locals(node, fn)
        helper_param: str | None = None
        if made is None:
            # `make_anchors(h, w, stride).to(f.device)` in a forward: a helper of the file built it on the host from
            # factories given no device (its `device=None` left out), sized after the activation
            made, helper_param = self._built_by_helper(node, st)
            if made is None or not self.in_forward() or not _shaped_after_a_tensor(made, fn):
                return
        elif (
            not _is_shape_factory(made)
            or not (self.in_forward() or self.interp.in_unknown_loop or self.interp.in_loop())
            or not _shaped_after_a_tensor(made, fn, sized_by_caller=self.in_forward())
            # a seeded host generator is why it is made on the host: `device=` would refuse it
            or any(a.keyword is not None and a.keyword.value == "generator" for a in made.args)
        ):
            return
        shaped_after = next((t for a in made.args for n in walk(a.value) if (t := _size_of(n)) is not None), None)
        shaped = self.interp.exprs.ev(shaped_after, st) if isinstance(shaped_after, (cst.Name, cst.Attribute)) else None
        self.interp.recorder.record(
            HostMadeMove(
                node=node,
                mode=st.mode,
                factory=made,
                devs=devs,
                shaped_after=shaped_after,
                shaped_devs=shaped.devs if isinstance(shaped, Obj) else None,
                derived=derived,
                helper_device=helper_param,
            )
        )

    def _built_by_helper(self, node: cst.Call, st: State) -> tuple[cst.Call | None, str | None]:
        """(the call, its device parameter) when the moved value is what a function of the file returned, called
        right under the move, that takes a device parameter defaulting to None and was not given one: its
        factories then made the tensor on the host (the value's origin says so: Moves._note_host_made)."""
        if not isinstance(node.func, cst.Attribute) or not isinstance(node.func.value, cst.Call):
            return None, None
        call = node.func.value
        callee = self.interp.exprs.ev(call.func, st)
        info = callee.info if isinstance(callee, FuncRef) and isinstance(callee.info, FuncInfo) else None
        if info is None or info.node.decorators:
            return None, None
        params = [p for p in info.node.params.params if p.name.value != "self"]
        for i, p in enumerate(params):
            name = p.name.value
            if name not in ("device", "dev") or not (isinstance(p.default, cst.Name) and p.default.value == "None"):
                continue
            given = any(a.keyword is not None and a.keyword.value == name for a in call.args) or (
                sum(1 for a in call.args if a.keyword is None and a.star == "") > i
            )
            return (call, name) if not given else (None, None)
        return None, None

    def in_forward(self) -> bool:
        """Inside a module's forward, or a method it calls: the code that runs on every call
        of the model. A helper of another class, or a method run on its own, is not."""
        return any(f.name == "forward" and f.cls is not None for f in self.interp.stack)

    def _bound_outside_loop(self, recv: Obj, node: cst.Call) -> bool:
        """The moved name holds a value alive before an enclosing loop of this same function, not
        rebound in it. A loop in a caller does not count: a forward that moves its argument is the
        usual input hop, and which tensor a caller passes on each iteration is the caller's business."""
        expr = self._moved_expr(node)
        return isinstance(expr, cst.Name) and self.interp.bound_before_loop(recv, expr.value)

    def _target_fixed_in_loop(self, node: cst.Call, devs: Devs) -> bool:
        """The move's arguments (`"cuda:0"`, `device`) name nothing the enclosing loops of this function
        assign: every iteration moves to the same place (not `x.to(dev)` over `for dev in devices`). Or they
        read a value the loop rebinds, but the loop runs joined (a loader's batches, not unrolled per stage)
        and still gives one known device: `text_emb.to(img_emb.device)` with `img_emb` the model's output for
        each batch goes to the same GPU every time."""
        depth = len(self.interp.stack)
        loops = [(i, names) for i, (_, names, loop_depth) in enumerate(self.interp.loop_outer) if loop_depth == depth]
        if not loops:
            return False
        read = {n.value for arg in node.args for n in walk(arg.value) if isinstance(n, cst.Name)}
        if not any(read & names for _, names in loops):
            return True
        dev = single(devs)
        return (
            all(i in self.interp.joined_loops for i, names in loops if read & names)
            and dev is not None
            and not dev.startswith("sym:")
        )

    def rebind_holders(self, old: Val, new: Val, st: State) -> None:
        """Module.to() works in place: a part held by a ModuleList or ModuleDict and moved through a loop
        variable or a subscript (`for i, b in enumerate(self.blocks): b.to(...)`, `for b in model.h:
        b.to(dev)`) is moved where its holder holds it: self in an __init__, else the instances the
        function's names hold (each a new view, as `rebind` makes), and the ModuleLists and ModuleDicts they hold
        themselves (`blocks = nn.ModuleList(...)` in a script). Each construction in an __init__ is
        an object of its own (Instances._one_object), so the part moved is found by identity."""
        if st.in_init and isinstance(st.self_obj, Obj) and st.self_obj.attrs is not None:
            attrs = st.self_obj.attrs
            for attr, v in list(attrs.items()):
                if (swapped := _swapped(v, old, new)) is not None:
                    attrs[attr] = swapped
            return
        for name, holder in list(st.env.items()):
            if isinstance(holder, SeqV) or (isinstance(holder, DictV) and holder.module):
                # `blocks = nn.ModuleList(...)`, then `for i, b in enumerate(blocks): b.to(dev_of(i))`
                if (swapped := _swapped(holder, old, new)) is not None:
                    st.env[name] = swapped
                continue
            if not isinstance(holder, Obj) or holder is st.self_obj or holder.cls is None or holder.attrs is None:
                continue
            for attr, v in list(holder.attrs.items()):
                swapped = _swapped(v, old, new)
                if swapped is None:
                    continue
                if isinstance(v, SeqV) and not v.module:
                    # a plain list: no part of the instance's placement (Module.to() never sees it), only held
                    st.env[name] = holder = holder.with_(attrs={**holder.attrs, attr: swapped})
                elif (view := with_part_replaced(holder, attr, swapped)) is not None:
                    st.env[name] = holder = view

    def rebind(self, expr: cst.BaseExpression | None, val: Val, st: State) -> None:
        # nn.Module.to()/.cuda() move the module in place: the name now holds the moved module.
        if isinstance(expr, cst.Name):
            st.env[expr.value] = val
        elif isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            base = st.env.get(expr.value.value)
            if not isinstance(base, Obj) or base.attrs is None:
                return
            if base is st.self_obj:
                if st.in_init:
                    base.attrs[expr.attr.value] = val
                else:
                    st.env[f"{id(base)}.{expr.attr.value}"] = val
            elif (moved := with_part_replaced(base, expr.attr.value, val)) is not None:
                st.env[expr.value.value] = moved
        elif isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Attribute):
            # `self.encoder.head.to(d)`: the holder (`self.encoder`) now holds the moved part, and is
            # rebound in its turn, up to the name it hangs from.
            holder = self.interp.exprs.ev(expr.value, st)  # as the code reads it now
            if (moved := with_part_replaced(holder, expr.attr.value, val)) is not None:
                self.rebind(expr.value, moved, st)


class _Copies(Val):
    """The copies a path of one function call has made so far: (id of the value, the name it was moved
    through, the device) -> (the value, the first move). Kept in the environment (under `_COPIES`), so that
    branches copy it and a join forgets it (two different tables join to unknown): only a move that
    certainly came first on the same path counts."""

    __slots__ = ("made", "scope")

    def __init__(self, scope: object, made: dict[tuple[int, str, str], tuple[Obj, cst.CSTNode]]) -> None:
        self.scope = scope
        self.made = made


_COPIES = "<copies>"


def plain_device_move(node: cst.CSTNode) -> bool:
    """`x.to(d)`, `x.cuda()`, `x.to(device=d, non_blocking=True)`: a move that only changes the device. Not one
    that also converts (`.to(d, torch.float64)`): a reduction made before it would be made at the old precision."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)):
        return False
    if node.func.attr.value not in ("to", "cuda", "cpu"):
        return False
    plain = [a for a in node.args if not (a.keyword and a.keyword.value in ("non_blocking", "copy"))]
    return len(plain) <= 1 and all(a.keyword is None or a.keyword.value == "device" for a in plain)


def _host_work_of(recv: Obj, devs: Devs) -> cst.CSTNode | None:
    """The `.cpu()` that brought the GPU data `recv` was computed from, alone, on the host (`top =
    scores.cpu().topk(k)`; `top.indices.to(dev)`), when `recv` now goes to a GPU; else None."""
    dst = single(devs)
    if recv.reducible_move is None or not recv.made_from_move or recv.devs != one("cpu") or dst is None:
        return None
    away, src, _ = recv.reducible_move
    came = single(src)
    if not (dst.startswith("cuda") and came is not None and came.startswith("cuda")):
        return None
    return away if isinstance(away, cst.CSTNode) else None


def _copied_before(recv: Obj, devs: Devs, node: cst.Call, st: State) -> cst.CSTNode | None:
    """The earlier move of `recv`, unchanged, to the same device on this path of this call (`h = x.to(d)`,
    then `x.to(d)` again), else None. The same move on a loop's earlier pass counts too (`mask.to(dev)` for
    every layer on one GPU): MP011 tells the two apart."""
    dev = single(devs)
    if recv.kind not in _TENSOR_KINDS or dev is None or dev.startswith("sym:") or not conflict(recv.devs, devs):
        return None
    # The same name both times (`h`, `self.mask`): two calls of one helper may give the same value
    # here (a memoised run), though they are two tensors.
    moved = node.func.value if isinstance(node.func, cst.Attribute) else None
    named = dotted(moved) if moved is not None else None
    held = recv
    if named is None and moved is not None:
        # `fake.detach().to(d)` after `fake.to(d)`: the same data (a detached view, a clone) crosses again.
        base = _same_data_of(moved)
        bound = st.env.get(base) if base is not None else None
        if not isinstance(bound, Obj) or bound.kind not in _TENSOR_KINDS:
            return None
        held, named = bound, base
    if named is None:
        return None
    table = st.env.get(_COPIES)
    made = table.made if isinstance(table, _Copies) and table.scope is st.scope else {}
    key = (id(held), named, dev)
    first = made.get(key)
    if first is not None and first[0] is held:
        return first[1]
    st.env[_COPIES] = _Copies(st.scope, {**made, key: (held, node)})  # a new table: other paths keep theirs
    return None


# Tensor methods, called without arguments, whose result holds the receiver's data unchanged: moving it copies
# the same bytes as moving the receiver.
_SAME_DATA_METHODS = frozenset({"detach", "clone", "contiguous"})


def _same_data_of(expr: cst.BaseExpression) -> str | None:
    """The local name whose data `expr` holds unchanged (`fake.detach()`, `h.detach().clone()` -> the name)."""
    while (
        isinstance(expr, cst.Call)
        and not expr.args
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in _SAME_DATA_METHODS
    ):
        expr = expr.func.value
    return expr.value if isinstance(expr, cst.Name) else None


def _calls_self_attr(cls_node: cst.CSTNode, name: str) -> bool:
    """Does the class call `self.<name>(...)` anywhere?"""
    for n in walk(cls_node):
        if (
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value == name
            and isinstance(n.func.value, cst.Name)
            and n.func.value.value == "self"
        ):
            return True
    return False


def forget_copies(name: str, st: State) -> None:
    """`name` is bound anew: the copies made of what it held before (through `name` or `name.attr`) are no
    copies of what it holds now."""
    table = st.env.get(_COPIES)
    if isinstance(table, _Copies) and any(k[1].partition(".")[0] == name for k in table.made):
        kept = {k: v for k, v in table.made.items() if k[1].partition(".")[0] != name}
        st.env[_COPIES] = _Copies(table.scope, kept)


def _item_of(container: cst.BaseExpression | None, key: object) -> cst.BaseExpression | None:
    """`container[key]`, the expression of an item moved with its container (None: no container named)."""
    if container is None:
        return None
    index = cst.Integer(str(key)) if isinstance(key, int) and key >= 0 else cst.SimpleString(repr(str(key)))
    return cst.Subscript(container, [cst.SubscriptElement(cst.Index(index))])


def one_object(v: Val, old: Val) -> bool:
    """Is `v` the module `old`, or another view of the same object (Obj.ident: `nn.ModuleList([Block()] * n)` holds
    one block n times; moved through one item, every item is the moved block)?"""
    return v is old or (isinstance(v, Obj) and isinstance(old, Obj) and old.ident is not None and v.ident == old.ident)


def _swapped(v: Val, old: Val, new: Val, depth: int = 0) -> Val | None:
    """`v` itself when it is `old` (a part moved through another name: `model.get_submodule("head").to(d)`),
    or a ModuleList or ModuleDict (nested at most thrice) holding `new` where it held `old`; None where it does
    not hold `old`."""
    if one_object(v, old) and depth == 0 and isinstance(v, Obj) and v.kind == "module":
        return new
    if depth > 2:
        return None
    if isinstance(v, SeqV) and v.items is None and v.elem is not None and one_object(v.elem, old):
        # A list of unknown length whose items the model knows as one value (`list(Block() for _ in range(n))`):
        # some of them moved (a loop over it, an index, a slice held elsewhere too: `ModuleList(layers[:half])`),
        # which ones is not known. Where they are is then not known either: silent.
        return SeqV(None, elem=join(old, new), kind=v.kind, module=v.module, hooks=v.hooks)
    if isinstance(v, SeqV) and v.items is not None:
        # (a plain list too: it holds the objects, so the one moved is moved where the list holds it)
        places = sum(1 for i in v.items if one_object(i, old))
        if places > 1 and isinstance(old, Obj) and old.ident is None:
            # One value at several places but no object known to be one (instances of a class built alike outside
            # an __init__ share one memoised value): which of them moved is not known.
            new = join(old, new)
        items = [new if one_object(i, old) else _swapped(i, old, new, depth + 1) or i for i in v.items]
        changed = any(a is not b for a, b in zip(items, v.items))
        return SeqV(tuple(items), elem=v.elem, kind=v.kind, module=v.module, hooks=v.hooks) if changed else None
    if isinstance(v, DictV) and v.module:
        held = {k: new if one_object(i, old) else _swapped(i, old, new, depth + 1) or i for k, i in v.items.items()}
        changed = any(held[k] is not i for k, i in v.items.items())
        return DictV(held, module=True) if changed else None
    if isinstance(v, Obj) and v.kind == "module" and v.cls is not None and v.attrs is not None:
        # A part of the file's own class holding the one changed: `model.enc.blocks[0]`, reached by
        # `model.modules()` or `model.get_submodule("enc.blocks.0")`.
        whole: Val = v
        for attr, part in list(v.attrs.items()):
            swapped = new if one_object(part, old) else _swapped(part, old, new, depth + 1)
            if swapped is not None and (view := with_part_replaced(whole, attr, swapped)) is not None:
                whole = view
        return whole if whole is not v else None
    return None


def _self_targets(node: cst.CSTNode, out: set[str]) -> None:
    """Names `x` of the `self.x` (or `self.x[...]`) that `node` assigns, anywhere inside it, or changes in place
    (`self.bank.index_copy_(0, idx, keys)`, `self.x.data.mul_(m)`, `self.x[i].zero_()`: a queue refreshed by
    another method is not the same data on every call)."""
    for n in walk(node):
        targets = list(assigned(n))
        if (
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value.endswith("_")
            and not n.func.attr.value.startswith("_")
            and n.func.attr.value not in _NOT_WRITES
        ):
            recv = n.func.value
            if isinstance(recv, cst.Attribute) and recv.attr.value == "data":
                recv = recv.value
            targets.append(recv)
        for t in targets:
            while isinstance(t, cst.Subscript):
                t = t.value
            if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                out.add(t.attr.value)


# In-place-named methods that change no data: what they flag or share stays the same values.
_NOT_WRITES = frozenset({"requires_grad_", "share_memory_", "retain_grad_", "pin_memory_"})


def _idle_back_to_gpu(v: Obj, devs: Devs) -> bool:
    """`v`, moved from a GPU and not used since, goes back to that GPU (devs)."""
    back = single(devs)
    return (
        v.moved_at is not None
        and not v.worked
        and v.moved_from == devs
        and back is not None
        and back.startswith("cuda")
    )


def _self_part(expr: cst.BaseExpression | None) -> bool:
    """`self.cond`, `self.blocks[0]`: a part of the instance whose method runs."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            return True
        expr = expr.value
    return False


def _idle_through_gpu(v: Obj, devs: Devs, node: cst.CSTNode) -> bool:
    """`v`, moved to a GPU by this same line a pass earlier and not used there, goes on to another device
    (MP005's detour through a GPU)."""
    there, dst = single(v.devs), single(devs)
    return (
        v.moved_at is node
        and not v.worked
        and there is not None
        and there.startswith("cuda:")
        and dst is not None
        and dst != there
        and v.moved_from != devs
    )


def _placed_any(devs: Devs, where: str, node: cst.CSTNode) -> Val:
    return Obj("any", devs, origin=f"moved to {where}", at=node) if devs is not None else UNK


def _factory_through_locals(move: cst.Call, fn: cst.FunctionDef | None) -> tuple[cst.Call | None, bool]:
    """The torch factory call the moved value is computed from alone, through the function's locals bound once
    and read once (on the way to the move), and steps that take nothing else but numbers: `ids_keep =
    ids_shuffle[:, :n]` with `ids_shuffle = torch.argsort(noise, dim=1)` and `noise = torch.rand(N, L)` (MAE's
    masking, drawn on the host every step); and whether a step computed something from it on the way."""
    if fn is None or not isinstance(move.func, cst.Attribute):
        return None, False
    bound: dict[str, list[cst.BaseExpression]] = {}
    targets: set[int] = set()
    for n in walk(fn.body):
        for t in assigned(n):
            if isinstance(t, cst.Name):
                targets.add(id(t))
                value = n.value if isinstance(n, cst.Assign) and len(n.targets) == 1 else None
                bound.setdefault(t.value, []).append(value)  # type: ignore[arg-type]
    reads: dict[str, int] = {}
    for n in walk(fn.body):
        if isinstance(n, cst.Name) and id(n) not in targets:
            reads[n.value] = reads.get(n.value, 0) + 1
    expr: cst.BaseExpression = move.func.value
    derived = False
    for _ in range(6):
        if isinstance(expr, cst.Name):
            values = bound.get(expr.value, [])
            if len(values) != 1 or values[0] is None or reads.get(expr.value, 0) != 1:
                return None, False
            expr = values[0]
        elif isinstance(expr, cst.Subscript) and all(_numbers_only(el.slice) for el in expr.slice):
            expr, derived = expr.value, True
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            func, args = expr.func, expr.args
            name = dotted(func) or ""
            if name.startswith("torch.") and name.rsplit(".", 1)[-1] in T.SHAPE_FACTORIES:
                return expr, derived
            if name.startswith("torch.") and args and _literal_args(args[1:]):
                expr, derived = args[0].value, True  # `torch.argsort(noise, dim=1)`
            elif not name.startswith("torch.") and _literal_args(args):
                expr = func.value  # `noise.argsort(1)`, `.long()`
                derived = derived or func.attr.value not in T.DTYPE_METHODS
            else:
                return None, False
        else:
            return None, False
    return None, False


def _numbers_only(sl: cst.BaseSlice) -> bool:
    """A subscript's element that picks no tensor: a slice (`:n`), an integer, `None`, `...`."""
    if isinstance(sl, cst.Slice):
        return True
    value = sl.value if isinstance(sl, cst.Index) else None
    return isinstance(value, (cst.Integer, cst.Ellipsis)) or (isinstance(value, cst.Name) and value.value == "None")


def _literal_args(args: Sequence[cst.Arg]) -> bool:
    """Arguments that are written-out numbers, strings or booleans (`dim=1`, `descending=True`)."""
    return all(
        isinstance(a.value, (cst.Integer, cst.Float, cst.SimpleString))
        or (isinstance(a.value, cst.Name) and a.value.value in ("True", "False", "None"))
        for a in args
    )


def _is_shape_factory(call: cst.Call) -> bool:
    """`torch.zeros(...)`, `torch.randn(...)`: a factory that makes a tensor from a shape alone."""
    return (dotted(call.func) or "").rsplit(".", 1)[-1] in T.SHAPE_FACTORIES


def _factory_under_casts(move: cst.Call) -> cst.Call | None:
    """The call the move `move` is made on, under dtype casts (`.long()`, `.float()`): `torch.zeros(n)` in
    `torch.zeros(n).byte().cuda()`."""
    if not isinstance(move.func, cst.Attribute):
        return None
    made = move.func.value
    while (
        isinstance(made, cst.Call)
        and isinstance(made.func, cst.Attribute)
        and made.func.attr.value in T.DTYPE_METHODS
        and not made.args
    ):
        made = made.func.value
    return made if isinstance(made, cst.Call) else None


def _shaped_after_a_tensor(call: cst.Call, fn: cst.FunctionDef | None, *, sized_by_caller: bool = False) -> bool:
    """A factory call whose size names a tensor's: `x.shape`, `x.size(0)` among its arguments (`size=` too),
    or a name that the function `fn` sets from one (`n = x.size(0)`, `b, t = x.shape[:2]`). With
    `sized_by_caller` (a helper a forward calls, `causal_mask(t, x.device)`), a parameter of `fn` too: the
    forward passes it an activation's size, and the helper builds its tensor on every call (not one that
    caches what it returns, `@lru_cache`)."""
    sized: frozenset[str] | None = None
    for a in call.args:
        if a.keyword is not None and a.keyword.value != "size":
            continue
        for n in walk(a.value):
            if _names_a_size(n):
                return True
            if isinstance(n, cst.Name) and fn is not None:
                if sized is None:
                    sized = _names_set_from_sizes(fn)
                    if sized_by_caller and fn.name.value != "forward" and not _caches_its_result(fn):
                        sized |= {p.name.value for p in fn.params.params if p.name.value != "self"}
                if n.value in sized:
                    return True
    return False


def _caches_its_result(fn: cst.FunctionDef) -> bool:
    """`@functools.lru_cache`, `@cache`, `@cached_property`: one call per set of arguments builds anything."""
    return any(
        "cache" in (dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "")
        for d in fn.decorators
    )


def _size_of(n: cst.CSTNode) -> cst.BaseExpression | None:
    """`x` when `n` is `x.shape` or `x.size(...)`, else None."""
    if isinstance(n, cst.Attribute) and n.attr.value == "shape":
        return n.value
    if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "size":
        return n.func.value
    return None


def _names_a_size(n: cst.CSTNode) -> bool:
    return _size_of(n) is not None


def _names_set_from_sizes(fn: cst.FunctionDef) -> frozenset[str]:
    """The names `fn`'s own statements assign from a tensor's size (`n = x.size(0)`, `b, t, _ = x.shape`)."""
    got: frozenset[str] | None = memo.recall(_SIZED_NAMES, fn)
    if got is not None:
        return got
    names: set[str] = set()
    for stmt in walk(fn.body):
        if isinstance(stmt, cst.Assign) and any(_names_a_size(n) for n in walk(stmt.value)):
            for t in stmt.targets:
                names.update(target_names(t.target))
    return memo.keep(_SIZED_NAMES, fn, frozenset(names))


_SIZED_NAMES = memo.node_table()


def moved_instance(recv: Val, devs: Devs, origin: str, node: cst.CSTNode, depth: int = 0) -> Obj | None:
    """An instance of a class of this file after `Module.to()`: the same class, its
    parameters, buffers and submodules on `devs`, so that calling it still runs its
    forward (which may move its input, or return values on other devices). None
    when `recv` is not such an instance or the target is unknown."""
    if not isinstance(recv, Obj) or recv.cls is None or recv.attrs is None or devs is None or depth > 4:
        return None
    origin += _left_behind(recv, devs)
    # Whether plain tensor attributes stay is read off the class only for an instance that holds one.
    holds_tensor = any(isinstance(v, Obj) and v.kind == "tensor" for v in recv.attrs.values())
    registered = _registered_names(recv.cls) if holds_tensor else None
    return recv.with_(
        devs=devs,
        split=None,
        origin=origin,
        at=node,
        attrs={
            a: v
            if a in recv.cls.refs
            else _moved_part(v, devs, origin, node, depth, registered is not None and a not in registered)
            for a, v in recv.attrs.items()
        },
        in_devs=None,
        out_devs=None,
        # What its forward needs is found again (Calls.input_devs); hooks registered on it stay (Module.to()
        # works in place: `module.register_forward_pre_hook(move_inputs)` then `return module.to(device)`).
        extra={"moved_whole": True, **{k: v for k, v in (recv.extra or {}).items() if k in _HOOK_KEYS}},
    )


_HOOK_KEYS = frozenset({HOOKS_KEY, PRE_HOOKS_KEY, POST_HOOKS_KEY})


def _left_behind(recv: Obj, devs: Devs) -> str:
    """', while `base` (held by reference) stays on cuda:1': what an adapter's move leaves where it was."""
    assert recv.cls is not None and recv.attrs is not None  # an instance
    for name, v in recv.attrs.items():
        if name not in recv.cls.refs and isinstance(v, SeqV) and not v.module and v.items:
            name, v = f"{name}[0]", v.items[0]  # self.base = [base]: a plain list hides it from Module.to()
        elif name not in recv.cls.refs:
            continue
        there = single(v.devs) if isinstance(v, Obj) and v.kind in ("module", "any") else None
        if there is not None and conflict(one(there), devs):
            return f", while `{name}`, which it holds by reference, stays on {show(there)}"
    return ""


def _moved_part(v: Val, devs: Devs, origin: str, node: cst.CSTNode, depth: int, stays: bool = False) -> Val:
    """What `Module.to()` does to one attribute: parameters, buffers and submodules
    move; a plain tensor attribute is not registered, so it stays where it was when it
    certainly is one (`stays`: _registered_names), else it is taken as unknown."""
    if isinstance(v, Obj):
        inner = moved_instance(v, devs, origin, node, depth + 1) or _moved_summarized(v, devs, origin, node)
        if inner is not None:
            return inner
        if v.kind in ("module", "any", "param", "buffer"):
            return v.with_(devs=devs, split=None, origin=origin, at=node, made_by=made_by(v))
        if v.kind == "tensor":
            return v if stays and not v.opaque else v.with_(devs=None)
        return v
    if isinstance(v, SeqV) and v.module:
        items = tuple(_moved_part(i, devs, origin, node, depth) for i in v.items) if v.items is not None else None
        return SeqV(items, elem=_moved_part(v.elem, devs, origin, node, depth), kind=v.kind, module=True, hooks=v.hooks)
    if isinstance(v, DictV) and v.module:
        return DictV({k: _moved_part(i, devs, origin, node, depth) for k, i in v.items.items()}, module=True)
    return v


# Methods through which Module.to() reaches an instance's own tensors: a class (or a base of the
# file) that defines one may move its plain tensor attributes too.
def _placed_whole_here(recv: Val, node: cst.CSTNode) -> bool:
    """Is every weight of the container `recv` where this very move put it, on an earlier pass of its loop
    (`for dev in devices: self.head.to(dev)`)? Then its parts are on one device (the pass's, `sym:each:`),
    and moving it again is no collapse of a split."""
    if not isinstance(recv, SeqV | DictV):
        return False
    where = placements(recv)
    return bool(where) and all(at is node for _, at in where)


_APPLY_HOOKS = frozenset({"_apply", "to", "cuda", "cpu", "__setattr__", "__getattr__"})


def _registered_names(cls: ClassInfo) -> frozenset[str] | None:
    """The names an instance of `cls` registers as buffers or parameters (`register_buffer("pe",
    None)`: then `self.pe = pe` assigns the buffer, which Module.to() moves); every other attribute
    holding a tensor is plain, and Module.to() leaves it where it is. None where that is not certain:
    a name registered by a computed name (`register_buffer(name, t)`) or reached through
    `_buffers`/`_parameters`, a method Module.to() goes through overridden (`_apply`), or a base of
    another file (whose methods are not read) in the class's lineage."""
    registered: set[str] = set()
    for c in cls.lineage():
        local = {b.name for b in c.local_bases}
        if not c.bases or any(b not in MODULE_BASES and b not in local for b in c.bases):
            return None
        if _APPLY_HOOKS & set(c.methods):
            return None
        for n in walk(c.node):
            if isinstance(n, cst.Attribute) and n.attr.value in ("_buffers", "_parameters"):
                return None
            if not (isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)):
                continue
            if n.func.attr.value in ("register_buffer", "register_parameter"):
                first = n.args[0].value if n.args else None
                name = first.evaluated_value if isinstance(first, cst.SimpleString) else None
                if not isinstance(name, str):
                    return None
                registered.add(name)
    return frozenset(registered)


def _moved_summarized(recv: Obj, devs: Devs, origin: str, node: cst.CSTNode) -> Obj | None:
    """An instance of a class of another file after `Module.to()`: where its forward needs
    its input follows the move (nowhere in particular when the forward moves it itself)."""
    extra = recv.extra or {}
    if not extra.get("summarized") or devs is None:
        return None
    return recv.with_(
        devs=devs,
        split=None,
        origin=origin,
        at=node,
        in_devs=devs if recv.in_devs is not None or extra.get("in_moved") else None,
        out_devs=devs if (recv.out_devs is not None and recv.out_devs == recv.devs) or extra.get("out_moved") else None,
        # no longer as it was built: its methods' runs in its file (callers.py) would not see the move
        extra={**(recv.extra or {}), "moved": True},
    )
