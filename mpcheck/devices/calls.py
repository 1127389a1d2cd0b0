"""Calls: library functions by canonical name, methods of values, and moves
(`.to()`, `.cuda()`, `.cpu()`). These are methods of `Interp` (bound in its
class body) kept in their own module so that each file has one job."""

from __future__ import annotations

import libcst as cst

from mpcheck.devices import torchapi as T
from mpcheck.devices.names import dotted
from mpcheck.devices.values import (
    CURRENT,
    UNK,
    Const,
    DeviceV,
    DictV,
    DtypeV,
    Obj,
    QName,
    SeqV,
    SymV,
    Val,
    as_device,
    conflict,
    device_from_str,
    distinct_devices,
    is_split_devs,
    join,
    one,
    show,
    single,
)

_DEVICE_WORDS = ("device", "dev", "gpu", "cuda", "rank")


def _resolve_current(devs, st):
    """'cuda' means the current device: after set_device(k) that is cuda:k."""
    if devs is not None and CURRENT in devs and st.setdev is not None:
        if st.cur is None or st.cur == CURRENT:
            return None
        return frozenset(st.cur if d == CURRENT else d for d in devs)
    return devs


def _is_splitish(v: Val) -> bool:
    if isinstance(v, Obj):
        return bool(v.split or v.dispatched)
    if isinstance(v, SeqV) and v.module:
        from mpcheck.devices.interp import _placements

        return is_split_devs([d for d, _ in _placements(v)])
    return False


def _holds_split(v: Val) -> bool:
    return isinstance(v, SeqV) and v.items is not None and any(_is_splitish(i) for i in v.items)


def _device_map(v: Val):
    """(dispatched text, devs) for a device_map= argument."""
    if isinstance(v, Const) and isinstance(v.value, str):
        if v.value in T.SPLIT_DEVICE_MAPS:
            return f"device_map={v.value!r}", None
        d = device_from_str(v.value)
        return "", one(d) if d else None
    if isinstance(v, DictV):
        devs = []
        for item in v.items.values():
            d = as_device(item)
            if d is None:
                return "", None
            devs.extend(d)
        ds = distinct_devices(devs)
        if len(ds) >= 2:
            return "device_map={" + ", ".join(show(d) for d in ds) + "}", None
        return "", frozenset(ds) if ds else None
    d = as_device(v)
    return "", d


