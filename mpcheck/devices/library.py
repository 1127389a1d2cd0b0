"""What the device model knows of PyTorch's API (and of the libraries that split
models), for calls by name: one table, canonical name -> handler.

Lookup (`handler_for`): an exact name in `EXACT` first; else the one family in
`FAMILIES` whose test accepts the call. Families are mutually exclusive (each
test says which names it leaves to the others; tests/test_devices_layout.py checks no
two accept one call), so their order does not matter. An exact entry overrides
the family a name would belong to (torch.zeros is a factory, not a plain op).

To teach the model a torch API: add its name to `EXACT` (or a family) with a
handler, and a test in tests/test_devices.py. The name sets the handlers read
(factories, parameterless modules...) are in torchapi.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeGuard

import libcst as cst

from mpcheck.codes import RESAMPLE_MIN_FACTOR
from mpcheck.devices import (
    command_line,
    element_reads,
    foreach,
    ini_text,
    module_tree,
    not_a_device,
    optimizers,
    yaml_text,
)
from mpcheck.devices import torchapi as T
from mpcheck.devices.callers import note_call
from mpcheck.devices.events import (
    Collapse,
    DataParallelOffFirstId,
    DataParallelWrap,
    DdpDeviceIds,
    Fact,
    LossMismatch,
    Mismatch,
    ParallelPrimitive,
    PredictionsMovedToTargets,
    ShortZip,
)
from mpcheck.devices.gpucount import COUNT_FUNCTIONS
from mpcheck.devices.names import canonical, dotted
from mpcheck.devices.not_a_device import DeviceContextV
from mpcheck.devices.program import MAX_UNROLL, Part, State
from mpcheck.devices.values import (
    CURRENT,
    DATA_PARALLEL_OUTPUT,
    FAILED,
    LOADED,
    LOSS_OF,
    MADE_ON_CPU_BY_DEFAULT,
    OFF_CHAIN,
    UNK,
    UNPLACED,
    ClassRef,
    Const,
    DeviceV,
    Devs,
    DictV,
    DtypeV,
    FuncRef,
    Obj,
    ParamsOf,
    PartialV,
    QName,
    SeqV,
    Starred,
    SuperV,
    SymV,
    TupleType,
    Val,
    as_device,
    conflict,
    device_from_str,
    distinct_devices,
    failed,
    holds_split,
    is_module,
    is_moduleish,
    is_splitish,
    iter_elem,
    join,
    join_all,
    known_tensor,
    maybe_a_number,
    one,
    placements,
    show,
    single,
    spans_of,
    used,
    weight_on_gpu,
)
from mpcheck.devices.ways import path_off


class LibCall:
    """One call of a library function: its canonical name and evaluated arguments."""

    __slots__ = ("args", "exprs", "kwargs", "last", "node", "q", "st")

    def __init__(
        self, q: str, node: cst.Call, st: State, args: list[Val], kwargs: dict[str, Val], exprs: list[Any]
    ) -> None:
        self.q = q
        self.last = q.rsplit(".", 1)[-1]
        self.node = node
        self.st = st
        self.args = args
        self.kwargs = kwargs
        self.exprs = exprs  # the arguments' expressions (positional, then keyword)


Handler = Callable[["Library", LibCall], Val]


class Library(Part):
    def library_call(self, q: str, node: cst.Call, st: State, bound: PartialV | None = None) -> Val:
        """`bound`: the partial whose function this is, its arguments put before (and its keywords
        after) the call's own."""
        args, kwargs = self.interp.calls.ev_args(node, st)
        exprs = list(self.interp.arg_nodes)
        if bound is not None:
            extra = {k: v for k, v in bound.kwargs.items() if k not in kwargs}
            exprs = [None] * len(bound.args) + exprs + [None] * len(extra)
            args, kwargs = [*bound.args, *args], {**kwargs, **extra}
        c = LibCall(q, node, st, args, kwargs, exprs)
        handler = handler_for(q, c.last, kwargs)
        if handler is None:
            # Maybe a function of another project file (`utils.train_one_epoch(...)`): callers.py
            note_call(self.interp, q.rpartition(".")[0], c.last, args, kwargs, node)
            # A function the model does not know may compute on what it gets, in place too
            # (`dist.all_reduce(t)`, a library kernel): no idle round trip (MP005), as for any call.
            used(*args, *kwargs.values())
            return UNK
        return handler(self, c)

    def factory(self, q: str, args: list[Val], kwargs: dict[str, Val], node: cst.Call, st: State) -> Val:
        last = q.rsplit(".", 1)[-1]
        if last == "tensor" and args:
            element_reads.note_from_values(self.interp, args[0], node, st)  # MP020: torch.tensor(losses)
        if last in T.HOST_MEMORY_VIEWS and len(args) == 1 and not kwargs:
            a = args[0]
            if isinstance(a, Obj) and a.kind == "tensor" and a.devs == one("cpu"):
                return a  # `torch.from_numpy(t.cpu().numpy())`: the same memory, no copy, no work
        dv = kwargs.get("device")
        if isinstance(dv, Const) and dv.value is None:
            # `device=None`, given or a helper's default passed on (`def make_mask(n, device=None)`):
            # PyTorch's default, as if none were given.
            dv = None
        if dv is not None and not_a_device.record(self.interp, dv, not_a_device.written(node, None), node, st.mode):
            return FAILED  # torch.zeros(n, device=torch.cuda.device(0)): torch raises here
        if dv is not None:
            devs = as_device(dv)
            if devs is None and isinstance(dv, Obj):
                devs = dv.devs
            devs = st.resolve_current(devs)
            if not isinstance(dv, DeviceV):  # a torch.device(...) was checked where it was made
                self.interp.gpus.check_device(devs, node)
            self.interp.moves.note_indexless_arg(dv, node, st, of_tensor=True)
            origin = f"created by torch.{last}(device=...)"
        elif self.interp.default_device is not None:
            default = self.interp.default_device
            devs = st.resolve_current(one(default))
            origin = f"created by torch.{last}() without device=, so on the default device the file sets"
        elif self.interp.default_device_changed:
            return UNK
        else:
            devs = one("cpu")
            origin = MADE_ON_CPU_BY_DEFAULT.format(last)
        # (a draw in a function is new data on each call; one made at module level or while a module is built is
        # made once, a constant)
        once = st.in_init or not self.interp.stack or last not in T.RANDOM_FACTORIES
        const = (all(isinstance(a, (Const, SeqV)) for a in args) and once) or (
            # Host data turned into a tensor while a module is built (torch.from_numpy(table) in
            # __init__, or in a helper it calls): made once, the same on every call.
            st.in_init and last in T.HOST_DATA_FACTORIES and not any(isinstance(a, Obj) for a in args)
        )
        if const and devs == one("cpu") and not st.in_init and self.interp.moves.in_forward():
            size = _constant_bytes(last, args, kwargs)
            if size:
                self.interp.host_constants[id(node)] = size
        # `torch.tensor(2.0)`, `torch.zeros(())` (a step counter): no dimensions, maybe (a value of unknown rank
        # handed to torch.tensor), on any device; a 0-d CPU one ("scalar") mixes with CUDA tensors
        no_dims = (
            last in ("tensor", "as_tensor", "scalar_tensor") and bool(args) and not isinstance(args[0], SeqV)
        ) or (last in _SHAPED_FACTORIES and bool(args) and _empty_shape(args[0]))
        kind = "scalar" if no_dims and devs == one("cpu") else "tensor"
        # `torch.randn(shape, generator=g, device="cuda:1")` with `g` a CPU generator: torch raises
        self._check_generator(kwargs.get("generator"), devs, node, st, f"torch.{last}", len(args))
        ints = (
            last in T.INDEX_FACTORIES
            or (last == "arange" and bool(args) and all(isinstance(a, Const) and type(a.value) is int for a in args))
            or (last in ("tensor", "as_tensor") and _integer_data(node, args, kwargs))
        )
        return Obj(kind, devs, origin=origin, at=node, invariant=const, index_like=ints, may_be_0d=no_dims)

    def _check_generator(self, gen: Val | None, devs: Devs, node: cst.Call, st: State, q: str, at: int) -> None:
        """A `generator=` of the other device type than the tensor it draws for (torch checks the type only:
        a cuda:0 generator draws for cuda:1): MP001's, at the call."""
        if isinstance(gen, Obj) and gen.kind == "generator" and _other_type(gen.devs, devs):
            self.interp.exprs.check_operand(node, gen, devs, st, what=q, op=q, arg_index=at)

    def dispatched(self, q: str, args: list[Val], kwargs: dict[str, Val], node: cst.Call, st: State) -> Val:
        text, devs = _device_map(kwargs.get("device_map", args[1] if len(args) > 1 else UNK), _map_expr(node))
        if text:
            obj = Obj("module", None, label="", dispatched=text, origin=f"dispatched with {text}", at=node)
            if q.rsplit(".", 1)[-1] in T.DISPATCHERS and node.args and isinstance(node.args[0].value, cst.Name):
                st.env[node.args[0].value.value] = obj
            return obj
        if devs is not None:
            return Obj("module", devs, origin=f"loaded with device_map on {show(single(devs))}", at=node)
        return UNK

    def loss_direction(self, op: str, args: list[Val], exprs: list[Any], node: cst.CSTNode, st: State) -> None:
        """A class-dimension loss whose predictions (args[0]) were moved, idle since, from one GPU to
        the GPU of its targets (args[1]): the large tensor crossed where the small one could have."""
        if len(args) < 2 or not isinstance(args[0], Obj) or not isinstance(args[1], Obj):
            return
        pred, target = args[0], args[1]
        src, dst, there = single(pred.moved_from), single(pred.devs), single(target.devs)
        if pred.worked or pred.moved_at is None or src is None or dst is None or dst != there:
            return
        # (to the host too, in training: the labels of a host dataset, the loss and the start of backward on the CPU;
        # an evaluation's loss on the host, without grad, is a choice)
        to_host = dst == "cpu" and st.mode != "no_grad"
        if not (src.startswith("cuda") and (dst.startswith("cuda") or to_host) and conflict(one(src), one(dst))):
            return
        self.interp.recorder.record(
            PredictionsMovedToTargets(
                node=pred.moved_at,
                mode=st.mode,
                loss=node,
                src=src,
                dst=dst,
                op=op,
                targets_expr=exprs[1] if len(exprs) > 1 else None,
            )
        )

    def _off_one_way(
        self, first: tuple[Obj, Any], other: tuple[Obj, Any], q: str, node: cst.Call, st: State
    ) -> Mismatch | None:
        """Two tensor arguments of a torch function, one of them on another device on one way through an `if`
        before (`torch.cat([inp, h])` with `inp` teacher-forced: ways.py): the mismatch on that way, or None."""
        for (v, e), (o, oe) in ((other, first), (first, other)):
            way = path_off(v, o.devs, self.interp.stmts.open_tests)
            if way is not None:
                return Mismatch(
                    node=node,
                    mode=st.mode,
                    value=way.value,
                    target=o.devs,
                    expr=e,
                    what=o.label or (oe is not None and "") or "its other tensor argument",
                    what_expr=oe,
                    op=q,
                    other=o,
                    site="op",
                    path=way,
                )
        return None

    def tensor_op(
        self, q: str, args: list[Val], kwargs: dict[str, Val], node: cst.Call, st: State, exprs: list[Any] | None = None
    ) -> Val:
        """A torch function on tensors: its inputs must agree; its output follows them."""
        first = None  # (value, expression)
        flat: list[Any] = []
        # Items of a sequence passed by name (`torch.cat(parts)`), by their place in `flat`: (the name, index).
        named: dict[int, tuple[cst.BaseExpression, int]] = {}
        nodes = list(exprs or [])
        for i, a in enumerate(list(args) + [v for k, v in kwargs.items()]):
            e = nodes[i] if i < len(nodes) else None
            if i >= len(args) and list(kwargs)[i - len(args)] in ("out", "generator"):
                continue  # (a generator: checked below, by device type only)
            if isinstance(a, SeqV) and a.items is not None:
                elts = e.elements if isinstance(e, (cst.List, cst.Tuple)) and len(e.elements) == len(a.items) else None
                if elts is None and isinstance(e, (cst.Name, cst.Attribute)):
                    named.update((len(flat) + j, (e, j)) for j in range(len(a.items)))
                flat.extend((x, elts[j].value if elts else None) for j, x in enumerate(a.items))
            elif isinstance(a, SeqV) and a.spans is not None:
                flat.extend((x, e) for x in a.spans)  # a tensor from a parameter on each device of a split model
            elif isinstance(a, ParamsOf) and a.shape == "params" and (reps := a.per_device()):
                flat.extend((x, e) for x in reps)  # `parameters_to_vector(model.parameters())` of a split model
            elif isinstance(a, SeqV) and isinstance(a.elem, Obj):
                flat.append((a.elem, e))  # items of unknown number, all like this one (`torch.cat(outs)`)
            else:
                flat.append((a, e))
        if q.rsplit(".", 1)[-1] in T.CLASS_DIM_LOSSES:
            self.loss_direction(q, args, nodes[:2], node, st)  # before used(): was it moved idle?
        used(*(a for a, _ in flat))
        lead = next((a for a, _ in flat if isinstance(a, Obj) and a.kind == "tensor" and a.devs is not None), None)
        if lead is not None:  # `torch.multinomial(probs_on_gpu, n, generator=torch.Generator())`: torch raises
            self._check_generator(kwargs.get("generator"), lead.devs, node, st, q, len(args))
        if any(failed(a) for a, _ in flat):
            return FAILED
        loss = T.is_loss(q)
        host_targets = q.rsplit(".", 1)[-1] in T.HOST_TARGET_LOSSES
        known = [a for a, _ in flat if isinstance(a, Obj) and a.kind not in ("scalar", "module") and a.devs is not None]
        for a in known:
            for b in known:
                self.interp.exprs.probe_hit(a, b.devs, b)
        first_at = -1  # the place of `first` in `flat`
        for k, (a, e) in enumerate(flat):
            if not isinstance(a, Obj) or a.kind in ("scalar", "module", "passthrough", "loss") or maybe_a_number(a):
                continue
            if first is not None:
                self.interp.recorder.need(node, "op", first[0].devs)  # an unknown device too: then no fix
            if first is None or first[0].devs is None:
                if first is None or a.devs is not None:
                    first, first_at = (a, e), k
                continue
            if host_targets and a.devs == one("cpu"):
                continue  # F.ctc_loss(log_probs_on_gpu, targets_on_cpu, ...): as PyTorch wants them
            if not loss and not conflict(a.devs, first[0].devs):
                way = self._off_one_way(first, (a, named[k][0] if k in named else e), q, node, st)
                if way is not None:
                    self.interp.recorder.record(way, key="op")
                    return FAILED
            if conflict(a.devs, first[0].devs):
                if loss:
                    fact: Fact = LossMismatch.against_first(first, a, e, node=node, mode=st.mode, op=q)
                elif weight_on_gpu(a) and first[0].kind == "tensor":
                    # A weight passed in (`torch.cdist(flat, codebook)` with the codebook a parameter): the
                    # activation is the one to move, where the weights are.
                    fact = Mismatch(
                        node=node,
                        mode=st.mode,
                        value=first[0],
                        target=a.devs,
                        expr=first[1],
                        what=a.label or (e is not None and "") or "a weight",
                        what_expr=e,
                        op=q,
                        other=a,
                        site="op",
                    )
                else:
                    what = first[0].label or (first[1] is not None and "") or "its first tensor argument"
                    if first_at in named:
                        seq, j = named[first_at]
                        what = f"{dotted(seq)}[{j}]"
                    fact = Mismatch(
                        node=node,
                        mode=st.mode,
                        value=a,
                        target=first[0].devs,
                        expr=named[k][0] if k in named else e,
                        item=named[k][1] if k in named else None,
                        what=what,
                        what_expr=first[1],
                        op=q,
                        other=first[0],
                        site="op",
                    )
                self.interp.recorder.record(fact, key="op")
                return FAILED
        if first is None:
            return UNK
        inv = all(isinstance(a, Obj) and a.invariant or isinstance(a, (Const, DtypeV)) for a, _ in flat)
        f = first[0]
        off = T.leaves_chain(q, max(len(args) - 1, 0), kwargs)
        hop = f.hop
        for a, _ in flat:
            if isinstance(a, Obj) and a is not f:
                self.interp.moves.merge(f, a, node)  # `torch.cat([x, y_back])`, `torch.add(x, y_back)`
                hop = max(hop, a.hop) if a.lineage == f.lineage else hop
        lineage = OFF_CHAIN if off else f.lineage
        if loss:
            return Obj("tensor", f.devs, origin=LOSS_OF, at=node, lineage=lineage, hop=hop)
        host_work = _host_work_on_copies(flat)
        # one value of one host tensor (`torch.mean(e)`): a 0-dim CPU tensor, which mixes with tensors on any GPU
        whole = len(flat) == 1 and f.devs == one("cpu") and q.rsplit(".", 1)[-1] in T.FULL_REDUCTIONS
        out = Obj(
            "scalar" if whole and T.may_give_0d(q, max(len(args) - 1, 0), kwargs) else "tensor",
            f.devs,
            origin=f.origin,
            at=f.at,
            invariant=inv,
            lineage=lineage,
            hop=hop,
            may_be_0d=T.may_give_0d(q, max(len(args) - 1, 0), kwargs)
            or any(isinstance(a, Obj) and a.may_be_0d for a, _ in flat),
            reducible_move=host_work,
            made_from_move=host_work is not None,
            row_statistic=_of_row_statistics(q, args, kwargs, flat),
            # `torch.multinomial(probs, 1)`: sampled ids, as a comparison's mask or `argmax` are
            index_like=q.rsplit(".", 1)[-1] in T.INDEX_FUNCTIONS,
            enlarged_at=node if _one_hot_of_many_classes(q, args, kwargs) or _upsampled(q, args, kwargs) else None,
        )
        second = args[1] if len(args) > 1 else None
        if q.count(".") == 1 and T.gives_values_and_indices(
            q, isinstance(second, Const) and type(second.value) is int, kwargs
        ):
            # `values, idx = torch.topk(scores, k)`: the indices are ids where the values are
            return SeqV((out, out.with_(index_like=True, lineage=OFF_CHAIN)), kind="tuple")
        return out