def library_call(self, q: str, node: cst.Call, st) -> Val:
    args, kwargs = self.ev_args(node, st)
    exprs = self._arg_nodes
    last = q.rsplit(".", 1)[-1]
    if q in T.DATA_PARALLEL:
        mod = args[0] if args else kwargs.get("module", UNK)
        if _is_splitish(mod):
            st.scope.split_seen = True
            self.emit("data_parallel", node, st, module=mod, q=q)
        return mod
    if q in T.DDP:
        mod = args[0] if args else kwargs.get("module", UNK)
        if _is_splitish(mod):
            st.scope.split_seen = True
            bad = []
            for i, name in ((1, "device_ids"), (2, "output_device")):
                v = kwargs.get(name, args[i] if len(args) > i else None)
                if v is None or (isinstance(v, Const) and v.value is None):
                    continue
                bad.append(name)
            if bad:
                self.emit("ddp_device_ids", node, st, module=mod, args=bad)
        return mod
    if q in T.PARALLEL_PRIMITIVES:
        split_args = [a for a in list(args) + list(kwargs.values()) if _is_splitish(a) or _holds_split(a)]
        if split_args or st.scope.split_class:
            self.emit("parallel_primitive", node, st, q=q, module=split_args[0] if split_args else st.self_obj,
                      on_arg=bool(split_args))
        return UNK
    if q in T.SET_DEVICE:
        devs = as_device(args[0]) if args else None
        st.cur = single(devs) if devs else None
        st.setdev = node
        return Const(None)
    if q == "torch.device":
        return _torch_device(args)
    if q in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
        a = args[0] if args else UNK
        return Obj("param", a.devs if isinstance(a, Obj) else None, origin=a.origin if isinstance(a, Obj) else "",
                   at=a.at if isinstance(a, Obj) else None, invariant=True)
    if q in ("torch.nn.Sequential", "torch.nn.ModuleList"):
        from mpcheck.devices.interp import Starred

        stars = [a for a in args if isinstance(a, Starred)]
        if stars:
            elem = stars[0].elem
            for a in args:
                elem = join(elem, a.elem if isinstance(a, Starred) else a)
            return SeqV(None, elem=elem, module=True)
        if q.endswith("ModuleList"):
            src = args[0] if args else SeqV(())
            if isinstance(src, SeqV):
                return SeqV(src.items, elem=src.elem, kind="list", module=True)
            return SeqV(None, module=True)
        if len(args) == 1 and isinstance(args[0], DictV):
            return SeqV(tuple(args[0].items.values()), module=True)
        return SeqV(tuple(args), module=True)
    if q == "torch.nn.ModuleDict":
        src = args[0] if args else DictV({})
        return DictV(dict(src.items), module=True) if isinstance(src, DictV) else DictV({}, module=True)
    if q.startswith("torch.") and last in T.DEFAULT_DEVICE_CHANGERS:
        self.default_device_changed = True
        return UNK
    if q.startswith("torch.cuda.") and last in T.CUDA_TENSOR_TYPES:
        self._indexless(node, st)
        return Obj("tensor", _resolve_current(one(CURRENT), st), origin=f"created by {q}() on the current CUDA device", at=node)
    if q.startswith("torch.") and last in T.FACTORIES and q.count(".") == 1:
        return self.factory(q, args, kwargs, node, st)
    if q.startswith("torch.") and last in T.LIKE_FACTORIES and q.count(".") == 1:
        if "device" in kwargs:
            return self.factory(q, args, kwargs, node, st)
        a = args[0] if args else UNK
        return Obj("tensor", a.devs, origin=a.origin, at=a.at) if isinstance(a, Obj) else UNK
    if q.startswith("torch.") and T.is_dtype_name(q):
        return DtypeV()
    if last in T.PIPELINE_WRAPPERS and not q.startswith("torch.nn."):
        # fairscale's Pipe, tensor_parallel(...): the result spans several devices by construction.
        return Obj("module", None, dispatched=f"{last}()", origin=f"split by {last}()", at=node)
    dm = kwargs.get("device_map")
    if dm is not None or last in T.DISPATCHERS:
        return self.dispatched(q, args, kwargs, node, st)
    if q in T.BUILTINS:
        return _builtin(self, q, args, kwargs, node, st)
    if not q.startswith("torch.") and any(w in last.lower() for w in T.DEVICE_HOOK_WORDS):
        # accelerate's cpu_offload(m, execution_device=...), add_hook_to_module(m, ...): the module
        # now runs wherever its hook moves it; the model no longer knows where.
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, Obj) and a.kind in ("module", "any") and a.cls is None and a.attrs is None:
                a.devs, a.origin = None, f"managed by {last}()"
        return UNK
    if T.is_torch_op(q):
        return self.tensor_op(q, args, kwargs, node, st, exprs)
    if "device" in kwargs and last[:1].isupper():
        devs = _resolve_current(as_device(kwargs["device"]), st)
        if devs is not None:
            self._note_indexless_arg(kwargs["device"], node, st)
            return Obj("module" if q.startswith("torch.nn.") else "any", devs, origin=f"built with device={show(single(devs))}", at=node)
    if q.startswith("torch.nn.") and last[:1].isupper() and q.count(".") == 2:
        if last.endswith("Loss"):
            weights = {k: v for k, v in kwargs.items() if k in ("weight", "pos_weight") and isinstance(v, Obj)}
            return Obj("loss", None, label="", extra=weights)
        if last in T.PARAMETERLESS:
            return Obj("passthrough", None)
        if last in T.PARAMETERED:
            from mpcheck.devices.interp import UNPLACED

            return Obj("module", None, origin=UNPLACED)
        return Obj("module", None)
    return UNK