# A one-hot encoding of ids over at least this many classes: one float32 row per id is num_classes / 2 times the
# id's int64 (num_classes / 4 in bfloat16), so from 8 classes on it is at least twice the data it encodes.
ONE_HOT_MIN_CLASSES = 8


def _one_hot_of_many_classes(q: str, args: list[Val], kwargs: dict[str, Val]) -> bool:
    """`F.one_hot(ids, 20)`: ids enlarged to a row of num_classes each, num_classes known and not small."""
    if q.rsplit(".", 1)[-1] != "one_hot":
        return False
    n = args[1] if len(args) > 1 else kwargs.get("num_classes")
    return isinstance(n, Const) and type(n.value) is int and n.value >= ONE_HOT_MIN_CLASSES


def _upsampled(q: str, args: list[Val], kwargs: dict[str, Val]) -> bool:
    """`F.interpolate(x, scale_factor=4)`, `F.unfold(h, 3)`: a tensor resampled to more elements, computed from
    it alone. Every scale factor (a resampler's) or kernel size (an im2col's, at stride 1) a known number of at
    least 1 and their product (over an image's two dimensions for one number) at least RESAMPLE_MIN_FACTOR (a
    `size=` or a stride the file does not spell out may shrink it)."""
    if not q.startswith("torch.nn.functional."):
        return False
    name = q.rsplit(".", 1)[-1]
    if name in T.RESAMPLERS:
        factor = args[2] if len(args) > 2 else kwargs.get("scale_factor")
    elif name == "unfold":
        stride = args[4] if len(args) > 4 else kwargs.get("stride", Const(1))
        if not (isinstance(stride, Const) and stride.value == 1):
            return False
        factor = args[1] if len(args) > 1 else kwargs.get("kernel_size")
    else:
        return False
    factors = list(factor.items) if isinstance(factor, SeqV) and factor.items else [factor]
    numbers = [f.value for f in factors if isinstance(f, Const) and type(f.value) in (int, float)]
    if len(numbers) != len(factors) or any(n < 1 for n in numbers):
        return False
    product = 1.0
    for n in numbers:
        product *= n if len(factors) > 1 else n * n  # (one number: a square, an image's two dimensions)
    return product >= RESAMPLE_MIN_FACTOR


def _of_row_statistics(q: str, args: list[Val], kwargs: dict[str, Val], flat: list[Any]) -> bool:
    """`torch.sum(e, 1)`, or `torch.maximum(m0, m1)` of statistics per row alone (Obj.row_statistic)."""
    second = args[1] if len(args) > 1 else None
    if T.reduces_along_a_dim(q, isinstance(second, Const) and type(second.value) is int, kwargs):
        return True
    tensors = [a for a, _ in flat if isinstance(a, Obj) and a.kind not in ("scalar", "module")]
    return bool(tensors) and all(a.row_statistic for a in tensors)


def _host_work_on_copies(flat: list[Any]) -> Any:
    """The first move of the operands of a torch function run on the host when each of its tensors is a copy
    that a move brought from a GPU, unchanged or computed from alone (`torch.cat([ids.cpu(), tok.cpu()])`): work
    a GPU does as well (Obj.reducible_move; MP005's host work when the result goes back to a GPU). None
    otherwise: one operand made on the host, or one of unknown origin, makes it the host's own work."""
    tensors = [a for a, _ in flat if isinstance(a, Obj) and a.kind not in ("scalar", "module", "passthrough", "loss")]
    if not tensors or any(a.devs != one("cpu") or a.reducible_move is None for a in tensors):
        return None
    if not all((came := single(a.reducible_move[1])) is not None and came.startswith("cuda") for a in tensors):
        return None
    return tensors[0].reducible_move


# ---------------------------------------------------------------- handlers


def _data_parallel(lib: Library, c: LibCall) -> Val:
    mod: Val = c.args[0] if c.args else c.kwargs.get("module", UNK)
    if is_splitish(mod) and lib.interp.stmts.under_split_test(c.st):
        return mod
    if is_splitish(mod):
        c.st.scope.split_seen = True
        lib.interp.recorder.record(DataParallelWrap(node=c.node, mode=c.st.mode, module=mod, q=c.q))
    elif c.last == "DataParallel" and is_moduleish(mod):
        ids = c.kwargs.get("device_ids", c.args[1] if len(c.args) > 1 else None)
        dev, first = _one_stage_device(mod), _first_device_id(ids)
        if dev is not None and dev.startswith("cuda:") and first is not None and dev != first:
            lib.interp.recorder.record(
                DataParallelOffFirstId(
                    node=c.node, mode=c.st.mode, module=mod, dev=dev, first=first, given=ids is not None
                )
            )
        if (isinstance(mod, Obj) and mod.kind == "module") or (isinstance(mod, SeqV) and mod.module):
            # Its forward scatters the inputs to its device ids, wherever they are, and gathers the outputs on
            # `output_device` (device_ids[0] by default; cuda:0 for every GPU): a call of the wrapper is that.
            out = c.kwargs.get("output_device", c.args[2] if len(c.args) > 2 else None)
            if out is None or (isinstance(out, Const) and out.value is None):
                out = Const(0) if ids is None or (isinstance(ids, Const) and ids.value is None) else _first_id(ids)
            gathered = single(as_device(out)) if out is not None else None
            if isinstance(mod, SeqV):
                # an nn.Sequential wrapped: the wrapper is a module of its own, where the Sequential's weights are
                return Obj("module", one(dev) if dev else None, extra={DATA_PARALLEL_OUTPUT: gathered}, at=c.node)
            extra = {**(mod.extra or {}), DATA_PARALLEL_OUTPUT: gathered}
            return mod.with_(extra=extra)
    return mod


def _first_id(ids: Val) -> Val | None:
    return ids.items[0] if isinstance(ids, SeqV) and ids.items else None


def _zip_spans(args: list[Val]) -> tuple[tuple[Val, ...], tuple[str, ...]] | None:
    """zip(shadows, model.parameters()): when one argument spans the devices of a split model's
    parameters and every other one is uniform (a list of unknown length whose items are all alike,
    or the same parameters), a tuple per device: that parameter beside the others' item."""
    spans = [spans_of(a) for a in args]
    orders = {sp[1] for sp in spans if sp is not None}
    if len(orders) != 1:
        return None  # none, or parameters of models split differently: items would not pair up
    width = len(next(iter(orders)))
    cols: list[list[Val]] = []
    for a, sp in zip(args, spans):
        if sp is not None:
            cols.append(sp[0])
        elif isinstance(a, SeqV) and a.items is None and a.spans is None and a.elem is not UNK:
            cols.append([a.elem] * width)
        elif (on_one := _params_on_one_device(a)) is not None:
            cols.append([on_one] * width)  # zip(ema.parameters(), model.parameters()), the copy moved whole
        else:
            return None
    return tuple(SeqV(tuple(col[i] for col in cols), kind="tuple") for i in range(width)), next(iter(orders))


def _params_on_one_device(a: Val) -> Obj | None:
    """A parameter of `a`, the parameters of a module all on one known device (`ema.parameters()`
    of a copy moved whole), else None. Named pairs and state dicts are left out."""
    if not isinstance(a, ParamsOf) or a.shape != "params" or a.mod.split or a.mod.kind != "module":
        return None
    dev = single(a.mod.devs)
    if dev is None or dev.startswith("sym:"):
        return None
    return Obj("param", one(dev), origin=f"a parameter of `{a.mod.label or 'the module'}` on {dev}", invariant=True)


_SHAPED = frozenset({"ones", "zeros", "empty", "randn", "rand", "full"})
_ITEMSIZE = {
    "bool": 1, "uint8": 1, "int8": 1, "float16": 2, "half": 2, "bfloat16": 2, "float32": 4, "float": 4,
    "int32": 4, "int": 4, "int64": 8, "long": 8, "float64": 8, "double": 8,
}  # fmt: skip


def _constant_bytes(last: str, args: list[Val], kwargs: dict[str, Val]) -> int:
    """The size in bytes of `torch.ones(S, S)` / `torch.zeros((B, S))` / `torch.full((S, S), v)`
    whose shape is known (constants of the file); 0 when the shape or the dtype is not known."""
    if last not in _SHAPED or not args:
        return 0
    shape = args[:1] if last == "full" else args
    if len(shape) == 1 and isinstance(shape[0], SeqV):
        shape = list(shape[0].items or ())
    dims = [a.value for a in shape if isinstance(a, Const) and type(a.value) is int]
    if not dims or len(dims) != len(shape):
        return 0
    itemsize = 4
    dtype = kwargs.get("dtype")
    if dtype is not None:
        name = dtype.q.rsplit(".", 1)[-1] if isinstance(dtype, QName) else ""
        itemsize = _ITEMSIZE.get(name, 0)
    elements = 1
    for d in dims:
        elements *= d
    return elements * itemsize


def _one_stage_device(mod: Val) -> str | None:
    """The one device a module (or an `nn.Sequential` of modules) puts its weights on, else None."""
    if isinstance(mod, Obj):
        return single(mod.devs) if mod.kind == "module" else None
    devs = {d for d, _ in placements(mod)}
    return next(iter(devs)) if len(devs) == 1 else None


def _first_device_id(ids: Val | None) -> str | None:
    """The device DataParallel keeps the module on: device_ids[0] (cuda:0 for the default, every GPU);
    None when the list is not known, or names one device (DataParallel then moves the module there)."""
    if ids is None or (isinstance(ids, Const) and ids.value is None):
        return "cuda:0"
    if not isinstance(ids, SeqV) or ids.items is None or len(ids.items) < 2:
        return None
    first = single(as_device(ids.items[0]))
    return first if first is not None and first.startswith("cuda:") else None


def _ddp(lib: Library, c: LibCall) -> Val:
    args, kwargs = c.args, c.kwargs
    mod: Val = args[0] if args else kwargs.get("module", UNK)
    if is_splitish(mod) and not lib.interp.stmts.under_split_test(c.st):
        c.st.scope.split_seen = True
        bad = []
        for i, name in ((1, "device_ids"), (2, "output_device")):
            v = kwargs.get(name, args[i] if len(args) > i else None)
            if v is None or (isinstance(v, Const) and v.value is None):
                continue
            bad.append(name)
        if bad:
            lib.interp.recorder.record(DdpDeviceIds(node=c.node, mode=c.st.mode, module=mod, args=tuple(bad)))
    return mod


def _parallel_primitive(lib: Library, c: LibCall) -> Val:
    st = c.st
    first = c.args[0] if c.args else c.kwargs.get("modules", c.kwargs.get("outputs"))
    if c.last == "parallel_apply" and _one_device_each(first):
        return _run_branches(lib, c, first)
    if c.last == "gather" and id(first) in lib.interp.branch_outputs:
        return UNK  # the outputs of independent branches collected on one device
    split_args = [a for a in list(c.args) + list(c.kwargs.values()) if is_splitish(a) or holds_split(a)]
    if split_args and lib.interp.stmts.under_split_test(st):
        return UNK  # `if not model_is_split: replicate(model, ...)`: the program's own answer, as for MP002
    if split_args or st.scope.split_class:
        lib.interp.recorder.record(
            ParallelPrimitive(
                node=c.node,
                mode=st.mode,
                q=c.q,
                module=split_args[0] if split_args else st.self_obj,
                on_arg=bool(split_args),
            )
        )
    return UNK


def _one_device_each(v: Val | None) -> TypeGuard[SeqV]:
    """A list of modules, each living on one device (branch parallelism: what
    parallel_apply is for), not a split model nor a list holding one."""
    if not isinstance(v, SeqV) or not v.items:
        return False
    return all(
        ((isinstance(m, Obj) and m.kind in ("module", "any")) or (isinstance(m, SeqV) and m.module))
        and not is_splitish(m)
        for m in v.items
    )


def _run_branches(lib: Library, c: LibCall, modules: SeqV) -> Val:
    """`parallel_apply(modules, inputs)`: each module called with its own inputs, so each
    branch is checked like a call of it; the outputs (a list) may be gathered."""
    inputs = c.args[1] if len(c.args) > 1 else c.kwargs.get("inputs")
    items = inputs.items if isinstance(inputs, SeqV) and inputs.items is not None else None
    outs: list[Val] = []
    for i, mod in enumerate(modules.items or ()):
        if items is None or i >= len(items):
            outs.append(UNK)
            continue
        inp = items[i]
        args = list(inp.items) if isinstance(inp, SeqV) and inp.items is not None else [inp]
        calls = lib.interp.calls
        if isinstance(mod, SeqV):
            outs.append(calls.sequential_call(mod, args, {}, c.st, c.node))
        else:
            assert isinstance(mod, Obj)  # _one_device_each: modules and module containers only
            outs.append(calls.module_call(mod, args, {}, c.st, c.node))
    res = SeqV(tuple(outs))
    lib.interp.branch_outputs.add(id(res))
    return res


def _set_device(lib: Library, c: LibCall) -> Val:
    devs = as_device(c.args[0]) if c.args else None
    c.st.cur = single(devs) if devs else None
    c.st.setdev = c.node
    return Const(None)


def _device_count(lib: Library, c: LibCall) -> Val:
    return lib.interp.gpus.answer()


def _cuda_available(lib: Library, c: LibCall) -> Val:
    """`torch.cuda.is_available()`: True. The linter checks the program as it runs on GPUs (as it assumes
    GPU counts for device_count()); on a machine without one, a model-parallel program does not run."""
    return Const(True)


def _current_device(lib: Library, c: LibCall) -> Val:
    """`torch.cuda.current_device()`: the index of the current device, used as a device as `"cuda"` is: cuda:0
    until set_device says otherwise (after a set_device to a device not known here, not known)."""
    devs = c.st.resolve_current(one(CURRENT))
    return DeviceV(devs, text="torch.cuda.current_device()") if devs else UNK


def _torch_device_call(lib: Library, c: LibCall) -> Val:
    if not c.args and "type" in c.kwargs:
        # `torch.device(type="cuda", index=1)`, `torch.device("cuda", index=1)`: as `torch.device("cuda", 1)`
        c.args = [c.kwargs["type"]]
    if len(c.args) == 1 and "index" in c.kwargs:
        c.args = [*c.args, c.kwargs["index"]]
    if c.args and not_a_device.record(lib.interp, c.args[0], not_a_device.written(c.node, 0), c.node, c.st.mode):
        return FAILED  # torch.device("gpu"): torch raises here
    v = _torch_device(c.args)
    if len(c.args) >= 2 and isinstance(c.args[0], Const) and c.args[0].value == "cuda" and isinstance(c.args[1], SymV):
        lib.interp.cuda_symbols.add(c.args[1].name)
    if isinstance(v, DeviceV):
        lib.interp.gpus.check_device(v.devs, c.node)
    return v


def _other_type(a: Devs, b: Devs) -> bool:
    """Known devices of two types (the CPU and a GPU)."""
    x, y = single(a), single(b)
    return (
        x is not None
        and y is not None
        and (x == "cpu") != (y == "cpu")
        and not x.startswith("sym:")
        and not y.startswith("sym:")
    )


def _generator(lib: Library, c: LibCall) -> Val:
    """`torch.Generator(device=...)`: random numbers for tensors made on its device only (a factory's or
    an op's `generator=` on another device raises); without a device, the CPU's."""
    given = c.kwargs.get("device", c.args[0] if c.args else None)
    devs = one("cpu") if given is None else c.st.resolve_current(as_device(given))
    if devs is None:
        return UNK
    where = "without device=, so on the CPU" if given is None else f"with device={show(single(devs))}"
    return Obj("generator", devs, origin=f"a torch.Generator made {where}", at=c.node)