def _torch_device(args) -> Val:
    if not args:
        return UNK
    a = args[0]
    if len(args) >= 2 and isinstance(a, Const) and a.value == "cuda":
        idx = args[1]
        if isinstance(idx, Const) and isinstance(idx.value, int):
            return DeviceV(one(f"cuda:{idx.value}"))
        if isinstance(idx, SymV):
            return DeviceV(one(f"sym:{idx.name}"))
        return DeviceV(None)
    if isinstance(a, SymV):
        return DeviceV(one(f"sym:{a.name}"))
    d = as_device(a)
    return DeviceV(d, text="torch.device") if d is not None else (a if isinstance(a, DeviceV) else DeviceV(None))


def _builtin(self, q, args, kwargs, node, st) -> Val:
    if q == "range":
        if len(args) == 1 and isinstance(args[0], Const) and isinstance(args[0].value, int) and 0 <= args[0].value <= 16:
            return SeqV(tuple(Const(i) for i in range(args[0].value)))
        if len(args) == 2 and all(isinstance(a, Const) and isinstance(a.value, int) for a in args) and 0 <= args[1].value - args[0].value <= 16:
            return SeqV(tuple(Const(i) for i in range(args[0].value, args[1].value)))
        return SeqV(None, elem=UNK)
    if q == "enumerate" and args:
        src = args[0]
        if isinstance(src, SeqV) and src.items is not None:
            return SeqV(tuple(SeqV((Const(i), v), kind="tuple") for i, v in enumerate(src.items)))
        elem = src.elem if isinstance(src, SeqV) else UNK
        return SeqV(None, elem=SeqV((UNK, elem), kind="tuple"))
    if q == "zip" and args:
        from mpcheck.devices.interp import _iter_elem

        lengths = [len(a.items) for a in args if isinstance(a, SeqV) and a.items is not None]
        if lengths:
            n = min(lengths)
            cols = [a.items[:n] if isinstance(a, SeqV) and a.items is not None else (_iter_elem(a, None),) * n for a in args]
            return SeqV(tuple(SeqV(tuple(c[i] for c in cols), kind="tuple") for i in range(n)))
        return SeqV(None, elem=SeqV(tuple(_iter_elem(a, None) for a in args), kind="tuple"))
    if q in ("list", "tuple", "reversed", "sorted", "iter") and args:
        a = args[0]
        if isinstance(a, SeqV):
            items = a.items
            if q == "reversed" and items is not None:
                items = tuple(reversed(items))
            return SeqV(items, elem=a.elem, kind="list", module=a.module)
        return UNK
    if q == "next" and args:
        a = args[0]
        if isinstance(a, SeqV):
            return a.items[0] if a.items else a.elem
        if isinstance(a, _Params):
            return a.first()
        return UNK
    if q == "len" and args and isinstance(args[0], SeqV) and args[0].items is not None:
        return Const(len(args[0].items))
    if q == "getattr" and len(args) >= 2 and isinstance(args[1], Const) and isinstance(args[1].value, str):
        base = args[0]
        if isinstance(base, Obj) and base.attrs is not None:
            return base.attrs.get(args[1].value, UNK)
        return UNK
    if q == "super":
        return _Super()
    return UNK


class _Super(Val):
    __slots__ = ()


class _Params(Val):
    """`module.parameters()`: next() of it is the first parameter, on the first placed submodule."""

    __slots__ = ("mod",)

    def __init__(self, mod: Obj) -> None:
        self.mod = mod

    def first(self) -> Val:
        m = self.mod
        if m.attrs is None:
            return Obj("param", m.devs, origin=m.origin, at=m.at, invariant=True) if m.devs is not None else UNK
        for v in m.attrs.values():
            if isinstance(v, Obj) and v.kind in ("module", "any", "param", "buffer"):
                if v.devs is None:
                    return UNK
                return Obj("param", v.devs, origin=f"the first parameter, in `{v.label}`", at=v.at, invariant=True)
            if isinstance(v, SeqV) and v.module:
                item = v.items[0] if v.items else v.elem
                return Obj("param", item.devs, origin="the first parameter", at=item.at, invariant=True) if isinstance(item, Obj) and item.devs else UNK
        return UNK