def _host_argument(lib: Library, c: LibCall) -> Val:
    """A function that reads one argument on the host (torchapi.HOST_ARGUMENTS) given it on a GPU: torch
    raises. MP001's, at the call; what the function gives is not modelled (as before)."""
    keyword, at, _ = T.HOST_ARGUMENTS[c.q]
    given = c.kwargs.get(keyword, c.args[at] if len(c.args) > at else None)
    if isinstance(given, Obj) and (single(given.devs) or "").startswith("cuda:"):
        index = at if len(c.args) > at else len(c.args) + list(c.kwargs).index(keyword)
        expr = c.exprs[index] if index < len(c.exprs) else None
        lib.interp.exprs.check_operand(c.node, given, one("cpu"), c.st, what=c.q, op=c.last, arg_index=at, expr=expr)
    used(*c.args, *c.kwargs.values())
    return UNK


def _autograd_grad(lib: Library, c: LibCall) -> Val:
    """`torch.autograd.grad(outputs, inputs)`: a tuple with one gradient per input, each on its input's device
    (autograd accumulates a gradient where its tensor lives), whatever device the outputs are on."""
    inputs = c.kwargs.get("inputs", c.args[1] if len(c.args) > 1 else None)
    used(*c.args, *c.kwargs.values())
    spans = spans_of(inputs) if inputs is not None and not isinstance(inputs, Obj) else None
    if spans is not None:
        # The parameters of a split model (or of several parts on several GPUs): a gradient on each device.
        grads = tuple(_gradient_of(i) for i in spans[0])
        return SeqV(None, elem=join_all(grads), kind="tuple", spans=grads, spans_by=spans[1])
    items = inputs.items if isinstance(inputs, SeqV) else (inputs,) if isinstance(inputs, Obj) else None
    if items is None:
        return UNK
    return SeqV(tuple(_gradient_of(i) for i in items), kind="tuple")


def _gradient_of(inp: Val) -> Val:
    if not (isinstance(inp, Obj) and inp.kind in ("tensor", "param") and single(inp.devs)):
        return UNK
    return Obj(
        "tensor",
        inp.devs,
        origin=f"a gradient from torch.autograd.grad, on its input's device ({show(single(inp.devs))})",
        at=inp.at,
    )


# `checkpoint(fn, *args, use_reentrant=..., **kwargs)`: its own keywords; the others go to `fn`.
_CHECKPOINT_OWN = frozenset({"use_reentrant", "preserve_rng_state", "context_fn", "determinism_check", "debug"})


def _checkpoint(lib: Library, c: LibCall) -> Val:
    """`torch.utils.checkpoint.checkpoint(stage, h)` runs `stage(h)` (and again in backward, to rebuild its
    activations): what it gives and what it needs are the call's. `checkpoint_sequential(seq, segments, h)`
    runs the Sequential on `h`."""
    calls = lib.interp.calls
    kwargs = {k: v for k, v in c.kwargs.items() if k not in _CHECKPOINT_OWN}
    if c.last == "checkpoint_sequential":
        seq, given, exprs = c.args[0] if c.args else UNK, c.args[2:3], c.exprs[2:3]
        if isinstance(seq, SeqV) and seq.module and given:
            return calls.sequential_call(seq, list(given), {}, c.st, c.node, exprs)
        used(*c.args, *c.kwargs.values())
        return UNK
    fn, args, exprs = (c.args[0] if c.args else UNK), list(c.args[1:]), c.exprs[1 : len(c.args)]
    if isinstance(fn, FuncRef):
        return calls.call_function(fn.info, fn.bound, args, kwargs, c.st, c.node, helper=True)
    if isinstance(fn, Obj) and fn.kind in ("module", "any", "passthrough"):
        return calls.module_call(fn, args, kwargs, c.st, c.node, exprs)
    if isinstance(fn, SeqV) and fn.module:
        return calls.sequential_call(fn, args, kwargs, c.st, c.node, exprs)
    used(*c.args, *c.kwargs.values())
    return UNK


def _data_loader(lib: Library, c: LibCall) -> Val:
    """`DataLoader(ds, batch_size, ..., collate_fn=collate)`: a sequence of batches. With a collate_fn of the
    file (a function, or a `functools.partial` of one), each batch is what it returns for a list of samples,
    so `for x, y in loader` meets the devices it put them on (`labels.cuda()`). Without one, PyTorch's
    default collation stacks the samples of the dataset (a `TensorDataset`'s rows, what the `__getitem__` of
    a dataset class of the file returns): each tensor stays on its device, and Python numbers become tensors
    on the host. Anything else (a batch sampler, `batch_size=None`, a collate_fn not known): not known."""
    used(*c.args, *c.kwargs.values())
    # Its sampler and its workers' seeds draw from `generator=` on the host (`torch.randperm`, `random_()`):
    # a CUDA generator stops the first iteration ("Expected a 'cpu' device type for generator").
    lib._check_generator(c.kwargs.get("generator"), one("cpu"), c.node, c.st, "DataLoader", len(c.args))
    collate = c.args[6] if len(c.args) > 6 else c.kwargs.get("collate_fn")
    if collate is not None and not (isinstance(collate, Const) and collate.value is None):
        return _collated_by(lib, c, collate)
    batch_size = c.args[1] if len(c.args) > 1 else c.kwargs.get("batch_size")
    if (isinstance(batch_size, Const) and batch_size.value is None) or len(c.args) > 4 or "batch_sampler" in c.kwargs:
        return UNK
    dataset = c.args[0] if c.args else c.kwargs.get("dataset", UNK)
    batch = _default_collate(_sample_of(lib, dataset, c), c.node)
    return SeqV(None, elem=batch) if batch is not UNK else UNK


# What draws its order on the host from its `generator=` (torch.randperm, torch.multinomial).
_HOST_SAMPLERS = ("RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "random_split")


def _optimizer(lib: Library, c: LibCall) -> Val:
    """`torch.optim.Adam(model.parameters(), ...)`: an optimizer that knows its modules (optimizers.py)."""
    used(*c.args, *c.kwargs.values())
    return optimizers.build(lib.interp, c.last, c.args, c.kwargs, c.node, c.st)


def _host_sampler(lib: Library, c: LibCall) -> Val:
    """`RandomSampler(ds, generator=g)`, `random_split(ds, sizes, generator=g)`: they draw with `g` on the
    host, so a CUDA generator stops them ("Expected a 'cpu' device type for generator")."""
    used(*c.args, *c.kwargs.values())
    lib._check_generator(c.kwargs.get("generator"), one("cpu"), c.node, c.st, c.q.rsplit(".", 1)[-1], len(c.args))
    return UNK


def _collated_by(lib: Library, c: LibCall, fn: Val) -> Val:
    """The batches of a DataLoader whose collate_fn is `fn`."""
    args: list[Val] = [UNK]
    kwargs: dict[str, Val] = {}
    if isinstance(fn, PartialV) and isinstance(fn.func, FuncRef):
        args, kwargs, fn = [*fn.args, UNK], dict(fn.kwargs), fn.func
    if not isinstance(fn, FuncRef) or fn.bound is not None:
        return UNK
    batch = lib.interp.calls.call_function(fn.info, None, args, kwargs, c.st, c.node, helper=True)
    return SeqV(None, elem=batch) if batch is not UNK else UNK


def _sample_of(lib: Library, dataset: Val, c: LibCall) -> Val:
    """One sample of `dataset`: an item of a sequence (a TensorDataset: a tuple of rows), or what the
    `__getitem__` of a dataset class of the file returns for an index not known."""
    if isinstance(dataset, SeqV) and dataset.kind != "dict":
        return iter_elem(dataset, None)
    if isinstance(dataset, Obj) and dataset.cls is not None:
        getitem = dataset.cls.method("__getitem__")
        if getitem is not None:
            return lib.interp.calls.call_function(getitem, dataset, [UNK], {}, c.st, c.node, helper=True)
    return UNK


def _default_collate(sample: Val, node: cst.Call, depth: int = 0) -> Val:
    """A batch of samples like `sample`, as torch.utils.data's default_collate makes it: tensors stacked on
    their device, Python numbers made a tensor on the host, tuples, lists and dicts item by item."""
    if depth > 4:
        return UNK
    if isinstance(sample, Obj) and sample.kind in ("tensor", "param", "buffer", "scalar") and not sample.opaque:
        # (a sample that may be 0-dim, `self.y[i]`, is stacked into a batch: no longer one that mixes)
        return sample.with_(label="", kind="tensor", invariant=False, worked=True)
    if isinstance(sample, Const) and type(sample.value) in (int, float, bool):
        return Obj(
            "tensor",
            one("cpu"),
            origin="a batch of Python numbers, made a tensor on the host by the DataLoader",
            at=node,
        )
    if isinstance(sample, SeqV) and sample.items is not None and sample.kind in ("tuple", "list"):
        return SeqV(tuple(_default_collate(i, node, depth + 1) for i in sample.items), kind="list")
    if isinstance(sample, DictV) and not sample.module:
        return DictV({k: _default_collate(v, node, depth + 1) for k, v in sample.items.items()})
    return UNK


def _tensor_dataset(lib: Library, c: LibCall) -> Val:
    """`TensorDataset(*tensors)`: a sequence of samples, each a tuple of one row of every tensor, on its device."""
    if c.kwargs or not c.args or any(isinstance(a, Starred) or not known_tensor(a) for a in c.args):
        used(*c.args, *c.kwargs.values())
        return UNK
    rows = tuple(a.with_(label="") for a in c.args if isinstance(a, Obj))
    return SeqV(None, elem=SeqV(rows, kind="tuple"))


def _update_bn(lib: Library, c: LibCall) -> Val:
    """`torch.optim.swa_utils.update_bn(loader, model, device=None)` runs `model` on every batch of `loader` (its
    first item when the batch is a list or a tuple), moved to `device` first when one is given."""
    used(*c.args, *c.kwargs.values())
    loader = c.args[0] if c.args else c.kwargs.get("loader", UNK)
    model = c.args[1] if len(c.args) > 1 else c.kwargs.get("model", UNK)
    device = c.args[2] if len(c.args) > 2 else c.kwargs.get("device")
    batch = iter_elem(loader, None)
    if isinstance(batch, SeqV) and batch.items:
        batch = batch.items[0]
    if device is not None and not (isinstance(device, Const) and device.value is None):
        # Each input is moved to `device` first (`input.to(device)`): the model gets it there, and a split
        # model whose first stage is elsewhere fails (the output GPU given for the input's).
        dev = single(c.st.resolve_current(as_device(device)))
        if dev is None or dev.startswith("sym:") or not isinstance(batch, Obj):
            return Const(None)
        batch = Obj("tensor", one(dev), origin=f"moved to {show(dev)} by update_bn(device=...)", at=c.node)
    if isinstance(batch, Obj) and isinstance(model, Obj) and model.kind == "module":
        lib.interp.calls.module_call(model, [batch], {}, c.st, c.node, [None])
    return Const(None)


def _cuda_device_context(lib: Library, c: LibCall) -> Val:
    """`torch.cuda.device(i)` outside a `with` (Statements.exec_with reads that one): the context manager,
    which a device argument refuses (not_a_device.py)."""
    return DeviceContextV(c.node)


def _parameter(lib: Library, c: LibCall) -> Val:
    a = c.args[0] if c.args else UNK
    return Obj(
        "param",
        a.devs if isinstance(a, Obj) else None,
        origin=a.origin if isinstance(a, Obj) else "",
        at=a.at if isinstance(a, Obj) else None,
        invariant=True,
        made_by=a.made_by if isinstance(a, Obj) else None,
    )


def _sequential(lib: Library, c: LibCall) -> Val:
    args = c.args
    stars = [a for a in args if isinstance(a, Starred)]
    if stars:
        elem = stars[0].elem
        for a in args:
            elem = join(elem, a.elem if isinstance(a, Starred) else a)
        return SeqV(None, elem=elem, module=True)
    if c.q.endswith(("ModuleList", "ParameterList")):
        src = args[0] if args else SeqV(())
        if isinstance(src, SeqV):
            return SeqV(src.items, elem=src.elem, kind="list", module=True)
        return SeqV(None, module=True)
    if len(args) == 1 and isinstance(args[0], DictV):
        return SeqV(tuple(args[0].items.values()), module=True)
    return SeqV(tuple(args), module=True)


def _module_dict(lib: Library, c: LibCall) -> Val:
    """nn.ModuleDict / nn.ParameterDict of a dict: its entries by key; of a comprehension whose keys are not
    known (`{name.replace(".", "_"): nn.Parameter(...) for name, p in model.named_parameters()}`), entries
    all alike, any key giving one."""
    src = c.args[0] if c.args else DictV({})
    if isinstance(src, SeqV) and src.kind == "dict" and src.items is None:
        return SeqV(None, elem=src.elem, kind="dict", module=True)
    return DictV(dict(src.items), module=True) if isinstance(src, DictV) else DictV({}, module=True)


def _default_device_changer(lib: Library, c: LibCall) -> Val:
    lib.interp.default_device_changed = True
    return UNK


def _cuda_tensor_type(lib: Library, c: LibCall) -> Val:
    lib.interp.moves.indexless(c.node, c.st, of_tensor=True)
    return Obj(
        "tensor", c.st.resolve_current(one(CURRENT)), origin=f"created by {c.q}() on the current CUDA device", at=c.node
    )


def _factory(lib: Library, c: LibCall) -> Val:
    return lib.factory(c.q, c.args, c.kwargs, c.node, c.st)


def _drawn(lib: Library, c: LibCall) -> Val:
    """`torch.normal(mean, std)` / `torch.bernoulli(p)` given tensors: drawn where those tensors are, which must
    share a device, as any op's; given numbers and a size (`torch.normal(0.0, 1.0, size=(4,))`), a factory."""
    given = [*c.args, *(v for k, v in c.kwargs.items() if k != "generator")]
    if "device" in c.kwargs or not any(known_tensor(v) for v in given):
        return lib.factory(c.q, c.args, c.kwargs, c.node, c.st)
    return lib.tensor_op(c.q, c.args, c.kwargs, c.node, c.st, c.exprs)  # (it checks `generator=` too)


def _like_factory(lib: Library, c: LibCall) -> Val:
    if "device" in c.kwargs:
        return lib.factory(c.q, c.args, c.kwargs, c.node, c.st)
    a = c.args[0] if c.args else UNK
    return Obj("tensor", a.devs, origin=a.origin, at=a.at) if isinstance(a, Obj) else UNK


def _dtype(lib: Library, c: LibCall) -> Val:
    return DtypeV()


def _pipeline_wrapper(lib: Library, c: LibCall) -> Val:
    if c.last in T.PROCESS_PIPELINE_WRAPPERS:
        # This process's stage only, fed and drained by the wrapper: takes what it is given, moved or not.
        return Obj("passthrough", None, origin=f"one stage per process, run by {c.last}()", at=c.node)
    # fairscale's Pipe, tensor_parallel(...): the result spans several devices by construction.
    return Obj("module", None, dispatched=f"{c.last}()", origin=f"split by {c.last}()", at=c.node)


def _dispatcher(lib: Library, c: LibCall) -> Val:
    return lib.dispatched(c.q, c.args, c.kwargs, c.node, c.st)


def _device_hook(lib: Library, c: LibCall) -> Val:
    # accelerate's cpu_offload(m, execution_device=...), add_hook_to_module(m, ...): the module
    # now runs wherever its hook moves it; the model no longer knows where.
    for a in list(c.args) + list(c.kwargs.values()):
        if isinstance(a, Obj) and a.kind in ("module", "any") and a.cls is None and a.attrs is None:
            a.devs, a.origin = None, f"managed by {c.last}()"
    return UNK


def _tensor_op(lib: Library, c: LibCall) -> Val:
    out = lib.tensor_op(c.q, c.args, c.kwargs, c.node, c.st, c.exprs)
    if isinstance(out, Obj) and c.q.startswith("torch.distributions.") and c.last[:1].isupper():
        # `Normal(mu, sigma)`: where its parameters are, but no tensor (it has no `.to()`); what its
        # methods give (`rsample()`, `log_prob(x)`) is.
        return out.with_(kind="distribution", label="", origin=f"a {c.last} built from tensors there", at=c.node)
    return out


def _module_class(lib: Library, c: LibCall) -> Val:
    """A class built with device= (on that device), or a torch.nn module class (unplaced)."""
    q, last, kwargs = c.q, c.last, c.kwargs
    if "device" in kwargs:
        devs = c.st.resolve_current(as_device(kwargs["device"]))
        if devs is not None:
            lib.interp.moves.note_indexless_arg(kwargs["device"], c.node, c.st)
            return Obj(
                "module" if q.startswith("torch.nn.") else "any",
                devs,
                origin=f"built with device={show(single(devs))}",
                at=c.node,
                ident=_ident(lib, c),
                nn_class=last if _is_nn_class(q, last) else "",
            )
    if _is_nn_class(q, last):
        if last.endswith("Loss"):
            weights: dict[str, Val] = {
                k: v for k, v in kwargs.items() if k in ("weight", "pos_weight") and isinstance(v, Obj)
            }
            if last in T.CLASS_DIM_LOSSES:
                weights[T.CLASS_DIM] = Const(last)  # MP014: its predictions are the larger tensor
            if last in T.HOST_TARGET_LOSSES:
                weights[T.HOST_TARGETS] = Const(last)  # its targets and lengths may stay on the CPU
            return Obj("loss", None, label="", extra=weights)
        if last in T.PARAMETERLESS:
            return Obj("passthrough", None, nn_class=last)
        if last in T.PARAMETERED:
            return Obj("module", None, origin=UNPLACED, at=c.node, ident=_ident(lib, c), nn_class=last)
        return Obj("module", None, ident=_ident(lib, c), nn_class=last)
    return UNK


def _ident(lib: Library, c: LibCall) -> int | None:
    """A module built in an __init__ is an object of its own (Obj.ident); elsewhere (a script, a
    helper whose result is memoised) one value may stand for several objects: no identity."""
    return lib.interp.new_ident(c.last) if c.st.in_init else None


def _torch_device(args: list[Val]) -> Val:
    if not args:
        return UNK
    a = args[0]
    if len(args) >= 2 and isinstance(a, Const) and a.value == "cuda":
        idx = args[1]
        if isinstance(idx, Const) and isinstance(idx.value, int):
            return DeviceV(one(f"cuda:{idx.value}"))
        if isinstance(idx, SymV):
            return DeviceV(one(f"sym:{idx.name}"))
        if isinstance(idx, DeviceV) and idx.devs and all(d.startswith("cuda") for d in idx.devs):
            return DeviceV(idx.devs)  # torch.device("cuda", torch.cuda.current_device())
        return DeviceV(None)
    if isinstance(a, SymV):
        return DeviceV(one(f"sym:{a.name}"))
    d = as_device(a)
    return DeviceV(d, text="torch.device") if d is not None else (a if isinstance(a, DeviceV) else DeviceV(None))


def _deep_copy(lib: Library, c: LibCall) -> Val:
    """`copy.deepcopy(model)`: a new object, its parts placed where the original's are. (Not `copy.copy`:
    a shallow copy of a module shares its parameters, so moving one moves the other.)"""
    v = c.args[0] if c.args else UNK
    if isinstance(v, Obj) and v.kind == "module" and is_splitish(v):
        # A copy of a split model moved whole (an EMA, a teacher kept on one GPU) undoes no split: Moves.move.
        made = copied(lib, v)
        assert isinstance(made, Obj)
        return made.with_(extra={**(made.extra or {}), "deep_copy": True})
    return copied(lib, v) if isinstance(v, (Obj, SeqV, DictV)) else UNK


def _averaged_model(lib: Library, c: LibCall) -> Val:
    """`AveragedModel(model, device=None)` (torch.optim.swa_utils): a deep copy of the model, whose forward
    it runs, moved whole to `device` when one is given, as `copy.deepcopy(model).to(device)` would be."""
    copied = _deep_copy(lib, c)
    device = c.args[1] if len(c.args) > 1 else c.kwargs.get("device")
    if device is None or (isinstance(device, Const) and device.value is None) or not isinstance(copied, Obj):
        return copied
    return lib.interp.moves.move(copied, "to", [device], {}, c.node, c.st)


def copied(lib: Library, v: Val, depth: int = 0) -> Val:
    """A deep copy of `v`: every module object inside it a new one (Obj.ident), so that moving the copy
    moves none of the original's parts (an `nn.Sequential`'s layers, an instance's submodules)."""
    if depth > 6:
        return v
    if isinstance(v, Obj):
        return v.with_(
            attrs={k: copied(lib, a, depth + 1) for k, a in v.attrs.items()} if v.attrs is not None else None,
            ident=lib.interp.new_ident(lib.interp.ident_names.get(v.ident, "copy")) if v.ident is not None else None,
            extra=dict(v.extra) if v.extra else v.extra,
        )
    if isinstance(v, SeqV):
        items = tuple(copied(lib, i, depth + 1) for i in v.items) if v.items is not None else None
        return SeqV(items, elem=v.elem, kind=v.kind, module=v.module, spans=v.spans, spans_by=v.spans_by)
    if isinstance(v, DictV):
        return DictV({k: copied(lib, a, depth + 1) for k, a in v.items.items()}, module=v.module, namespace=v.namespace)
    return v


# What isinstance() can be sure of, by the type named: the kinds of value that certainly are one (True)
# and those that certainly are not (False). A list the model holds may really be a range, a zip or a map
# (library results default to "list"), so "is a list" is never certain; a tuple literal, a dict, a
# tensor are.
_TENSOR_TYPES = frozenset({"torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter"})


def _is_instance(v: Val, type_name: str) -> bool | None:
    """Whether `v` is an instance of the type `type_name` (a canonical name), or None when not certain."""
    tensor = isinstance(v, Obj) and v.kind in ("tensor", "param", "buffer") and not v.opaque
    plain_dict = isinstance(v, DictV) and not v.module and not v.namespace
    if type_name in _TENSOR_TYPES:
        if type_name == "torch.Tensor" and tensor:
            return True
        return False if isinstance(v, (SeqV, DictV, Const)) else None
    if type_name.startswith("torch.nn.") and type_name.count(".") == 2:
        return module_tree.is_instance(v, type_name[len("torch.nn.") :])  # `isinstance(m, nn.Linear)`
    if type_name in ("tuple", "list", "dict"):
        if tensor or isinstance(v, Const):
            return False
        if isinstance(v, SeqV) and not v.module:
            if v.kind == "tuple":
                return type_name == "tuple"
            return None if type_name == "list" else False
        if plain_dict:
            return type_name == "dict"
    return None


def _isinstance(lib: Library, c: LibCall) -> Val:
    """`isinstance(x, T)` / `isinstance(x, (T1, T2))` / `torch.is_tensor(x)`, decided where x's type is
    certain (a recursive batch mover takes its dict, tuple and tensor branches as Python would)."""
    if c.q == "torch.is_tensor":
        verdict = _is_instance(c.args[0], "torch.Tensor") if len(c.args) == 1 else None
        return Const(verdict) if verdict is not None else UNK
    if len(c.args) != 2:
        return UNK
    names = c.args[1].items if isinstance(c.args[1], SeqV) and c.args[1].items is not None else (c.args[1],)
    verdicts = [
        _is_instance(c.args[0], n.q)
        if isinstance(n, QName)
        else module_tree.is_instance_of(c.args[0], n.info)
        if isinstance(n, ClassRef)
        else None
        for n in names
    ]
    if any(v is True for v in verdicts):
        return Const(True)
    return Const(False) if verdicts and all(v is False for v in verdicts) else UNK


_INTEGER_DTYPES = frozenset({"long", "int64", "int", "int32", "int16", "short", "int8", "uint8", "bool"})


def _integer_data(node: cst.Call, args: list[Val], kwargs: dict[str, Val]) -> bool:
    """`torch.tensor(data)` of integers: lengths, labels or ids (`torch.tensor([len(s) for s in seqs])`,
    `torch.tensor([3, 1, 2])`, `dtype=torch.long`), which no layer computes on."""
    dtype = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "dtype"), None)
    if dtype is not None:
        return (dotted(dtype) or "").rsplit(".", 1)[-1] in _INTEGER_DTYPES
    first = node.args[0].value if node.args else None
    if isinstance(first, (cst.ListComp, cst.GeneratorExp)):
        elt = first.elt
        return isinstance(elt, cst.Call) and isinstance(elt.func, cst.Name) and elt.func.value in ("len", "int")
    data = args[0] if args else None
    return (
        isinstance(data, SeqV)
        and bool(data.items)
        and all(isinstance(i, Const) and type(i.value) in (int, bool) for i in data.items or ())
    )