def factory(self, q, args, kwargs, node, st) -> Val:
    last = q.rsplit(".", 1)[-1]
    if "device" in kwargs:
        dv = kwargs["device"]
        devs = as_device(dv)
        if devs is None and isinstance(dv, Obj):
            devs = dv.devs
        devs = _resolve_current(devs, st)
        self._note_indexless_arg(dv, node, st)
        origin = f"created by torch.{last}(device=...)"
    elif self.default_device_changed:
        return UNK
    else:
        devs = one("cpu")
        origin = f"created on the CPU by torch.{last}() without device="
    const = all(isinstance(a, (Const, SeqV)) for a in args)
    kind = "tensor"
    if last in ("tensor", "as_tensor") and args and not isinstance(args[0], SeqV) and devs == one("cpu"):
        kind = "scalar"  # maybe a 0-d CPU tensor, which mixes with CUDA tensors
    return Obj(kind, devs, origin=origin, at=node, invariant=const)


def dispatched(self, q, args, kwargs, node, st) -> Val:
    text, devs = _device_map(kwargs.get("device_map", args[1] if len(args) > 1 else UNK))
    if text:
        obj = Obj("module", None, label="", dispatched=text, origin=f"dispatched with {text}", at=node)
        if q.rsplit(".", 1)[-1] in T.DISPATCHERS and node.args and isinstance(node.args[0].value, cst.Name):
            st.env[node.args[0].value.value] = obj
        return obj
    if devs is not None:
        return Obj("module", devs, origin=f"loaded with device_map on {show(single(devs))}", at=node)
    return UNK


def tensor_op(self, q, args, kwargs, node, st, exprs=None) -> Val:
    """A torch function on tensors: its inputs must agree; its output follows them."""
    first = None  # (value, expression)
    flat: list = []
    nodes = list(exprs or [])
    for i, a in enumerate(list(args) + [v for k, v in kwargs.items()]):
        e = nodes[i] if i < len(nodes) else None
        if i >= len(args) and list(kwargs)[i - len(args)] == "out":
            continue
        if isinstance(a, SeqV) and a.items is not None:
            elts = e.elements if isinstance(e, (cst.List, cst.Tuple)) and len(e.elements) == len(a.items) else None
            flat.extend((x, elts[j].value if elts else None) for j, x in enumerate(a.items))
        else:
            flat.append((a, e))
    from mpcheck.devices.interp import failed, used

    used(*(a for a, _ in flat))
    if any(failed(a) for a, _ in flat):
        from mpcheck.devices.interp import FAILED

        return FAILED
    loss = T.is_loss(q)
    known = [a for a, _ in flat if isinstance(a, Obj) and a.kind not in ("scalar", "module") and a.devs is not None]
    for a in known:
        for b in known:
            self._probe_hit(a, b.devs)
    for a, e in flat:
        if not isinstance(a, Obj) or a.kind in ("scalar", "module", "passthrough", "loss"):
            continue
        if first is not None:
            self.note_target(node, "op", first[0].devs)  # an unknown device too: then no fix
        if first is None or first[0].devs is None:
            first = (a, e) if first is None or a.devs is not None else first
            continue
        if conflict(a.devs, first[0].devs):
            from mpcheck.devices.interp import FAILED

            self.emit("loss_mismatch" if loss else "mismatch", node, st, key="op", value=a, target=first[0].devs,
                      expr=e, what=first[0].label or (first[1] is not None and "") or "its first tensor argument",
                      what_expr=first[1], op=q, other=first[0], other_expr=first[1])
            return FAILED
    if first is None:
        return UNK
    inv = all(isinstance(a, Obj) and a.invariant or isinstance(a, (Const, DtypeV)) for a, _ in flat)
    f = first[0]
    return Obj("tensor", f.devs, origin=f.origin, at=f.at, invariant=inv, chain=f.chain)


def _indexless(self, node, st) -> None:
    if st.setdev is None:
        return
    st.scope.indexless_any.append(node)
    # Inside `with torch.cuda.device(k)` an index-less placement says "k" on purpose;
    # set_device() leaks into everything after it.
    if id(st.setdev) not in self._with_devices:
        st.scope.indexless.append((node, st.setdev, st.cur, st.mode))