def _builtin(lib: Library, c: LibCall) -> Val:
    q, args = c.q, c.args
    element_reads.note_ordering(lib.interp, q, args, c.node, c.st)  # MP020: `max(t)` of a GPU tensor
    if q == "range":
        # range(n), range(lo, hi), range(lo, hi, step): unrolled when every bound is a known int. An
        # empty one stays unknown: a loop that never runs is likelier a placeholder (-1) than the program.
        bounds = [a.value for a in args if isinstance(a, Const) and type(a.value) is int]
        if 1 <= len(args) <= 3 and len(bounds) == len(args) and (len(args) < 3 or bounds[2] != 0):
            r = range(*bounds)
            if 0 < len(r) <= MAX_UNROLL:
                return SeqV(tuple(Const(i) for i in r))
        return SeqV(None, elem=UNK)
    if q == "enumerate" and args:
        src = args[0]
        given = args[1] if len(args) > 1 else c.kwargs.get("start", Const(0))
        # `enumerate(stages, start=1)`: numbered from there; from a start not known here, numbers unknown
        start = given.value if isinstance(given, Const) and type(given.value) is int else None
        if isinstance(src, SeqV) and src.items is not None:
            numbers = [Const(i) if start is not None else UNK for i in range(start or 0, (start or 0) + len(src.items))]
            return SeqV(tuple(SeqV((n, v), kind="tuple") for n, v in zip(numbers, src.items)))
        # enumerate(t) of a tensor: its rows, on its device
        elem = src.elem if isinstance(src, SeqV) else iter_elem(src, None)
        return SeqV(None, elem=SeqV((UNK, elem), kind="tuple"))
    if q == "zip" and args:
        lengths = [len(a.items) for a in args if isinstance(a, SeqV) and a.items is not None]
        if lengths:
            n = min(lengths)
            if max(lengths) > n:
                _note_short_zip(lib, c, args)
            cols = [
                a.items[:n] if isinstance(a, SeqV) and a.items is not None else (iter_elem(a, None),) * n for a in args
            ]
            return SeqV(tuple(SeqV(tuple(c[i] for c in cols), kind="tuple") for i in range(n)))
        zipped = _zip_spans(args)
        return SeqV(
            None,
            elem=SeqV(tuple(iter_elem(a, None) for a in args), kind="tuple"),
            spans=zipped[0] if zipped else None,
            spans_by=zipped[1] if zipped else (),
        )
    if q in ("list", "tuple", "reversed", "sorted", "iter") and args:
        return _reordered(q, args[0], c.kwargs)
    if q == "dict":
        return _dict_call(lib, c)
    if q == "map" and len(args) == 2 and not c.kwargs:
        return _map_call(lib, c)
    if q in _NUMERIC and args and not c.kwargs:
        # min(i // per, n - 1), max(per, 1): stage indices computed from the GPU count
        nums = args[0].items if len(args) == 1 and isinstance(args[0], SeqV) and q in ("min", "max") else args
        if len(args) == 1 and isinstance(args[0], DictV) and q in ("min", "max"):
            nums = tuple(Const(k) for k in args[0].items)  # min(device_map): over its keys
        values = [a.value for a in nums or () if isinstance(a, Const)]
        if q in ("min", "max") and len(values) < 2 and nums is args:
            return UNK  # `max(size)` of a number: Python raises there, on a path the program does not take
        if q == "int" and len(values) == 1 and isinstance(values[0], str) and values[0].strip().isdigit():
            return Const(int(values[0]))  # `int(os.environ.get("ENC_GPU", "0"))` with its default
        if q == "int" and len(values) == 1 and nums is not None and len(nums) == 1 and type(values[0]) is bool:
            return Const(int(values[0]))  # `int(name in ("actor", "value"))`: a GPU index from a test
        if nums and len(values) == len(nums) and all(type(v) in (int, float) for v in values):
            if q not in ("min", "max") and len(values) != 1:
                return UNK  # `round(x, 2)`: the others take one number
            if q not in ("min", "max"):
                return Const(_NUMERIC[q](values[0]))
            # over the items of one sequence (`max(topk)` with topk=(1,)), or over the arguments
            return Const(_NUMERIC[q](values) if nums is not args else _NUMERIC[q](*values))
        return UNK
    if q == "divmod" and len(args) == 2 and not c.kwargs:
        # `gpu, _ = divmod(i, LAYERS_PER_GPU)`: a stage index and the layer's place in it
        a, b = args
        if isinstance(a, Const) and isinstance(b, Const) and type(a.value) is int and type(b.value) is int and b.value:
            return SeqV(tuple(Const(v) for v in divmod(a.value, b.value)), kind="tuple")
        return UNK
    if q == "next" and args:
        a = args[0]
        if isinstance(a, SeqV):
            return a.items[0] if a.items else a.elem
        if isinstance(a, ParamsOf):
            return a.first()
        return UNK
    if q == "sum" and args:
        return _python_sum(lib, c)
    if q == "len" and args and isinstance(args[0], SeqV) and args[0].items is not None:
        return Const(len(args[0].items))
    if q == "len" and args and isinstance(args[0], Const) and isinstance(args[0].value, (str, bytes, tuple)):
        return Const(len(args[0].value))  # `N_AA = len(ALPHABET)`: a size spelled out by its letters
    if q == "setattr" and len(args) == 3 and isinstance(args[1], Const) and isinstance(args[1].value, str):
        # setattr(self, f"layer{i}", block) in a loop of known length: one attribute per name
        if not lib.interp.stmts.replace_part(c.node.args[0].value, args[0], args[1].value, args[2], c.st):
            lib.interp.stmts.assign_attr(args[0], args[1].value, args[2], c.st, None)
        return Const(None)
    if q == "getattr" and len(args) >= 2 and isinstance(args[1], Const) and isinstance(args[1].value, str):
        base = args[0]
        if isinstance(base, Obj) and base.attrs is not None:
            return base.attrs.get(args[1].value, UNK)
        return UNK
    if q == "super":
        return SuperV()
    return UNK


def _reordered(q: str, a: Val, kwargs: dict[str, Val]) -> Val:
    """list(x), tuple(x), iter(x), reversed(x), sorted(x): the items of `x` in their new order.

    A dict gives its keys (`for k in sorted(feats)`). `sorted` keeps known items only where it can
    order them as Python would (constants of one type, no `key=`); otherwise which item comes
    first is not known, and the result is a sequence of items alike."""
    if isinstance(a, DictV):
        a = SeqV(tuple(Const(k) for k in a.items), kind="list")
    if isinstance(a, ParamsOf) and q in ("list", "tuple"):
        return a  # `ps = list(model.parameters())`: the same parameters, in the same order
    if not isinstance(a, SeqV):
        return UNK
    items = a.items
    if q == "reversed" and items is not None:
        items = tuple(reversed(items))
    if q == "sorted" and items is not None:
        values = [i.value for i in items if isinstance(i, Const)]
        if len(values) != len(items) or len({type(v) for v in values}) > 1 or "key" in kwargs:
            return SeqV(None, elem=join_all(items), kind="list")
        reverse = kwargs.get("reverse")
        if reverse is not None and not (isinstance(reverse, Const) and isinstance(reverse.value, bool)):
            return SeqV(None, elem=join_all(items), kind="list")
        flip = bool(reverse.value) if isinstance(reverse, Const) else False
        items = tuple(Const(v) for v in sorted(values, reverse=flip))
    kind = "tuple" if q == "tuple" else "list"  # (a hook's `return tuple(a.to(dev) for a in args)`: its new args)
    return SeqV(items, elem=a.elem, kind=kind, module=a.module, spans=a.spans, spans_by=a.spans_by)


def _note_short_zip(lib: Library, c: LibCall, args: list[Val]) -> None:
    """`zip(self.blocks, devices)` with more modules than devices (both known): the rest get none; or one module,
    a container of parts, with several devices (`zip(model.children(), devices)` of a model whose only child
    holds the stages): the first device gets all of it (ShortZip)."""
    seqs = [(i, a.items) for i, a in enumerate(args) if isinstance(a, SeqV) and a.items]
    modules = [(i, items) for i, items in seqs if all(map(is_module, items))]
    devices = [items for _, items in seqs if all(as_device(i) is not None for i in items)]
    if len(modules) != 1 or len(devices) != 1:
        return
    (at, items), n_dev = modules[0], len(devices[0])
    parts = 0
    if len(items) == 1 and n_dev >= 2 and len({as_device(d) for d in devices[0]}) >= 2:
        # One module for several devices: where it is a container of parts (an nn.Sequential, ModuleList or
        # ModuleDict: the model's only child, given by `model.children()`), the parts were meant, and the whole of
        # it goes to the first device. (One model of its own zipped with the devices may be a list of models.)
        lone = items[0]
        container = isinstance(lone, (SeqV, DictV)) and bool(lone.module)
        parts = len(module_tree.children(lone) or ()) if container else 0
        if parts < 2:
            return
    elif len(items) <= n_dev:
        return
    lib.interp.recorder.record(
        ShortZip(node=c.node, mode=c.st.mode, modules=len(items), devices=n_dev, modules_at=at, parts=parts)
    )


def _map_call(lib: Library, c: LibCall) -> Val:
    """`map(torch.device, devices)` over a sequence of known length: the library function applied to each
    item, as a comprehension would (`d0, d1 = map(torch.device, ("cuda:0", "cuda:1"))`). Other callables,
    or a sequence of unknown length: unknown items."""
    func, seq = c.args
    if not (isinstance(seq, SeqV) and seq.items is not None and len(seq.items) <= MAX_UNROLL):
        return UNK
    if not isinstance(func, QName):
        return SeqV(None, elem=UNK)
    q = canonical(func.q)
    handler = handler_for(q, q.rsplit(".", 1)[-1], {})
    if handler is None:
        return SeqV(None, elem=UNK)
    return SeqV(tuple(handler(lib, LibCall(q, c.node, c.st, [item], {}, [None])) for item in seq.items))


def _python_sum(lib: Library, c: LibCall) -> Val:
    """Python's `sum(losses)`: `start + losses[0] + losses[1] + ...`, each `+` as written (per-stage
    losses on two GPUs stop at the second item: 0-dim tensors on two GPUs do not mix). Only a
    sequence whose items are all known tensors; the start (0 unless given) is a number, which
    meets any tensor."""
    seq = c.args[0]
    start = c.args[1] if len(c.args) > 1 else c.kwargs.get("start", Const(0))
    if not isinstance(seq, SeqV) or not isinstance(start, Const):
        return UNK
    # A sequence of unknown length made from the parameters of a split model (`sum(p.norm() for p in
    # model.parameters())`) holds an item made on each device: `spans`, in the parameters' order.
    # (Its index is then not known: Mismatch.item stays None.)
    items = seq.items if seq.items is not None else seq.spans
    if items is None:
        return UNK
    tensors = [i for i in items if isinstance(i, Obj) and i.kind in ("tensor", "param", "buffer")]
    if len(tensors) != len(items) or not tensors:
        return UNK
    exprs = lib.interp.exprs
    total: Val = tensors[0].with_(label="")
    for index, item in enumerate(tensors[1:], 1):
        assert isinstance(total, Obj)
        lib.interp.recorder.need(c.node, "sum", total.devs)
        if conflict(total.devs, item.devs):
            lib.interp.recorder.record(
                Mismatch(
                    node=c.node,
                    mode=c.st.mode,
                    value=item,
                    target=total.devs,
                    what="the sum of the items before it",
                    op="sum()",
                    other=total,
                    expr=c.node.args[0].value if c.node.args else None,
                    item=index if seq.items is not None else None,
                    site="sum",
                ),
                key="sum",
            )
            return FAILED
        total = exprs.binop(c.node, total, item, c.st)
        if not isinstance(total, Obj):
            return total
    return total


# `math.ceil(n_layers / n_gpus)`: blocks per stage, rounded up or down.
_NUMERIC: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "round": round,
    "math.ceil": math.ceil,
    "math.floor": math.floor,
}


def _dict_call(lib: Library, c: LibCall) -> Val:
    """dict(...) / OrderedDict(...) of known keys: pairs `[("fc1", layer), ...]`, another dict, or
    keywords; what `nn.Sequential(OrderedDict(...))` and `nn.ModuleDict(dict(...))` are built from."""
    items: dict[Any, Val] = {}
    if c.args:
        src = c.args[0]
        if isinstance(src, ParamsOf) and src.shape == "named" and not c.kwargs:
            return ParamsOf(src.mod, "mapping")  # dict(model.named_parameters()): names -> parameters, as state_dict()
        if isinstance(src, DictV):
            items.update(src.items)
        elif isinstance(src, SeqV) and src.items is not None:
            for pair in src.items:
                if not (isinstance(pair, SeqV) and pair.items is not None and len(pair.items) == 2):
                    return UNK
                key = pair.items[0]
                if not isinstance(key, Const):
                    return UNK
                items[key.value] = pair.items[1]
        else:
            return UNK
    items.update(c.kwargs)
    return DictV(items)


def _json_loads(lib: Library, c: LibCall) -> Val:
    """`json.loads('{"encoder": "cuda:0", "decoder": "cuda:1"}')` of a known string (an environment variable's
    default): its object, list, string or number; anything else (a nested object) not known."""
    import json

    return _parsed_text(c, json.loads)


def _literal_eval(lib: Library, c: LibCall) -> Val:
    """`ast.literal_eval("{'embed': 'cuda:0', 'blocks': ['cuda:0', 'cuda:1']}")` of a known string (a placement
    spelled as a Python literal, as a YAML file or a flag would give it): its dicts, lists, tuples, strings and
    numbers. literal_eval evaluates no code, so running it here is safe; a text too long to be a config is not
    read."""
    import ast

    def parse(text: str) -> Any:
        if len(text) > 100_000:
            raise ValueError("too long")
        try:
            return ast.literal_eval(text)
        except (SyntaxError, TypeError, MemoryError, RecursionError) as e:
            raise ValueError(str(e)) from None

    return _parsed_text(c, parse)


def _toml_loads(lib: Library, c: LibCall) -> Val:
    """`tomllib.loads('[placement]\\nencoder = "cuda:0"')` of a known string: its tables as dicts, as json.loads's."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: no TOML reader in the standard library
        return UNK
    return _parsed_text(c, tomllib.loads)


def _namedtuple(lib: Library, c: LibCall) -> Val:
    """`namedtuple("Cfg", "device step_device")` (or a list of names, `defaults=`): a class whose calls give a
    namespace of the fields (values.TupleType)."""
    names = c.args[1] if len(c.args) > 1 else c.kwargs.get("field_names")
    if isinstance(names, Const) and isinstance(names.value, str):
        fields = tuple(names.value.replace(",", " ").split())
    elif isinstance(names, SeqV) and names.items is not None:
        fields = tuple(i.value for i in names.items if isinstance(i, Const) and isinstance(i.value, str))
        if len(fields) != len(names.items):
            return UNK
    else:
        return UNK
    defaults = c.kwargs.get("defaults")
    kept: tuple[Val, ...] = ()
    if isinstance(defaults, SeqV) and defaults.items is not None:
        kept = defaults.items
    elif defaults is not None and not (isinstance(defaults, Const) and defaults.value is None):
        return UNK
    if not fields or len(kept) > len(fields) or not all(f.isidentifier() for f in fields):
        return UNK
    return TupleType(fields, kept)


def _yaml_load(lib: Library, c: LibCall) -> Val:
    """`yaml.safe_load('devices: {encoder: "cuda:0"}')` of a known string, read by the linter's own YAML subset
    (yaml_text.py: PyYAML is no dependency of the linter); a text beyond that subset is not known."""

    def parse(text: str) -> Any:
        data = yaml_text.load(text)
        if data is None:
            raise ValueError("beyond the YAML subset read here")
        return data

    return _parsed_text(c, parse)


def _parsed_text(c: LibCall, parse: Callable[[str], Any]) -> Val:
    """What `parse` makes of the call's first argument, a string the file spells out; else not known."""
    text = c.args[0] if c.args else None
    if not (isinstance(text, Const) and isinstance(text.value, str)):
        return UNK
    try:
        data = parse(text.value)
    except ValueError:  # (tomllib's TOMLDecodeError is one too)
        return UNK
    return _json_value(data)


def _json_value(data: Any) -> Val:
    if isinstance(data, dict):
        return DictV({k: _json_value(v) for k, v in data.items()})
    if isinstance(data, (list, tuple)):
        return SeqV(tuple(_json_value(v) for v in data), kind="list" if isinstance(data, list) else "tuple")
    if data is None or isinstance(data, (bool, int, float, str)):
        return Const(data)
    return UNK


def _namespace(lib: Library, c: LibCall) -> Val:
    """types.SimpleNamespace(device="cuda:1", ...): its attributes, read as `ns.device` (Expressions._constant_attr)."""
    if c.args:
        return UNK
    return DictV(dict(c.kwargs), namespace=True)


def _load(lib: Library, c: LibCall) -> Val:
    """torch.load(f, map_location="cpu"): what it gives (a state dict, a tensor) is where map_location
    puts it, when that names one device; otherwise where it was saved: what this file saved to that same path
    (`torch.save(stats, path)` ... `torch.load(path)`), its tensors on the devices they were saved from, else not
    known here."""
    where = c.kwargs.get("map_location", c.args[1] if len(c.args) > 1 else None)
    if where is None:
        key = _path_key(lib, c, 0)
        saved = lib.interp.saved.get(key) if key is not None else None
        return _loaded_back(saved, c.node) if saved is not None else UNK
    devs = as_device(where)
    dev = single(devs)
    if dev is None or dev.startswith("sym:"):
        return UNK
    key = _path_key(lib, c, 0)
    saved = lib.interp.saved.get(key) if key is not None else None
    if isinstance(saved, Obj) and saved.kind == "module" and is_splitish(saved):
        # `torch.save(model, path)` of a split model, then `torch.load(path, map_location="cuda:0")`: every
        # tensor of the pickled model goes to that one device, the split with them (MP007 at the load).
        lib.interp.recorder.record(Collapse(node=c.node, mode=c.st.mode, module=saved, devs=one(dev), meth="load"))
        origin = f"{LOADED} map_location={show(dev)}"
        return Obj("module", one(dev), origin=origin, at=c.node, opaque=True, extra={"collapsed": True})
    return Obj("any", one(dev), origin=f"{LOADED} map_location={show(dev)}", at=c.node)


def _environment_get(lib: Library, c: LibCall) -> Val:
    """`os.environ.get("OCR_DECODER_GPU", 1)`, at the top of a script or in a function: its default, where the file's
    environment GPU settings form a placement (command_line.environment_placement); otherwise not known."""
    read = command_line.environment_read(c.node)
    if read is None:
        return UNK
    default = lib.interp.stmts.environment_placement().get(read[0])
    return Const(default) if default is not None else UNK


def _getopt(lib: Library, c: LibCall) -> Val:
    """`opts, rest = getopt.getopt(sys.argv[1:], "t:c:", [...])` of no arguments (the script run with its defaults,
    Expressions._arguments): no options and nothing left, so the loop over `opts` changes no setting."""
    given = c.args[0] if c.args else c.kwargs.get("args")
    if isinstance(given, SeqV) and given.items == ():
        return SeqV((SeqV((), kind="list"), SeqV((), kind="list")), kind="tuple")
    return UNK


def _save(lib: Library, c: LibCall) -> Val:
    """torch.save(obj, path): remembered by the path, for a `torch.load(path)` of this file (`_load`)."""
    key = _path_key(lib, c, 1)
    if key is not None and c.args:
        lib.interp.saved[key] = c.args[0]
    return Const(None)


def _path_key(lib: Library, c: LibCall, at: int) -> Any:
    """The file a save or load names, as a key: a constant string, or a name (or attribute) of the function that
    runs the call; None for anything else (a buffer, an expression)."""
    arg = c.args[at] if len(c.args) > at else c.kwargs.get("f")
    if isinstance(arg, Const) and isinstance(arg.value, str):
        return ("file", arg.value)
    expr = c.exprs[at] if len(c.exprs) > at else None
    if isinstance(expr, (cst.Name, cst.Attribute)) and dotted(expr):
        fn = lib.interp.stack[-1].node if lib.interp.stack else None
        return ("name", id(fn), dotted(expr))
    return None