def _note_indexless_arg(self, v: Val, node, st) -> None:
    if isinstance(v, (Const, DeviceV)) and as_device(v, ints_are_cuda=False) == one(CURRENT):
        self._indexless(node, st)


def _move_target(self, meth, args, kwargs, node, st):
    """(devs, is_device_move) for .to/.cuda/.cpu; is_device_move None when unclear."""
    if meth == "cpu":
        return one("cpu"), True
    if meth == "cuda":
        a = args[0] if args else kwargs.get("device")
        if a is None or (isinstance(a, Const) and a.value is None):
            self._indexless(node, st)
            return _resolve_current(one(CURRENT), st), True
        devs = as_device(a)
        if devs is None and isinstance(a, SymV):
            devs = one(f"sym:{a.name}")
        return devs, True
    # .to(...)
    a = args[0] if args else kwargs.get("device", kwargs.get("other"))
    if a is None:
        return None, False  # .to(dtype=...), .to(memory_format=...)
    if isinstance(a, DtypeV) or (isinstance(a, QName) and T.is_dtype_name(a.q)):
        return None, False
    if isinstance(a, Obj) and a.kind != "module":
        return a.devs, True
    devs = as_device(a)
    if devs is not None:
        if devs == one(CURRENT):
            self._indexless(node, st)
        return _resolve_current(devs, st), True
    if isinstance(a, DeviceV):
        return None, True
    first = node.args[0].value if node.args else None
    text = (dotted(first) or "") if first is not None else ""
    if text and any(w in text.rsplit(".", 1)[-1].lower() for w in _DEVICE_WORDS):
        return (one(f"sym:{text}") if isinstance(a, SymV) else None), True
    return None, None


def move(self, recv: Val, meth: str, args, kwargs, node: cst.Call, st) -> Val:
    devs, is_device = self._move_target(meth, args, kwargs, node, st)
    if not is_device:
        return recv if is_device is False else (UNK if not isinstance(recv, Obj) or recv.kind != "module" else recv)
    recv_expr = node.func.value if isinstance(node.func, cst.Attribute) else None
    if st.in_init and recv is st.self_obj and isinstance(recv, Obj) and recv.attrs is not None:
        # self.to(device) in __init__: everything placed so far goes there.
        for attr, v in list(recv.attrs.items()):
            if isinstance(v, (Obj, SeqV)) and (not isinstance(v, Obj) or v.kind in ("module", "any", "param", "buffer", "tensor")):
                recv.attrs[attr] = self.move(v, meth, args, kwargs, node, st) if isinstance(v, SeqV) else (
                    v.with_(devs=devs, origin=f"moved with the whole module by self.{meth}()", at=node) if v.kind != "passthrough" else v)
        return recv
    if _is_splitish(recv):
        st.scope.split_seen = True
        if devs != one("cpu"):  # .cpu() frees the GPUs on purpose (saving, deparallelize); it crams nothing
            self.emit("collapse", node, st, module=recv, devs=devs, meth=meth)
        res = Obj("module", devs, label=getattr(recv, "label", ""), origin=f"moved whole by .{meth}()", at=node, opaque=True)
        self._rebind(recv_expr, res, st)
        return res
    where = show(single(devs)) if single(devs) else "a device"
    if isinstance(recv, SeqV) and recv.module:
        moved = [self.move(i, meth, args, kwargs, node, st) if isinstance(i, (Obj, SeqV)) else _placed_any(devs, where, node)
                 for i in (recv.items or ())]
        elem = self.move(recv.elem, meth, args, kwargs, node, st) if recv.items is None and isinstance(recv.elem, (Obj, SeqV)) else _placed_any(devs, where, node)
        res = SeqV(tuple(moved) if recv.items is not None else None, elem=elem, kind=recv.kind, module=True)
        self._rebind(recv_expr, res, st)
        return res
    if isinstance(recv, Obj) and recv.kind in ("module", "passthrough", "loss"):
        if recv.kind in ("passthrough", "loss"):
            return recv
        if st.in_init and recv.cls is None and recv.attrs is None:
            # Module.to() works in place: `for layer in self.layers: layer.to(dev)` places
            # the items of the container too (only while __init__ builds them).
            recv.devs, recv.origin, recv.at = devs, f"moved to {where} by .{meth}()", node
            return recv
        res = Obj("module", devs, label=recv.label, origin=f"moved to {where} by .{meth}()", at=node,
                  opaque=recv.opaque or recv.cls is not None)
        self._rebind(recv_expr, res, st)
        return res
    if isinstance(recv, Obj):
        chain = self._chain_step(recv, devs, node)
        self.emit("transfer", node, st, value=recv, devs=devs, repeated=self._repeated(recv, st, node))
        return recv.with_(
            kind="tensor" if recv.kind in ("param", "buffer") or (recv.kind == "scalar" and devs != one("cpu")) else recv.kind,
            devs=devs,
            origin=f"moved to {where}",
            at=node,
            moved_from=recv.devs,
            moved_at=node,
            worked=False,
            chain=chain,
        )
    if devs is None:
        return UNK
    return Obj("any", devs, origin=f"moved to {where}", at=node)


def _placed_any(devs, where, node) -> Val:
    return Obj("any", devs, origin=f"moved to {where}", at=node) if devs is not None else UNK


def _chain_step(self, recv: Obj, devs, node):
    """Follow an activation's lineage across transfers (MP006)."""
    src, dst = single(recv.devs), single(devs)
    if src is None or dst is None or src == dst or src.startswith("sym:__") or self._second_pass:
        return recv.chain
    chain = recv.chain
    if not recv.worked and recv.moved_from is not None and single(recv.moved_from) == dst:
        # A round trip with no work in between: MP005's business; it is not a stage crossing.
        if chain is not None and len(chain["devs"]) >= 2 and chain["devs"][-1] == src:
            chain["devs"].pop()
            chain["nodes"] and chain["nodes"].pop()
        return chain
    if chain is None:
        chain = {"devs": [src], "nodes": [], "first_revisit": None}
        self.chains.append(chain)
    if chain["devs"][-1] != src:
        chain["devs"].append(src)
    if dst in chain["devs"] and chain["first_revisit"] is None:
        chain["first_revisit"] = node
    chain["devs"].append(dst)
    chain["nodes"].append(node)
    return chain


def _repeated(self, recv: Obj, st, node=None) -> str:
    """'loop' / 'call' when the moved value is the same unchanging tensor every time (MP011)."""
    if not recv.invariant:
        return ""
    expr = node.func.value if node is not None and isinstance(node.func, cst.Attribute) else None
    so = st.self_obj
    root = expr
    while isinstance(root, (cst.Subscript, cst.Call)):  # self.causal[:n, :n], self.table.t()
        root = root.value if isinstance(root, cst.Subscript) else (root.func.value if isinstance(root.func, cst.Attribute) else None)
    if not st.in_init and isinstance(so, Obj) and so.attrs and isinstance(root, cst.Attribute) \
            and isinstance(root.value, cst.Name) and root.value.value == "self":
        attr = so.attrs.get(root.attr.value)
        if isinstance(attr, Obj) and attr.invariant and (attr is recv or root is not expr):
            return "call"
    if self._loop_outer and isinstance(expr, cst.Name):
        for outer, assigned in self._loop_outer:
            if id(recv) in outer and expr.value not in assigned:
                return "loop"
    return ""


def _rebind(self, expr, val, st) -> None:
    # nn.Module.to()/.cuda() move the module in place: the name now holds the moved module.
    if isinstance(expr, cst.Name):
        st.env[expr.value] = val
    elif isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and st.self_obj is not None:
        base = st.env.get(expr.value.value)
        if base is st.self_obj and isinstance(base, Obj) and base.attrs is not None:
            if st.in_init:
                base.attrs[expr.attr.value] = val
            else:
                st.env[f"{id(base)}.{expr.attr.value}"] = val