def _loaded_back(v: Val, node: cst.Call) -> Val:
    """A copy of what was saved, its tensors where they were (a new object each: loading twice gives two)."""
    if isinstance(v, Obj) and v.kind in ("tensor", "param", "buffer"):
        return Obj("tensor", v.devs, origin="loaded by torch.load without map_location, where it was saved", at=node)
    if isinstance(v, DictV) and not v.module and not v.namespace:
        return DictV({k: _loaded_back(x, node) for k, x in v.items.items()})
    if isinstance(v, SeqV) and v.items is not None and not v.module:
        return SeqV(tuple(_loaded_back(x, node) for x in v.items), kind=v.kind)
    return UNK


def _argument_parser(lib: Library, c: LibCall) -> Val:
    """argparse.ArgumentParser(...): its arguments' defaults, read off `parse_args()` (command_line.py)."""
    return command_line.new_parser(c.args, c.kwargs)


def _partial(lib: Library, c: LibCall) -> Val:
    """functools.partial(f, ...): called later as f with these arguments first (Calls.ev_call)."""
    if not c.args or any(isinstance(a, Starred) for a in c.args):
        return UNK
    return PartialV(c.args[0], tuple(c.args[1:]), dict(c.kwargs))


def _map_expr(node: cst.Call) -> cst.BaseExpression | None:
    """The expression given as device_map= (or dispatch_model's second argument)."""
    for i, a in enumerate(node.args):
        if (a.keyword is not None and a.keyword.value == "device_map") or (a.keyword is None and i == 1):
            return a.value
    return None


def _maybe_split_map(v: Val, expr: cst.BaseExpression | None) -> str:
    """'a device map (`device_map=X`)' when X is a device map whose devices are not known, so the
    model may be split over several GPUs: a dict of several entries, a dict built by a loop, or a
    name that says it is a map (`device_map`, `args.device_map`). '' otherwise: a single device, or
    nothing that says a map (`device_map=device` names one device)."""
    if expr is None or not _names_a_map(v, expr):
        return ""
    code = cst.Module([]).code_for_node(expr)
    code = code if len(code) <= 40 else code[:37] + "..."
    return f"a device map (`device_map={code}`)"


def _names_a_map(v: Val, expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Dict):
        keys = [e.key for e in expr.elements if isinstance(e, cst.DictElement)]
        # {"": device} (one entry) puts the whole model on one device
        return len(keys) >= 2 and len(keys) == len(expr.elements)
    if isinstance(expr, cst.DictComp):
        return True
    if isinstance(v, (Const, DeviceV)):
        return False
    if isinstance(expr, cst.Subscript):  # cfg["device_map"]
        key = expr.slice[0].slice.value if isinstance(expr.slice[0].slice, cst.Index) else None
        return isinstance(key, cst.SimpleString) and "map" in str(key.evaluated_value).lower()
    if isinstance(expr, (cst.Name, cst.Attribute)):
        return "map" in (dotted(expr) or "").rsplit(".", 1)[-1].lower()
    return False


def _device_map(v: Val, expr: cst.BaseExpression | None = None) -> tuple[str, Devs]:
    """(dispatched text, devs) for a device_map= argument."""
    text, devs = _known_device_map(v)
    if not text and (devs is None or isinstance(v, SymV)):  # a parameter is no known device
        maybe = _maybe_split_map(v, expr)
        if maybe:
            return maybe, None
    return text, devs


def _known_device_map(v: Val) -> tuple[str, Devs]:
    if isinstance(v, Const) and isinstance(v.value, str):
        if v.value in T.SPLIT_DEVICE_MAPS:
            return f"device_map={v.value!r}", None
        d = device_from_str(v.value)
        return "", one(d) if d else None
    if isinstance(v, DictV):
        devs: list[str] = []
        for item in v.items.values():
            item_devs = as_device(item)
            if item_devs is None:
                return "", None
            devs.extend(item_devs)
        ds = distinct_devices(devs)
        if len(ds) >= 2:
            return "device_map={" + ", ".join(show(d) for d in ds) + "}", None
        return "", frozenset(ds) if ds else None
    return "", as_device(v)


# ---------------------------------------------------------------- the table


def _exact(*groups: tuple[str | Iterable[str], Handler]) -> dict[str, Handler]:
    """name -> handler; a name given twice is an error (each name has one meaning)."""
    table: dict[str, Handler] = {}
    for names, handler in groups:
        for name in [names] if isinstance(names, str) else names:
            if name in table:
                raise ValueError(f"{name} has two handlers")
            table[name] = handler
    return table


EXACT: dict[str, Handler] = _exact(
    (T.DATA_PARALLEL, _data_parallel),
    (T.DDP, _ddp),
    (T.PARALLEL_PRIMITIVES, _parallel_primitive),
    (T.SET_DEVICE, _set_device),
    ("torch.device", _torch_device_call),
    ("torch.cuda.device", _cuda_device_context),
    ("torch.autograd.grad", _autograd_grad),
    (("torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"), _checkpoint),
    ("torch.Generator", _generator),
    (optimizers.OPTIMIZER_NAMES, _optimizer),
    (list(T.HOST_ARGUMENTS), _host_argument),
    ("functools.partial", _partial),
    (("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"), _data_loader),
    (("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"), _tensor_dataset),
    (tuple(f"torch.utils.data.{name}" for name in _HOST_SAMPLERS), _host_sampler),
    ("torch.optim.swa_utils.update_bn", _update_bn),
    (("types.SimpleNamespace", "argparse.Namespace"), _namespace),
    ("argparse.ArgumentParser", _argument_parser),
    ("optparse.OptionParser", lambda lib, c: command_line.new_option_parser()),
    ("torch.load", _load),
    (("os.environ.get", "os.getenv"), _environment_get),
    (("getopt.getopt", "getopt.gnu_getopt"), _getopt),
    ("json.loads", _json_loads),
    ("ast.literal_eval", _literal_eval),
    (("yaml.safe_load", "yaml.load", "yaml.full_load"), _yaml_load),
    ("collections.namedtuple", _namedtuple),
    (("configparser.ConfigParser", "configparser.RawConfigParser"), lambda lib, c: ini_text.new_parser()),
    ("tomllib.loads", _toml_loads),
    ("torch.save", _save),
    ("collections.OrderedDict", _dict_call),
    ("copy.deepcopy", _deep_copy),
    ("torch.optim.swa_utils.AveragedModel", _averaged_model),
    (("isinstance", "torch.is_tensor"), _isinstance),
    # torch.nn.utils is no tensor op, but this one concatenates its tensors: they must share a device
    (("torch.nn.utils.parameters_to_vector", "torch.nn.utils.convert_parameters.parameters_to_vector"), _tensor_op),
    (COUNT_FUNCTIONS, _device_count),
    ("torch.cuda.is_available", _cuda_available),
    ("torch.cuda.current_device", _current_device),
    (("torch.nn.Parameter", "torch.nn.parameter.Parameter"), _parameter),
    (("torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ParameterList"), _sequential),
    (("torch.nn.ModuleDict", "torch.nn.ParameterDict"), _module_dict),
    ([f"torch.{n}" for n in T.DEFAULT_DEVICE_CHANGERS], _default_device_changer),
    ([f"torch.cuda.{n}" for n in T.CUDA_TENSOR_TYPES], _cuda_tensor_type),
    ([f"torch.{n}" for n in T.FACTORIES - T.DRAWN_FROM_TENSORS], _factory),
    ([f"torch.{n}" for n in T.DRAWN_FROM_TENSORS], _drawn),
    ([f"torch.{n}" for n in T.LIKE_FACTORIES], _like_factory),
    ([f"torch.{n}" for n in T.DTYPE_NAMES], _dtype),
)


def _is_nn_class(q: str, last: str) -> bool:
    return q.startswith("torch.nn.") and last[:1].isupper() and q.count(".") == 2


def _is_wrapper(q: str, last: str, kwargs: dict[str, Val]) -> bool:
    return (last in T.PIPELINE_WRAPPERS or last in T.PROCESS_PIPELINE_WRAPPERS) and not q.startswith("torch.nn.")


def _is_dispatch(q: str, last: str, kwargs: dict[str, Val]) -> bool:
    return ("device_map" in kwargs or last in T.DISPATCHERS) and not _is_wrapper(q, last, kwargs)


def _is_builtin(q: str, last: str, kwargs: dict[str, Val]) -> bool:
    return q in T.BUILTINS and not _is_dispatch(q, last, kwargs)


def _is_device_hook(q: str, last: str, kwargs: dict[str, Val]) -> bool:
    return (
        not q.startswith("torch.")
        and any(w in last.lower() for w in T.DEVICE_HOOK_WORDS)
        and not _is_wrapper(q, last, kwargs)
        and not _is_dispatch(q, last, kwargs)
        and q not in T.BUILTINS
    )


def _is_tensor_op(q: str, last: str, kwargs: dict[str, Val]) -> bool:
    return T.is_torch_op(q) and not _is_wrapper(q, last, kwargs) and not _is_dispatch(q, last, kwargs)


def _is_module_class(q: str, last: str, kwargs: dict[str, Val]) -> bool:
    return (
        last[:1].isupper()
        and ("device" in kwargs or _is_nn_class(q, last))
        and not _is_wrapper(q, last, kwargs)
        and not _is_dispatch(q, last, kwargs)
        and not _is_device_hook(q, last, kwargs)
        and not T.is_torch_op(q)
    )


@dataclass(frozen=True)
class Family:
    """Names known by their shape: `accepts(q, last, kwargs)`."""

    name: str
    accepts: Callable[[str, str, dict[str, Val]], bool]
    handler: Handler


FAMILIES: tuple[Family, ...] = (
    Family("pipeline wrapper (fairscale Pipe and AsyncPipe, tensor_parallel)", _is_wrapper, _pipeline_wrapper),
    Family("dispatched with device_map= (accelerate, transformers)", _is_dispatch, _dispatcher),
    Family("python builtin", _is_builtin, _builtin),
    Family("device hook of another library (cpu_offload, add_hook_to_module)", _is_device_hook, _device_hook),
    Family("torch op on tensors", _is_tensor_op, _tensor_op),
    Family("torch foreach kernel (pairs lists by index)", foreach.is_foreach, foreach.foreach_op),
    Family("module class (torch.nn.X, or any class built with device=)", _is_module_class, _module_class),
)


def families_for(q: str, kwargs: dict[str, Val]) -> list[Family]:
    """Every family that accepts a call (at most one: tests/test_devices_layout.py)."""
    last = q.rsplit(".", 1)[-1]
    return [f for f in FAMILIES if f.accepts(q, last, kwargs)]


def handler_for(q: str, last: str, kwargs: dict[str, Val]) -> Handler | None:
    handler = EXACT.get(q)
    if handler is not None:
        return handler
    for f in FAMILIES:
        if f.accepts(q, last, kwargs):
            return f.handler
    return None


# Factories whose first argument is the shape: an empty one makes a 0-d tensor.
_SHAPED_FACTORIES = frozenset({"zeros", "ones", "empty", "full", "rand", "randn"})


def _empty_shape(v: Val) -> bool:
    return isinstance(v, SeqV) and v.items == ()