def method_call(self, recv: Val, meth: str, args, kwargs, node: cst.Call, st) -> Val:
    if meth in ("to", "cuda", "cpu"):
        return self.move(recv, meth, args, kwargs, node, st)
    if "device_map" in kwargs:
        return self.dispatched(meth, args, kwargs, node, st)
    if meth == "parallelize" and isinstance(recv, Obj | type(UNK)):
        obj = Obj("module", None, dispatched="parallelize()", origin="split by .parallelize()", at=node)
        self._rebind(node.func.value, obj, st)
        return UNK
    if isinstance(recv, Obj) and meth == "parameters" and recv.kind in ("module", "any"):
        return _Params(recv)
    if isinstance(recv, Obj):
        if recv.cls is not None and recv.attrs is not None:
            m = recv.cls.method(meth)
            if m is not None:
                return self.call_function(m, recv, args, kwargs, st, node)
            if meth in ("register_buffer", "register_parameter") and len(args) >= 2 and isinstance(args[0], Const):
                v = args[1]
                if isinstance(v, Obj):
                    v = v.with_(kind="buffer" if meth == "register_buffer" else "param", invariant=True, label=f"self.{args[0].value}")
                if st.in_init and recv is st.self_obj:
                    recv.attrs[str(args[0].value)] = v
                return Const(None)
            if meth in T.DTYPE_METHODS:
                return recv
            return UNK
        if recv.kind in ("module",):
            if meth == "forward":
                return self.module_call(recv, args, kwargs, st, node)
            if meth in T.DTYPE_METHODS:
                return recv
            return UNK
        if meth in T.NON_TENSOR_METHODS:
            return UNK
        if meth in T.DTYPE_METHODS:
            return recv
        from mpcheck.devices.interp import used

        used(recv, *args)
        if meth.startswith("new_"):
            devs = as_device(kwargs["device"]) if "device" in kwargs else recv.devs
            return Obj("tensor", devs, origin=f"created by .{meth}() on {recv.label or 'a tensor'}'s device", at=node)
        if meth in T.SAME_DEVICE_METHODS:
            exprs = self._arg_nodes
            for i, a in enumerate(list(args) + list(kwargs.values())):
                self.check_operand(node, a, recv.devs, st, what=recv.label or "the tensor", arg_index=i, op=f".{meth}()",
                                   expr=exprs[i] if i < len(exprs) else None)
        inv = recv.invariant and all(isinstance(a, (Const, DtypeV)) for a in args)
        return recv.with_(label="", kind="tensor", worked=True, invariant=inv)
    if isinstance(recv, SeqV):
        if meth == "append" and args:
            if recv.items is not None and not self._in_unknown_loop:
                recv.items = recv.items + (args[0],)
            else:
                recv.elem = args[0] if recv.items == () or recv.elem is UNK else join(recv.elem, args[0])
                recv.items = None
            return Const(None)
        if meth == "extend" and args and isinstance(args[0], SeqV):
            if recv.items is not None and args[0].items is not None and not self._in_unknown_loop:
                recv.items = recv.items + args[0].items
            else:
                recv.items = None
            return Const(None)
        if meth in ("to", "cuda"):
            return self.move(recv, meth, args, kwargs, node, st)
        return UNK
    if isinstance(recv, DictV):
        if meth == "values":
            return SeqV(tuple(recv.items.values()))
        if meth == "items":
            return SeqV(tuple(SeqV((Const(k), v), kind="tuple") for k, v in recv.items.items()))
        if meth == "keys":
            return SeqV(tuple(Const(k) for k in recv.items))
        if meth == "get" and args and isinstance(args[0], Const):
            return recv.items.get(args[0].value, args[1] if len(args) > 1 else Const(None))
        return UNK
    if isinstance(recv, _Super):
        # super().__init__(...) / super().forward(...) of a base class defined in this file.
        here = self._stack[-1].cls if self._stack else None
        if here is not None and st.self_obj is not None:
            for base in here.local_bases:
                m = base.method(meth)
                if m is not None:
                    return self.call_function(m, st.self_obj, args, kwargs, st, node)
        return Const(None) if meth == "__init__" else UNK
    if isinstance(recv, Const) and isinstance(recv.value, str) and meth == "format":
        return UNK
    return UNK
