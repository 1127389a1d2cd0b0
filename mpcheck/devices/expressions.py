"""Expressions: the abstract value of each expression of the tree.

`Expressions.ev` dispatches on the node's type (the table `_EV` at the end);
calls go to `calls.Calls`. Operands that must agree (a binary op, an index)
are checked here (`check_operand`), and a disagreement is recorded as an
`events.Mismatch`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import libcst as cst

from mpcheck.codes import PER_ITEM_MIN_ITEMS
from mpcheck.devices import device_loops, element_reads, library, map_lookups, torchapi, ways
from mpcheck.devices.events import Mismatch, OversizedMove
from mpcheck.devices.moves import plain_device_move
from mpcheck.devices.names import a_number, canonical, dotted
from mpcheck.devices.program import MAX_UNROLL, ClassInfo, Part, State, params_of
from mpcheck.devices.summarized import constant_value, summarized_attr
from mpcheck.devices.values import (
    BY_KEY,
    CURRENT,
    FAILED,
    GRADIENT_OF_OUTPUT,
    LOADED,
    OFF_CHAIN,
    PROBE,
    UNK,
    AutogradCtx,
    ClassRef,
    Const,
    DeviceV,
    Devs,
    DictV,
    FuncRef,
    LambdaV,
    NamePrefix,
    Obj,
    ParamsOf,
    QName,
    SeqV,
    Summarized,
    SymV,
    Val,
    affine,
    affine_name,
    both_cuda,
    conflict,
    decided,
    device_from_str,
    failed,
    is_probe,
    iter_elem,
    iter_items,
    join,
    join_all,
    join_devs,
    known_tensor,
    made_on_cpu_by_default,
    maybe_a_number,
    one,
    single,
    spans_of,
    used,
    weight_on_gpu,
)
from mpcheck.devices.walk import attribute_assignments, target_names, turns_off_grad, walk
from mpcheck.devices.ways import path_off

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.interp import Interp


# The bases that make a class an enumeration: its body's constants are members (Expressions._enum_member).
_ENUM_BASES = frozenset({"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag"})


def _known_length(v: SeqV | DictV) -> int | None:
    """The number of items of a list, tuple or dict whose items are all known; None where it is not known."""
    if isinstance(v, DictV):
        return None if v.namespace or v.ini else len(v.items)
    return None if v.items is None else len(v.items)


class Expressions(Part):
    def __init__(self, interp: Interp) -> None:
        super().__init__(interp)

    def qname(self, node: cst.CSTNode | None) -> str | None:
        """The canonical dotted name an expression refers to (imports resolved)."""
        d = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        if d is None:
            return None
        head, _, rest = d.partition(".")
        v = self.interp.globals.get(head)
        if isinstance(v, QName):
            return canonical(v.q + ("." + rest if rest else ""))
        if v is None and head in torchapi.BUILTINS:
            return head
        return None

    def ev(self, node: cst.CSTNode, st: State) -> Val:
        t = type(node)
        f = _EV.get(t)
        if f is None:
            return UNK
        return f(self, node, st)

    def ev_name(self, node: cst.Name, st: State) -> Val:
        v = st.env.get(node.value)
        if v is not None:
            return v
        if node.value in ("True", "False", "None"):
            return Const({"True": True, "False": False, "None": None}[node.value])
        if node.value in torchapi.BUILTINS:
            return QName(node.value)
        return UNK

    def ev_attr(self, node: cst.Attribute, st: State) -> Val:
        base = self.ev(node.value, st)
        name = node.attr.value
        if isinstance(base, QName):
            if base.q in self.interp.project:
                # `config.first` of a project module imported whole (`import config`): its summary.
                return self.interp.imported(f"{base.q}.{name}")
            return QName(canonical(f"{base.q}.{name}"))
        if isinstance(base, SeqV) and base.kind == "tuple" and name in ("values", "indices") and base.items:
            if len(base.items) == 2:
                return base.items[name == "indices"]  # `x.max(-1).indices`: a (values, indices) named tuple
        if isinstance(base, AutogradCtx):
            return base.items.get(name, UNK)  # `ctx.saved_tensors` in a custom Function's backward
        if isinstance(base, ClassRef) and (member := self._enum_member(base.info, name)) is not None:
            return member
        if isinstance(base, (ClassRef, Summarized, DictV)):
            got = self._constant_attr(base, name)
            if got is not None:
                return got
        if isinstance(base, Obj):
            if base.attrs is not None:
                key = f"{id(base)}.{name}"
                if key in st.env:
                    return st.env[key]
                if name in base.attrs:
                    return base.attrs[name]
                if base.cls is not None:
                    m = base.cls.method(name)
                    if m is not None and _is_property(m.node):
                        # `self.device` returning `next(self.parameters()).device`: its value here.
                        return self.interp.calls.call_function(m, base, [], {}, st, node)
                    if m is not None:
                        return FuncRef(m, base)
                    got = self._class_attr(base, base.cls, name)
                    if got is not None:
                        return got
                if name == "device" and base.devs is not None:
                    return DeviceV(base.devs)
                if name == "module":
                    return base
                return UNK
            # `model.devices` of a class of another file; a class constant unless this file assigns it (the
            # file's walk for that is made only where a summary has such a constant: most attributes are a tensor's)
            consts = (base.extra or {}).get("consts")
            got = summarized_attr(base, name, constants=bool(consts) and name not in self.set_from_outside())
            if got is not None:
                return got
            if name == "device":
                return DeviceV(base.devs) if base.devs is not None else SymV(f"{dotted(node) or 'value.device'}")
            if name in ("weight", "bias") and base.kind in ("module", "any"):
                return Obj(
                    "param", base.devs, label=dotted(node) or name, origin=base.origin, at=base.at, invariant=True
                )
            if name in ("T", "mT", "data", "real", "imag"):
                # (the same data: a reduction after it is one of the move's, MP016)
                return base.with_(
                    label=dotted(node) or base.label,
                    reducible_move=base.reducible_move,
                    made_from_move=base.made_from_move,
                )
            if name in ("values", "indices") and base.kind == "tensor" and not base.opaque:
                # torch's (values, indices) results (topk, sort, max(dim), kthvalue, ...): both where the input is.
                return base.with_(label=dotted(node) or "", invariant=False)
            if name == "requires_grad" and base.kind == "param" and not turns_off_grad(self.interp.module):
                return Const(True)  # (`[p for p in model.parameters() if p.requires_grad]` keeps every one)
            if name == "grad" and base.kind in ("param", "tensor"):
                # A gradient lives where its tensor does (optimizers, clipping, loss scalers read it); it is None
                # before a backward, or for a frozen parameter.
                return base.with_(kind="tensor", label=dotted(node) or name, invariant=False, maybe_none=True)
            if name == "module":
                return base
            return UNK
        if isinstance(base, SymV):
            return SymV(f"{base.name}.{name}")
        if isinstance(base, DeviceV) and name == "index":  # x.device.index + 1: the next GPU
            d = single(base.devs)
            if d is not None and d.startswith("cuda:") and d[5:].isdigit():
                return Const(int(d[5:]))
        if isinstance(base, DeviceV) and name == "type" and base.devs:
            # `x.device.type != self.device.type`: "cuda" for every GPU, so cuda:0 and cuda:1 compare equal.
            kinds = {d.partition(":")[0] for d in base.devs}
            if len(kinds) == 1 and "sym" not in kinds:
                return Const(kinds.pop())
        return UNK

    def _constant_attr(self, base: ClassRef | Summarized | DictV, name: str) -> Val | None:
        """A constant read off a class (`C.device`, C a class of this file or another one, with
        `device = "cuda:1"` in its body) or off a namespace (`ns.device`, `ns = SimpleNamespace(device=...)`);
        None where this file assigns that attribute on some object (`C.device = args.device`)."""
        # Each candidate is found first: the file's walk (set_from_outside) only where there is one.
        if isinstance(base, DictV):
            got = base.items.get(name) if base.namespace else None
            return got if _known_constant(got) and name not in self.set_from_outside() else None
        if isinstance(base, Summarized):
            c = (base.summary.get("consts") or {}).get(name) if base.kind == "class" else None
            if c is None or name in self.set_from_outside():
                return None
            self.interp.used_modules.add(base.module)
            return constant_value(c)
        expr = base.info.class_attr(name)
        if expr is None or name in self.set_from_outside():
            return None
        v = self.ev(expr, State.fresh(dict(self.interp.globals), "<class>"))
        return v if _known_constant(v) else None

    def _enum_member(self, cls: ClassInfo, name: str) -> Obj | None:
        """`Stage.QUERY` of `class Stage(enum.Enum)` with `QUERY = "cuda:0"` in its body: the member, an instance
        whose `.value` is that constant and whose methods and properties are the class's (`Stage.QUERY.device`
        returning `torch.device(self.value)`); one object per member. None for any other class or name."""
        if name.startswith("_") or not any(b.rsplit(".", 1)[-1] in _ENUM_BASES for c in cls.lineage() for b in c.bases):
            return None
        expr = cls.class_attr(name)
        if expr is None:
            return None
        key = (id(cls), name)
        member = self.interp.enum_members.get(key)
        if member is None:
            value = self.ev(expr, State.fresh(dict(self.interp.globals), "<class>"))
            attrs: dict[str, Val] = {"value": value, "name": Const(name)}
            member = Obj("module", None, label=f"{cls.name}.{name}", cls=cls, attrs=attrs)
            self.interp.enum_members[key] = member
        return member

    def _class_attr(self, obj: Obj, cls: ClassInfo, name: str) -> Val | None:
        """A class body's constant data (`placement = {"embed": "cuda:0"}`), read as `self.placement`;
        None for anything else (a module built in the class body is shared, not the instance's)."""
        expr = cls.class_attr(name)
        if expr is None or name in self.interp.moves.rebound_attributes(obj) or name in self.set_from_outside():
            return None
        v = self.ev(expr, State.fresh(dict(self.interp.globals), "<class>"))
        return v if isinstance(v, (Const, DeviceV, DictV, SeqV)) and not getattr(v, "module", False) else None

    def set_from_outside(self) -> frozenset[str]:
        """Attribute names the file assigns on something other than `self` (`cfg.head_device = ...`):
        an object's class default may have been replaced after it was built (one walk per module: walk.py)."""
        return attribute_assignments(self.interp.module).outside

    def ev_subscript(self, node: cst.Subscript, st: State) -> Val:
        base = self.ev(node.value, st)
        if isinstance(base, SeqV) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Slice):
            return self._sliced(base, node.slice[0].slice, st)
        if isinstance(base, QName) and base.q == "sys.argv" and len(node.slice) == 1:
            return self._arguments(node.slice[0].slice, st)
        if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
            indices = [self.ev(el.slice.value, st) for el in node.slice if isinstance(el.slice, cst.Index)]
            if isinstance(base, Obj) and base.kind in ("tensor", "param", "buffer", "any"):
                if _picks_positions(node) or self._strided(node, st):
                    self._note_indexed_after_move(node, base, st)  # `h.to(dev)[:, 0]`, `h.to(dev)[:, ::4]`
                used(base, *indices)  # an index tensor is read where the indexed tensor is (`hyps[src, :]`)
                self.check_index_tensors(node, base, indices, st)
                return base.with_(
                    label="",
                    kind=_element_kind(base, node, indices),
                    worked=True,
                    may_be_0d=base.may_be_0d or all(isinstance(i, Const) for i in indices),
                )
            return UNK
        idx = self.ev(node.slice[0].slice.value, st)
        if isinstance(base, ParamsOf) and isinstance(idx, Const) and idx.value == 0 and base.shape != "mapping":
            return base.first()  # `group["params"][0]` (a list of them in torch: its first)
        if isinstance(base, SeqV):
            if isinstance(idx, Const) and isinstance(idx.value, int) and base.items is not None:
                if -len(base.items) <= idx.value < len(base.items):
                    return base.items[idx.value]
                self.interp.gpus.check_index(base, idx.value, node)
                return UNK
            if isinstance(idx, Const) and isinstance(idx.value, int) and idx.value >= 0 and base.items is None:
                text = dotted(node.value)
                if text and _deviceish(base.elem):
                    return DeviceV(one(f"sym:{text}[{idx.value}]"))
                return base.head if idx.value == 0 and base.head is not None else base.elem
            if base.kind == "dict" and isinstance(base.elem, Obj) and not base.elem.label:
                return base.elem.with_(label=dotted(node) or "")  # `self.shadow[k]`, for messages
            return base.elem if base.items is None else join_all(base.items)
        if isinstance(base, DictV):
            map_lookups.note(self.interp, base, idx, node, st, subscript=True)
            if isinstance(idx, Const) and idx.value in base.items:
                return base.items[idx.value]
            vals = list(base.items.values())
            return join_all(vals) if vals else UNK
        if (
            isinstance(base, QName)
            and isinstance(idx, Const)
            and isinstance(idx.value, int)
            and not base.q.startswith("torch.")
        ):
            # An entry of an imported list whose values this file cannot see (DEVICES[1]):
            # symbolic, so DEVICES[0] and DEVICES[1] still count as two devices.
            return SymV(f"@{base.q}[{idx.value}]")
        if isinstance(base, SymV) and isinstance(idx, Const) and isinstance(idx.value, (int, str)):
            return SymV(f"{base.name}[{idx.value!r}]" if isinstance(idx.value, str) else f"{base.name}[{idx.value}]")
        if isinstance(base, Obj) and base.kind in ("tensor", "param", "buffer", "any"):
            if (isinstance(idx, Obj) and idx.index_like) or _picks_positions(node):
                if not _index_lives_there(idx, base):
                    self._note_indexed_after_move(node, base, st)
            used(base, idx)  # an index tensor is read where the indexed tensor is (`hyps[src]` on the host)
            if isinstance(idx, Obj) and both_cuda(idx.devs, base.devs):
                # CPU index tensors may index a CUDA tensor; one on another GPU may not.
                self.check_operand(
                    node,
                    idx,
                    base.devs,
                    st,
                    what=base.label or "the tensor",
                    op="index",
                    expr=node.slice[0].slice.value,
                )
            elif isinstance(idx, Obj) and _gpu_index_of_host(idx, base):
                # Nor may a GPU's index pick from host memory (`self.vocab[torch.multinomial(probs, 1)]`). Which
                # side should move is the author's call: what is computed from the rows is this finding's.
                what = base.label or "the tensor"
                if self.check_operand(node, idx, base.devs, st, what=what, op="index", expr=node.slice[0].slice.value):
                    return FAILED
            if base.kind == "any" and base.origin.startswith(LOADED) and isinstance(idx, Const):
                # An entry of a loaded checkpoint, by its key: maybe a number (values.maybe_a_number)
                origin = base.origin if base.origin.endswith(BY_KEY) else base.origin + BY_KEY
                return base.with_(label="", kind="any", origin=origin, worked=True)
            return base.with_(
                label="",
                kind=_element_kind(base, node, [idx]),
                # rows picked by an index made per call (`self.bank[idx]`) change with it
                invariant=base.invariant and (not isinstance(idx, Obj) or idx.invariant),
                worked=True,
                may_be_0d=base.may_be_0d or (isinstance(idx, Const) and type(idx.value) is int),
                row_of=self._row_walked(node, base),
            )
        return UNK

    def _one_move_of(self, node: cst.CSTNode, a: Obj, b: Obj) -> Any:
        """The move both operands of a binary op are computed from alone (Obj.reducible_move), where one of them
        may be a constant a factory makes right there from sizes (`gram - torch.eye(n, device=w.device)`: it could
        be made where the data came from as well); None otherwise."""
        if a.reducible_move is b.reducible_move:
            return a.reducible_move
        if self._made_from_sizes(getattr(node, "right", None)):
            return a.reducible_move
        if self._made_from_sizes(getattr(node, "left", None)):
            return b.reducible_move
        return None

    def _made_from_sizes(self, expr: cst.BaseExpression | None) -> bool:
        """`torch.eye(n, device=...)`, `torch.ones(8)` written as the operand itself. Not a buffer made to be filled
        (`torch.zeros`, `torch.empty`), nor a draw (the host's and a GPU's generators give other numbers), nor a name
        bound to a factory's tensor (what was done to it since is not read here)."""
        if not isinstance(expr, cst.Call):
            return False
        q = self.qname(expr.func) or ""
        last = q.rsplit(".", 1)[-1]
        return q.startswith("torch.") and last in _CONSTANT_FACTORIES

    def _strided(self, node: cst.Subscript, st: State) -> bool:
        """`h[:, ::SKIP]`: whole dimensions kept and every k-th position of at least one other, k a known
        number of 2 or more (a step the file does not spell out may be 1: nothing dropped)."""
        strided = False
        for el in node.slice:
            sl = el.slice
            if not isinstance(sl, cst.Slice) or sl.lower is not None or sl.upper is not None:
                if isinstance(sl, cst.Index) and isinstance(sl.value, cst.Ellipsis):
                    continue
                return False
            if sl.step is not None:
                step = self.ev(sl.step, st)
                if not (isinstance(step, Const) and type(step.value) is int and step.value >= 2):
                    return False
                strided = True
        return strided

    def _row_walked(self, node: cst.Subscript, base: Obj) -> cst.BaseExpression | None:
        """`t` of `t[i]` inside `for i in range(len(t))` (Interp.row_loops), `t` a tensor whose every row the
        loop reads this way (Obj.row_of, MP021); else None."""
        if base.kind != "tensor" or base.opaque or not self.interp.row_loops:
            return None
        name, walked = self.interp.row_loops[-1]
        index = node.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.Name) and index.value.value == name:
            return walked if node.value.deep_equals(walked) else None
        return None

    def _note_indexed_after_move(self, node: cst.Subscript, base: Obj, st: State) -> None:
        """MP016: `self.bank.to(dev)[idx]`, a whole tensor moved only for the rows an index tensor picks right
        after, or for one position of a dimension (`h.to(dev)[:, 0]`, a [CLS] state; also through a name the
        function reads nowhere else: `h = enc(x).to(dev)` then `h[:, 0]`). A move MP011 reports as repeated
        is its alone: MP016's rule leaves it out. Not ids indexed by ids (a lookup table of labels, a few
        bytes)."""
        move = base.moved_at
        if not (
            isinstance(move, cst.Call)
            and isinstance(move.func, cst.Attribute)
            and move.func.attr.value in ("to", "cuda")
            and base.moved_from is not None
            and not base.worked
            and not base.index_like
            and (node.value is move or self.read_only_here(node.value, move))
            # moved once before a loop that indexes it on every pass (`ab = t.to(dev)`, then `ab[t]` per step)
            and not (isinstance(node.value, cst.Name) and self.interp.bound_before_loop(base, node.value.value))
        ):
            return
        self.interp.recorder.record(
            OversizedMove(node=move, mode=st.mode, src=base.moved_from, dst=base.devs, indexed=node),
            key=(base.moved_from, base.devs),
        )

    def read_only_here(self, name: cst.BaseExpression, move: cst.CSTNode) -> bool:
        """`name` is a local the current function binds once (the move's result: the value is still the
        moved one) and reads once, here; or a parameter it reads once, here, given the move itself as its
        argument (`cls_of(h.to(dev))`: a caller that named the copy may use it again)."""
        if not isinstance(name, cst.Name) or not self.interp.stack:
            return False
        fn = self.interp.stack[-1].node
        reads = sum(1 for n in walk(fn.body) if type(n) is cst.Name and n.value == name.value)
        if name.value in {p for p, _ in params_of(fn)}:
            site = self.interp.recorder.sites[-1] if self.interp.recorder.sites else None
            return reads == 1 and isinstance(site, cst.Call) and any(a.value is move for a in site.args)
        # Its binding's target is a Name node too: two in all.
        return self.interp.stmts.bindings_here(name.value) == 1 and reads == 2

    def _arguments(self, sl: cst.BaseSlice, st: State) -> Val:
        """`sys.argv[1:]`, `sys.argv[1:3]`: the script's arguments, none as it runs with its defaults (as argparse's are read:
        command_line.py), so a loop over them (`getopt`, `key=value` pairs into a dict of settings) leaves the
        settings the code wrote. Only that slice: `sys.argv[1]` and `len(sys.argv)` (a script that demands its
        arguments, and exits without them) stay unknown, so no path is cut off for want of one."""
        if not isinstance(sl, cst.Slice) or sl.step is not None or sl.lower is None:
            return UNK
        lower = self.ev(sl.lower, st)
        if isinstance(lower, Const) and type(lower.value) is int and lower.value >= 1:
            return SeqV((), kind="list")  # (`sys.argv[1:3]` too: nothing there either)
        return UNK

    def _sliced(self, base: SeqV, sl: cst.Slice, st: State) -> Val:
        """`self.blocks[half:]`, `devices[1:]`: the same items (the same objects: a loop that moves them
        moves the container's), when the bounds are known; items alike when they are not."""
        bounds = [self.ev(b, st) if b is not None else Const(None) for b in (sl.lower, sl.upper, sl.step)]
        known = all(isinstance(b, Const) and (b.value is None or type(b.value) is int) for b in bounds)
        if base.items is not None and known and cast(Const, bounds[2]).value != 0:
            lo, hi, step = (cast(Const, b).value for b in bounds)
            return SeqV(base.items[lo:hi:step], kind=base.kind, module=base.module)
        elem = base.elem if base.items is None else join_all(base.items)
        if base.items is None and isinstance(elem, Obj) and (elem.ident is not None or elem.attrs is not None):
            # Items of a list of unknown length stand for many objects (`[Block() for p in rates]`): which of them
            # this slice holds is not known, so it is not known to share any with another slice (`blocks[:k]`,
            # `blocks[k:]`, placed on two GPUs).
            elem = elem.with_(some_of_many=True)
        return SeqV(None, elem=elem, kind=base.kind, module=base.module)

    def ev_const(self, node: Any, st: State) -> Val:  # Integer, Float, Imaginary, SimpleString...
        t = type(node)
        if t is cst.Integer:
            try:
                return Const(int(node.value, 0))
            except ValueError:
                return UNK
        if t is cst.Float:
            try:
                return Const(float(node.value.replace("_", "")))
            except ValueError:
                return UNK
        if t is cst.SimpleString:
            value = _string_value(node.value)
            return UNK if value is _NOT_A_VALUE else Const(value)
        return UNK

    def ev_fstring(self, node: cst.FormattedString, st: State) -> Val:
        text = ""
        sym = None
        known = True  # every part so far has a text (a constant, or a name standing for its value)
        for p in node.parts:
            if isinstance(p, cst.FormattedStringText):
                text += p.value
            elif isinstance(p, cst.FormattedStringExpression):  # the only other kind of part
                # Every part is evaluated, even after one the string cannot spell: a call in a log line
                # (`f"loss {loss.item():.3f} acc {accuracy(model, x, y):.3f}"`) runs with its arguments.
                v = self.ev(p.expression, st)
                if isinstance(v, Const) and isinstance(v.value, (int, str)) and p.format_spec is None:
                    text += str(v.value)
                elif isinstance(v, SymV):
                    sym = v.name
                    text += "{" + v.name + "}"
                else:
                    src = dotted(p.expression)
                    known = known and src is not None
                    sym = src
                    text += "{" + (src or "") + "}"
        if not known:
            return UNK
        if sym is None:
            return Const(text)
        if text.startswith(("cuda:", "cuda")):
            name = sym if sym.startswith("each:") else text
            return DeviceV(one(f"sym:{name}"))
        return UNK

    def ev_concat(self, node: cst.ConcatenatedString, st: State) -> Val:
        a, b = self.ev(node.left, st), self.ev(node.right, st)
        if isinstance(a, Const) and isinstance(b, Const) and isinstance(a.value, str) and isinstance(b.value, str):
            return Const(a.value + b.value)
        return UNK

    def ev_seq(self, node: cst.List | cst.Tuple | cst.Set, st: State) -> Val:
        items: list[Val] = []
        for e in node.elements:
            if isinstance(e, cst.StarredElement):
                v = self.ev(e.value, st)
                if isinstance(v, SeqV) and v.items is not None:
                    items.extend(v.items)
                    continue
                return SeqV(
                    None, elem=join_all(items + [v.elem if isinstance(v, SeqV) else UNK]) if items else UNK, kind="list"
                )
            items.append(self.ev(e.value, st))
        return SeqV(tuple(items), kind="tuple" if isinstance(node, cst.Tuple) else "list")

    def ev_dict(self, node: cst.Dict, st: State) -> Val:
        items = {}
        for e in node.elements:
            if isinstance(e, cst.DictElement):
                k = self.ev(e.key, st)
                v = self.ev(e.value, st)
                if isinstance(k, Const):
                    items[k.value] = v
                else:
                    return UNK
            else:  # `**other`: its items, in order, where they are known (a later key overrides an earlier one)
                spread = self.ev(e.value, st)
                if not isinstance(spread, DictV) or spread.module or spread.namespace:
                    return UNK
                items.update(spread.items)
        return DictV(items, at=node)

    def ev_comp(self, node: cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp, st: State) -> Val:
        # A comprehension is a loop too: a value alive before it and moved in its element on every pass to the
        # same place (`{g: head(feat.to(dev)) for g, head in heads.items()}`) is copied once per pass (MP011).
        outer = {id(v) for v in st.env.values() if isinstance(v, Obj)}
        if isinstance(st.self_obj, Obj) and st.self_obj.attrs:
            outer |= {id(v) for v in st.self_obj.attrs.values()}
        bound: set[str] = set()
        f: cst.CompFor | None = node.for_in
        while f is not None:
            bound.update(target_names(f.target))
            f = f.inner_for_in
        self.interp.loop_outer.append((outer, frozenset(bound), len(self.interp.stack)))
        self.interp.comprehension_loops += 1
        try:
            return self._ev_comp(node, st)
        finally:
            self.interp.comprehension_loops -= 1
            self.interp.loop_outer.pop()

    def _few_chunks(self, walked: cst.BaseExpression, st: State) -> bool:
        """`x.chunk(4)` / `torch.chunk(x, 4)` / `x.tensor_split(4)` cut into fewer than MP021's 8 pieces (a count
        the code spells, or a name bound to one): a pipeline's micro-batches, each large, whose copies cost about
        what one copy of the whole would (rules/MP021-per-item-transfer.md)."""
        if not isinstance(walked, cst.Call) or not isinstance(walked.func, cst.Attribute):
            return False
        name = walked.func.attr.value
        if name not in ("chunk", "tensor_split"):
            return False
        of_torch = dotted(walked.func.value) == "torch"
        args = [a for a in walked.args if a.keyword is None]
        count = args[1] if of_torch and len(args) > 1 else args[0] if not of_torch and args else None
        n = self.ev(count.value, st) if count is not None else None
        return isinstance(n, Const) and isinstance(n.value, int) and 0 < n.value < PER_ITEM_MIN_ITEMS

    def _outside_the_comprehension(self, iterable: cst.BaseExpression, st: State) -> Val:
        """The first clause's iterable, evaluated once before the first pass (`[... for row in out.cpu()]` copies
        once): outside the loop ev_comp entered."""
        entry = self.interp.loop_outer.pop()
        self.interp.comprehension_loops -= 1
        try:
            return self.ev(iterable, st)
        finally:
            self.interp.comprehension_loops += 1
            self.interp.loop_outer.append(entry)

    def _ev_comp(self, node: cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp, st: State) -> Val:
        # [elt for target in iter if ...]: unrolled for short known iterables.
        if type(node) is cst.ListComp or type(node) is cst.GeneratorExp:
            device_loops.note_device_list(self.interp, node)  # MP017's list of one device
        inner = st.copy()
        inner.returns = []
        fors: list[cst.CompFor] = []
        f: cst.CompFor | None = node.for_in
        while f is not None:
            fors.append(f)
            f = f.inner_for_in
        if len(fors) > 1:
            # [Block(d) for d in devices for _ in range(per)]: every combination, in order, when each
            # iterable is known for each item of the ones before it (and no `if` is left undecided).
            combos = self._nested_items(fors, inner)
            if combos is not None and isinstance(node, cst.DictComp):
                # {i: f"cuda:{g}" for g, ids in device_map.items() for i in ids}: a layer -> device map
                return self._dict_of_bindings(node, fors, combos, inner)
            if combos is not None:
                out = []
                for binding in combos:
                    for f, item in zip(fors, binding):
                        self.interp.stmts.assign(f.target, item, inner, None)
                    out.append(self._comp_elt(node, inner))
                return self._comp_result(node, tuple(out), None)
            spanned = self._nested_spans(node, fors, inner)
            if spanned is not None:
                return spanned
        per_parameter = False
        if len(fors) == 1:
            # MP020: `[p.grad.norm().item() for p in model.parameters()]` (before the unroll over a split's devices)
            per_parameter = element_reads.note_per_parameter(
                self.interp, fors[0].target, fors[0].iter, node, node, inner
            )
            it = self._outside_the_comprehension(fors[0].iter, inner)
            items = iter_items(it)
            if items is not None and len(items) <= MAX_UNROLL:
                kept = self._filtered(fors[0], items, inner)
                if kept is not None and isinstance(node, cst.DictComp):
                    return self._dict_comp(node, fors[0], kept, inner)
                if kept is not None:
                    out = []
                    watch = (
                        device_loops.pick_watch(node.elt, fors[0].target)
                        if not isinstance(node, cst.DictComp)
                        else None
                    )
                    for item in kept:
                        self.interp.stmts.assign(fors[0].target, item, inner, None)
                        out.append(self._one_per_pass(node, self._comp_elt(node, inner)))
                        if watch is not None:
                            watch.after_pass(self.interp, inner)
                    if watch is not None:
                        watch.finish(self.interp, node)  # MP017: `devices[i // n]`, one device for every `i`
                    return self._comp_result(node, tuple(out), None)
            spans = spans_of(it)
            if spans is not None and fors[0].ifs and not self._keeps_all(fors[0], spans[0], inner):
                # a filter that may drop a device's items: which devices remain is known only from names
                spans = self._kept_by_name(fors[0], it, inner)
            if spans is not None and isinstance(node, cst.DictComp):
                # {name: p.detach().clone().to(dev) for name, p in model.state_dict().items()}: a dict
                # whose values, one made from a parameter on each device, are read by keys not known.
                made = []
                for item in spans[0]:
                    self.interp.stmts.assign(fors[0].target, item, inner, None)
                    made.append(self._comp_elt(node, inner))
                return SeqV(None, elem=join_all(made), kind="dict")
            if spans is not None and not isinstance(node, cst.DictComp):
                # Over the parameters of a split model (no filter, or one that keeps each: `if p.requires_grad`):
                # the result holds an element made from a parameter on each device.
                made = []
                for item in spans[0]:
                    self.interp.stmts.assign(fors[0].target, item, inner, None)
                    made.append(self._comp_elt(node, inner))
                kind = "gen" if isinstance(node, cst.GeneratorExp) else "list"
                return SeqV(None, elem=join_all(made), kind=kind, spans=tuple(made), spans_by=spans[1])
        for f in fors:
            it = self._outside_the_comprehension(f.iter, inner) if f is fors[0] else self.ev(f.iter, inner)
            self.interp.stmts.assign(
                f.target,
                iter_elem(
                    it,
                    f.target.value if isinstance(f.target, cst.Name) else None,
                    f.iter,
                    only_moved=len(fors) == 1
                    and _moves_its_item_only(node, f.target)
                    and not self._few_chunks(f.iter, inner),
                ),
                inner,
                None,
            )
            if len(fors) == 1 and not per_parameter:  # MP020: `[v.item() for v in t]` of a GPU tensor
                element_reads.note_loop(self.interp, f.target, it, f.iter, node, node, inner)
        self.interp.in_unknown_loop += 1
        try:
            elem = self._comp_elt(node, inner)
        finally:
            self.interp.in_unknown_loop -= 1
        return self._comp_result(node, None, elem)

    def _one_per_pass(self, node: cst.CSTNode, made: Val) -> Val:
        """`[Block() for _ in range(6)]`: each pass constructs an object of its own, though the interpretation of
        the class is memoised (one value for every construction outside an __init__): each item gets an identity
        (Obj.ident), so that moving one (`for i, b in enumerate(blocks): b.to(dev_of(i))`) moves that one only.
        (`[blk for _ in range(6)]` holds one object six times, and keeps it.)"""
        elt = getattr(node, "elt", None)
        if (
            isinstance(elt, cst.Call)
            and isinstance(made, Obj)
            and made.kind == "module"
            and made.cls is not None
            and made.ident is None
        ):
            # (a copy of its parts too, each an object of its own: a move of one item changes no other)
            fresh = library.copied(self.interp.library, made)
            assert isinstance(fresh, Obj)
            return fresh.with_(ident=self.interp.new_ident(made.cls.name))
        return made

    def _nested_spans(
        self, node: cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp, fors: list[cst.CompFor], st: State
    ) -> SeqV | None:
        """`[p.grad.norm() for group in self.param_groups for p in group["params"]]`: outer clauses of known items,
        the last one over the parameters of a split model for each of them (SeqV.spans, as one clause over them
        gives): an element made from a parameter on each device; None otherwise."""
        if isinstance(node, cst.DictComp):
            return None
        outer = self._nested_items(fors[:-1], st)
        if outer is None:
            return None
        last, made, by = fors[-1], [], []
        for binding in outer:
            for f, item in zip(fors, binding):
                self.interp.stmts.assign(f.target, item, st, None)
            spans = spans_of(self.ev(last.iter, st))
            if spans is None or (last.ifs and not self._keeps_all(last, spans[0], st)):
                return None
            for item, dev in zip(spans[0], spans[1]):
                self.interp.stmts.assign(last.target, item, st, None)
                made.append(self._comp_elt(node, st))
                by.append(dev)
        if not made:
            return None
        kind = "gen" if isinstance(node, cst.GeneratorExp) else "list"
        return SeqV(None, elem=join_all(made), kind=kind, spans=tuple(made), spans_by=tuple(by))

    def _nested_items(self, fors: list[cst.CompFor], st: State) -> list[tuple[Val, ...]] | None:
        """The bindings of nested `for` clauses, outer first, when every iterable is known for each outer
        item and the filters are decided; None otherwise or past MAX_UNROLL combinations."""
        combos: list[tuple[Val, ...]] = [()]
        for depth, f in enumerate(fors):
            nxt: list[tuple[Val, ...]] = []
            for binding in combos:
                for g, item in zip(fors[:depth], binding):
                    self.interp.stmts.assign(g.target, item, st, None)
                items = iter_items(self._outside_the_comprehension(f.iter, st) if depth == 0 else self.ev(f.iter, st))
                kept = self._filtered(f, items, st) if items is not None else None
                if kept is None:
                    return None
                nxt.extend((*binding, item) for item in kept)
                if len(nxt) > MAX_UNROLL:
                    return None
            combos = nxt
        return combos

    def _grad_of_a_parameter(self, expr: cst.BaseExpression, st: State) -> bool:
        """`p.grad` of a parameter, in a file that freezes none: taken to exist where it is asked about (after a
        backward, `if p.grad is not None` keeps every parameter), as `p.requires_grad` is taken to be True."""
        if not (isinstance(expr, cst.Attribute) and expr.attr.value == "grad" and isinstance(expr.value, cst.Name)):
            return False
        base = self.ev(expr.value, st)
        return isinstance(base, Obj) and base.kind == "param" and not turns_off_grad(self.interp.module)

    def _kept_by_name(self, comp: cst.CompFor, it: Val, st: State) -> tuple[list[Val], tuple[str, ...]] | None:
        """The spans that survive a filter of `named_parameters()` by name (`if not n.startswith("fc.")`), one
        attribute of the split model at a time: one item per device still kept when two or more are; else None."""
        if not (isinstance(it, ParamsOf) and it.shape == "named"):
            return None
        attrs = it.per_attribute()
        if attrs is None:
            return None
        items: list[Val] = [SeqV((NamePrefix(f"{attr}."), rep), kind="tuple") for attr, rep in attrs]
        kept = self._filtered(comp, items, st.copy())
        if kept is None:
            return None
        by_device: dict[str, Val] = {}
        for item in kept:
            rep = cast(SeqV, item).items[1]  # type: ignore[index]
            dev = single(cast(Obj, rep).devs) or ""
            by_device.setdefault(dev, item)
        if len(by_device) < 2:
            return None
        return list(by_device.values()), tuple(by_device)

    def _keeps_all(self, comp: cst.CompFor, items: list[Val], st: State) -> bool:
        """Do a comprehension's `if` clauses certainly keep each of `items` (`if p.requires_grad` in a file
        that freezes nothing)?"""
        kept = self._filtered(comp, items, st.copy())
        return kept is not None and len(kept) == len(items)

    def _filtered(self, comp: cst.CompFor, items: list[Val], st: State) -> list[Val] | None:
        """The items a comprehension's `if` clauses keep (`for i in range(n) if i != 0`), or None
        when a clause is not decided for some item: then which elements exist is not known."""
        if not comp.ifs:
            return items
        kept = []
        for item in items:
            self.interp.stmts.assign(comp.target, item, st, None)
            tests = [self.ev(c.test, st) for c in comp.ifs]
            if not all(isinstance(t, Const) and isinstance(t.value, bool) for t in tests):
                return None
            if all(cast(Const, t).value for t in tests):
                kept.append(item)
        return kept

    def _comp_elt(self, node: cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp, st: State) -> Val:
        if isinstance(node, cst.DictComp):
            self.ev(node.key, st)
            return self.ev(node.value, st)
        return self.ev(node.elt, st)

    def _dict_comp(self, node: cst.DictComp, comp: cst.CompFor, items: list[Val], st: State) -> Val:
        """{g: devices[g] for g in range(n)} over a few known items: a dict when every key is known."""
        return self._dict_of_bindings(node, [comp], [(item,) for item in items], st)

    def _dict_of_bindings(
        self, node: cst.DictComp, fors: list[cst.CompFor], combos: list[tuple[Val, ...]], st: State
    ) -> Val:
        """A dict comprehension's dict, its `for` targets bound to each of `combos` in turn, when every key is
        known; otherwise not known."""
        out: dict[Any, Val] = {}
        for binding in combos:
            for f, item in zip(fors, binding):
                self.interp.stmts.assign(f.target, item, st, None)
            k = self.ev(node.key, st)
            v = self.ev(node.value, st)
            if not isinstance(k, Const) or not isinstance(k.value, (int, str)):
                return UNK
            out[k.value] = v
        return DictV(out)

    @staticmethod
    def _comp_result(node: cst.CSTNode, items: tuple[Val, ...] | None, elem: Val | None) -> Val:
        if isinstance(node, cst.DictComp):
            # Keys not known (`{k: v.to(dev) for k, v in batch.items()}`): a dict whose values are alike,
            # read by any key (`batch["labels"]`), as over a split model's state dict above.
            return SeqV(None, elem=elem if elem is not None else UNK, kind="dict") if items is None else UNK
        if isinstance(node, cst.GeneratorExp):
            return SeqV(items, elem=elem if elem is not None else UNK, kind="gen")
        return SeqV(items, elem=elem if elem is not None else UNK, kind="list")

    def ev_ifexp(self, node: cst.IfExp, st: State) -> Val:
        t = self.ev(node.test, st)
        if decided(t):
            # `torch.device(device) if device else next(model.parameters()).device` with `device=None`: Python's truth
            self.interp.gpus.on_decided(node.test, bool(cast(Const, t).value))
            return self.ev(node.body if cast(Const, t).value else node.orelse, st)
        with self.interp.gpus.guarded():
            body, orelse = self.ev(node.body, st), self.ev(node.orelse, st)
        outer = frozenset(id(t) for t in self.interp.stmts.open_tests)
        return ways.ways_of_choice(node, body, orelse, join(body, orelse), outer)

    def ev_binop(self, node: cst.BinaryOperation, st: State) -> Val:
        a = self.ev(node.left, st)
        b = self.ev(node.right, st)
        return self.binop(node, a, b, st)

    def binop(self, node: cst.CSTNode, a: Val, b: Val, st: State) -> Val:
        if failed(a) or failed(b):
            return FAILED
        used(a, b)
        if isinstance(a, ParamsOf) and isinstance(b, ParamsOf) and _is_add(node):
            return _parameters_of_both(a, b)  # `list(m.enc_early.parameters()) + list(m.enc_late.parameters())`
        if isinstance(a, Const) and isinstance(a.value, str) and isinstance(b, SeqV) and b.items is not None:
            if isinstance(getattr(node, "operator", None), cst.Modulo) and all(
                isinstance(i, Const) and isinstance(i.value, (int, str)) for i in b.items
            ):
                try:  # `"cuda:%d" % (rank * 2 + 1,)`
                    return Const(a.value % tuple(cast(Const, i).value for i in b.items))
                except (TypeError, ValueError):
                    return UNK
        if isinstance(a, SeqV) or isinstance(b, SeqV):
            if isinstance(a, SeqV) and isinstance(b, SeqV) and _is_add(node):
                # `blocks + [head]`: the items of both, in order
                if a.items is not None and b.items is not None:
                    return SeqV(a.items + b.items, kind=a.kind)
                parts = [
                    *(a.items if a.items is not None else (a.elem,)),
                    *(b.items if b.items is not None else (b.elem,)),
                ]
                return SeqV(None, elem=join_all(parts), kind=a.kind)
            if not (isinstance(a, (SeqV, Const)) and isinstance(b, (SeqV, Const))):
                return UNK
            seq, times = (a, b) if isinstance(a, SeqV) else (cast(SeqV, b), a)
            if (
                isinstance(node, cst.BinaryOperation)
                and isinstance(node.operator, cst.Multiply)
                and isinstance(times, Const)
                and type(times.value) is int
                and seq.items is not None
                and 0 <= times.value * len(seq.items) <= MAX_UNROLL
            ):
                # `(h0,) * 2`: an LSTM's (h, c) made of one tensor; `[dev] * 4`: the same items again
                return SeqV(seq.items * times.value, kind=seq.kind)
            return SeqV(None, elem=seq.elem if seq.items is None else join_all(seq.items), kind=seq.kind)
        if isinstance(a, Obj) and isinstance(b, Obj) and a.kind != "module" and b.kind != "module":
            if maybe_a_number(a) or maybe_a_number(b):
                # `1.0 - ckpt["decay"]`, `x * state["scale"]`: a number, maybe, read from a checkpoint: what it
                # meets decides where the result is, as with a number
                other = b if maybe_a_number(a) else a
                return other.with_(label="", invariant=False, worked=True) if not maybe_a_number(other) else other
            if a.kind == "scalar":
                return b.with_(label="", invariant=False, worked=True) if b.kind != "scalar" else a
            if b.kind == "scalar":
                return a.with_(label="", invariant=False, worked=True)
            self.probe_hit(a, b.devs, b)
            self.probe_hit(b, a.devs, a)
            self.interp.recorder.need(node, "binop", a.devs)
            c = conflict(a.devs, b.devs)
            way = None
            if not c:
                # One operand on another device on one way through an `if` before (`inp` teacher-forced or not)
                way_a, way_b = (
                    path_off(a, b.devs, self.interp.stmts.open_tests),
                    path_off(b, a.devs, self.interp.stmts.open_tests),
                )
                if way_a is not None:
                    way, a = way_a, way_a.value
                elif way_b is not None:
                    way, b = way_b, way_b.value
            if c or way is not None:
                left_expr = getattr(node, "left", None) or getattr(node, "target", None)
                if way is not None:
                    # the operand that is elsewhere on one way is the one to move
                    value, other, expr, other_expr = (
                        (a, b, left_expr, _right_operand(node))
                        if way.value is a
                        else (b, a, _right_operand(node), left_expr)
                    )
                elif b.origin == GRADIENT_OF_OUTPUT and a.origin != GRADIENT_OF_OUTPUT:
                    # `lambd * grad_out` in a custom backward: the gradient stays, what it meets moves
                    value, other, expr, other_expr = a, b, left_expr, _right_operand(node)
                elif a.origin != GRADIENT_OF_OUTPUT and (
                    (weight_on_gpu(b) and a.kind == "tensor")
                    or (_one_number(a) and not _one_number(b))
                    # `self.slopes * rel`, a plain tensor attribute `.to()` left on the host: it goes to the GPU
                    or (single(a.devs) == "cpu" and single(b.devs) != "cpu" and b.origin != GRADIENT_OF_OUTPUT)
                ):
                    # `x > self.thresholds`: the activation is the one to move, where the weights are;
                    # `scale * img` with `scale` from a one-number tensor (a learned temperature): that number.
                    value, other, expr, other_expr = a, b, left_expr, _right_operand(node)
                else:
                    # `a + b` (BinaryOperation) or `a += b` (AugAssign: target and value)
                    value, other, expr, other_expr = b, a, _right_operand(node), left_expr
                self.interp.recorder.record(
                    Mismatch(
                        node=node,
                        mode=st.mode,
                        value=value,
                        target=other.devs,
                        what=other.label or ("the left operand" if other is a else "the right operand"),
                        op="op",
                        other=other,
                        arg_index=1 if value is b else 0,
                        expr=expr,
                        what_expr=other_expr,
                        site="binop",
                        path=way,
                    ),
                    key="binop",
                )
                return FAILED
            self.interp.moves.merge(a, b, node)
            return Obj(
                "tensor",
                join_devs(a.devs, b.devs),
                origin=a.origin or b.origin,
                at=a.at or b.at,
                invariant=a.invariant and b.invariant,
                lineage=a.lineage or b.lineage,
                hop=max(a.hop, b.hop),
                # `w * w.log()` of one moved `w`, `gram - torch.eye(n, device=w.device)`: still that move's data
                # alone (a tensor a factory makes from sizes could be made where the data came from as well)
                reducible_move=(rm := self._one_move_of(node, a, b)),
                made_from_move=rm is not None,
                row_statistic=a.row_statistic and b.row_statistic,
            )
        if _host_scalar(a) and not isinstance(b, Const) or _host_scalar(b) and not isinstance(a, Const):
            return UNK  # a 0-d CPU tensor with a value not known: the result is where that value is
        if maybe_a_number(a) or maybe_a_number(b):
            return a if maybe_a_number(a) else b  # `1.0 - ckpt["decay"]`: still maybe a number
        if isinstance(a, Obj) and a.kind != "module":
            return a.with_(
                label="",
                kind="tensor" if a.kind != "scalar" else "scalar",
                worked=True,
                reducible_move=a.reducible_move if isinstance(b, Const) else None,
                made_from_move=a.reducible_move is not None and isinstance(b, Const),
            )
        if isinstance(b, Obj) and b.kind != "module":
            return b.with_(
                label="",
                kind="tensor" if b.kind != "scalar" else "scalar",
                worked=True,
                reducible_move=b.reducible_move if isinstance(a, Const) else None,
                made_from_move=b.reducible_move is not None and isinstance(a, Const),
            )
        if isinstance(a, SymV) or isinstance(b, SymV):
            return _affine_op(getattr(node, "operator", None), a, b)
        if isinstance(a, Const) and isinstance(b, Const):
            op = getattr(node, "operator", None)
            try:
                f = _CONST_OPS.get(type(op))
                if f is not None and isinstance(a.value, (int, float, str)) and isinstance(b.value, (int, float, str)):
                    got = f(a.value, b.value)
                    return UNK if got is None else Const(got)
            except Exception:
                return UNK
        return UNK

    def ev_unary(self, node: cst.UnaryOperation, st: State) -> Val:
        v = self.ev(node.expression, st)
        if isinstance(node.operator, cst.Not) and isinstance(v, Const) and isinstance(v.value, bool):
            return Const(not v.value)  # `if n_gpu > 1 and not self.model_parallel:` is decided
        if isinstance(v, Obj) and v.kind != "module":
            return v.with_(
                label="", worked=True, reducible_move=v.reducible_move, made_from_move=v.reducible_move is not None
            )
        if isinstance(node.operator, cst.Minus) and isinstance(v, Const) and type(v.value) in (int, float):
            return Const(-v.value)  # `devices[-1]`: the last stage's device
        if isinstance(node.operator, cst.Not) and isinstance(v, Const) and type(v.value) is bool:
            return Const(not v.value)
        return UNK

    def ev_compare(self, node: cst.Comparison, st: State) -> Val:
        left = self.ev(node.left, st)
        if (
            len(node.comparisons) == 1
            and isinstance(left, DeviceV)
            and isinstance(node.comparisons[0].operator, (cst.Equal, cst.NotEqual))
        ):
            right = self.ev(node.comparisons[0].comparator, st)
            a, b = single(left.devs), single(right.devs) if isinstance(right, DeviceV) else None
            if a is not None and b is not None and _indexed(a) and _indexed(b):
                # `x.device != self.device`, both known: torch.device compares type and index.
                return Const((a == b) == isinstance(node.comparisons[0].operator, cst.Equal))
            return UNK
        if (
            len(node.comparisons) == 1
            and isinstance(node.comparisons[0].operator, (cst.Is, cst.IsNot))
            and (_certainly_not_none(left) or self._grad_of_a_parameter(node.left, st))
        ):
            right = self.ev(node.comparisons[0].comparator, st)
            if isinstance(right, Const) and right.value is None:
                # `state if state is not None else (None, None)` with the state a tuple built here
                return Const(isinstance(node.comparisons[0].operator, cst.IsNot))
            return UNK
        if len(node.comparisons) == 1 and isinstance(left, Const):
            c = node.comparisons[0]
            right = self.ev(c.comparator, st)
            f = _CMP_OPS.get(type(c.operator))
            if (
                f is not None
                and isinstance(right, Const)
                and type(left.value) in (int, str, bool)
                and type(right.value) is type(left.value)
            ):
                return Const(bool(f(left.value, right.value)))
            if f is not None and isinstance(right, Const) and _number(left.value) and _number(right.value):
                return Const(bool(f(left.value, right.value)))  # `self.feat_noise > 0` with its default 0.2
            if (
                isinstance(c.operator, (cst.Is, cst.IsNot))
                and isinstance(right, Const)
                and right.value is None
                and left.value is None
            ):
                return Const(isinstance(c.operator, cst.Is))
            if isinstance(c.operator, (cst.In, cst.NotIn)) and type(left.value) in (int, str):
                if isinstance(right, DictV):
                    map_lookups.note(self.interp, right, left, node, st)
                found = _contains(right, left.value)
                if found is not None:
                    # `if name in device_map:` over a dict of known keys (a hand-written device map)
                    return Const(found == isinstance(c.operator, cst.In))
            return UNK
        for c in node.comparisons:
            right = self.ev(c.comparator, st)
            if isinstance(
                c.operator,
                (cst.Equal, cst.NotEqual, cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual),
            ):
                if isinstance(left, Obj) and isinstance(right, Obj):
                    out = self.binop(node, left, right, st)
                    if isinstance(out, Obj):
                        return out.with_(invariant=False, lineage=OFF_CHAIN)  # a mask or a metric
                if known_tensor(left) and isinstance(right, Const) and isinstance(right.value, (int, float)):
                    # `ids != pad_id`: a mask on the tensor's device, which stays there when the tensor
                    # itself moves on to the next stage.
                    assert isinstance(left, Obj)  # known_tensor
                    used(left)
                    return left.with_(
                        label="",
                        kind="tensor",
                        origin=f"a mask computed from `{dotted(node.left)}`" if dotted(node.left) else "a mask",
                        at=node,
                        invariant=False,
                        worked=True,
                        lineage=OFF_CHAIN,
                        index_like=True,
                    )
            left = right
        return UNK

    def ev_boolop(self, node: cst.BooleanOperation, st: State) -> Val:
        a = self.ev(node.left, st)
        b = self.ev(node.right, st)
        # One known operand decides `and` (False) / `or` (True) whatever the other is: a guard such
        # as `n_gpu > 1 and not split` with `split` known to be True takes one path only.
        decides = isinstance(node.operator, cst.Or)
        known = [v.value for v in (a, b) if isinstance(v, Const) and isinstance(v.value, bool)]
        if decides in known:
            return Const(decides)
        if len(known) == 2:
            return Const(not decides)
        if isinstance(a, Const) and isinstance(a.value, (type(None), bool, int, float, str)):
            # Python's value of `x or y` / `x and y` when x is a known constant: `device_map = device_map
            # or {"embed": 0, ...}` with device_map None gives the dict.
            return a if bool(a.value) == decides else b
        if isinstance(a, (SeqV, DictV)) and not getattr(a, "module", False) and _known_length(a) is not None:
            # `sys.argv[1:] or ["train"]` (no arguments: the default command), `overrides or DEFAULTS`
            return a if bool(_known_length(a)) == decides else b
        if isinstance(a, Obj) or isinstance(b, Obj):
            return join(a, b) if isinstance(a, Obj) and isinstance(b, Obj) else UNK
        return UNK

    def ev_lambda(self, node: cst.Lambda, st: State) -> Val:
        params = node.params
        defaults = {
            p.name.value: self.ev(p.default, st)
            for p in (*params.posonly_params, *params.params, *params.kwonly_params)
            if p.default is not None
        }
        return LambdaV(node, st.env, defaults)

    def ev_await(self, node: cst.Await, st: State) -> Val:
        return self.ev(node.expression, st)

    def ev_yield(self, node: cst.Yield, st: State) -> Val:
        """`yield v` adds v to what the generator gives, `yield from vs` all of vs, as `append` and
        `extend` grow a list (in a loop of unknown length: items of unknown number). What the caller
        sends back in is unknown."""
        if isinstance(node.value, cst.From):
            given = self.ev(node.value.item, st)
            more = given.items if isinstance(given, SeqV) and given.kind != "dict" else None
            elem = iter_elem(given, None)
        else:
            elem = self.ev(node.value, st) if node.value is not None else Const(None)
            more = (elem,)
        if st.yields is not None:
            self.interp.calls.grow(st.yields, more, elem)
        return UNK

    def probe_hit(self, val: Val, devs: Devs, other: Val | None = None) -> None:
        """In a probe run: the first device an input marked with a probe device (`PROBE`,
        `probe_devs(i)`) meets, unmoved, is where that input must be. Not a tensor on the index-less
        current device (`self.cache = table.cuda()` built inside forward): that is where the forward
        put its own tensor, right only on one GPU, and says nothing of where the module's input lives.
        Nor one a factory made on the CPU for want of a device= (`out = torch.zeros(n, d)` then
        `out.index_add_(0, index, src)`): the forward's own line is the bug, reported there."""
        if not self.interp.probes or not isinstance(val, Obj) or not is_probe(val.devs):
            return
        d = single(devs)
        if d is None or is_probe(devs) or (d == CURRENT and other is not None) or made_on_cpu_by_default(other):
            return
        probe = self.interp.probes[-1]
        if val.devs == PROBE and probe["devs"] is None:
            probe["devs"] = devs
        probe.setdefault("by", {}).setdefault(val.devs, devs)

    def check_index_tensors(self, node: cst.Subscript, base: Obj, indices: list[Val], st: State) -> bool:
        """`t[:, idx]`, `t[rows, cols]`, `t[:, idx] = v`, with `indices` the values of the subscript's index
        expressions (evaluated once, by the caller): each index tensor must be on the host or on `t`'s GPU
        ("indices should be either on cpu or on the same device as the indexed tensor"); one on another GPU is
        reported (once: True when it was)."""
        exprs = [el.slice.value for el in node.slice if isinstance(el.slice, cst.Index)]
        for idx, expr in zip(indices, exprs):
            if isinstance(idx, Obj) and both_cuda(idx.devs, base.devs):
                what = base.label or "the tensor"
                if self.check_operand(node, idx, base.devs, st, what=what, op="index", expr=expr):
                    return True
        return False

    def check_operand(
        self,
        node: cst.CSTNode,
        val: Val,
        devs: Devs,
        st: State,
        what: str,
        arg_index: int = 0,
        expr: cst.BaseExpression | None = None,
        op: str = "module",
        module: Obj | None = None,
        other: Val | None = None,
    ) -> bool:
        """Reports `val` when it is certainly not on `devs` (where `module`, or the tensor `other`,
        is); True when it did."""
        self.interp.recorder.need(node, arg_index, devs)
        if not isinstance(val, Obj) or val.kind in ("scalar", "module") or maybe_a_number(val):
            return False
        self.probe_hit(val, devs, other)
        c = conflict(val.devs, devs)
        way = None if c else path_off(val, devs, self.interp.stmts.open_tests)
        if c or way is not None:
            self.interp.recorder.record(
                Mismatch(
                    node=node,
                    mode=st.mode,
                    value=val if way is None else way.value,
                    path=way,
                    target=devs,
                    what=what,
                    op=op,
                    expr=expr,
                    arg_index=arg_index,
                    module=module,
                    other=other,
                    site=arg_index,
                ),
                key=arg_index,
            )
            return True
        return False

    def ev_call(self, node: cst.Call, st: State) -> Val:
        return self.interp.calls.ev_call(node, st)


_CMP_OPS: dict[type, Callable[[Any, Any], Any]] = {
    cst.Equal: lambda a, b: a == b,
    cst.NotEqual: lambda a, b: a != b,
    cst.LessThan: lambda a, b: a < b,
    cst.GreaterThan: lambda a, b: a > b,
    cst.LessThanEqual: lambda a, b: a <= b,
    cst.GreaterThanEqual: lambda a, b: a >= b,
}


def _affine_op(op: Any, a: Val, b: Val) -> Val:
    """`rank * 2`, `2 * rank + 1`, `rank - 1`: a symbolic index computed from one run-time name and
    integer constants (values.affine), so that `2*rank` and `2*rank+1` are known to differ."""
    sym, num, sym_left = (a, b, True) if isinstance(a, SymV) else (b, a, False)
    if not isinstance(sym, SymV) or not isinstance(num, Const) or type(num.value) is not int:
        return UNK
    got = affine(sym.name)
    if got is None:
        return UNK
    name, mult, offset = got
    k = num.value
    if isinstance(op, cst.Add):
        return SymV(affine_name(name, mult, offset + k))
    if isinstance(op, cst.Subtract) and sym_left:
        return SymV(affine_name(name, mult, offset - k))
    if isinstance(op, cst.Multiply) and k > 0:
        return SymV(affine_name(name, mult * k, offset * k))
    return UNK


_CONST_OPS: dict[type, Callable[[Any, Any], Any]] = {
    cst.Add: lambda a, b: a + b,
    cst.Subtract: lambda a, b: a - b,
    cst.Multiply: lambda a, b: a * b if not (isinstance(a, str) or isinstance(b, str)) else None,
    # `"cuda:%d" % (i * 2 // n)`: a device named by printf-style formatting, as well as the numbers' remainder
    cst.Modulo: lambda a, b: a % b if (isinstance(a, int) and isinstance(b, int) and b) or isinstance(a, str) else None,
    cst.FloorDivide: lambda a, b: a // b if isinstance(a, int) and isinstance(b, int) and b else None,
    # `math.ceil(n_layers / n_gpus)`: a stage's share of the blocks
    cst.Divide: lambda a, b: a / b if _number(a) and _number(b) and b else None,
}


def _known_constant(v: Val | None) -> bool:
    """A constant, a device, or a list or tuple of those (`STAGE_DEVICES = ("cuda:0", "cuda:1")` in a settings
    class; `nargs="+", default=["cuda:0", "cuda:1"]`)."""
    return isinstance(v, (Const, DeviceV)) or (
        isinstance(v, SeqV) and v.items is not None and all(isinstance(i, (Const, DeviceV)) for i in v.items)
    )


def _number(v: Any) -> bool:
    return type(v) in (int, float)


def _deviceish(v: Val) -> bool:
    return isinstance(v, DeviceV) or (
        isinstance(v, Const) and isinstance(v.value, str) and device_from_str(v.value) is not None
    )


_EV: dict[type, Callable[..., Val]] = {
    cst.Name: Expressions.ev_name,
    cst.Attribute: Expressions.ev_attr,
    cst.Call: Expressions.ev_call,
    cst.Subscript: Expressions.ev_subscript,
    cst.Integer: Expressions.ev_const,
    cst.Float: Expressions.ev_const,
    cst.SimpleString: Expressions.ev_const,
    cst.FormattedString: Expressions.ev_fstring,
    cst.ConcatenatedString: Expressions.ev_concat,
    cst.List: Expressions.ev_seq,
    cst.Tuple: Expressions.ev_seq,
    cst.Set: Expressions.ev_seq,
    cst.Dict: Expressions.ev_dict,
    cst.ListComp: Expressions.ev_comp,
    cst.SetComp: Expressions.ev_comp,
    cst.GeneratorExp: Expressions.ev_comp,
    cst.DictComp: Expressions.ev_comp,
    cst.IfExp: Expressions.ev_ifexp,
    cst.BinaryOperation: Expressions.ev_binop,
    cst.UnaryOperation: Expressions.ev_unary,
    cst.Comparison: Expressions.ev_compare,
    cst.BooleanOperation: Expressions.ev_boolop,
    cst.Lambda: Expressions.ev_lambda,
    cst.Await: Expressions.ev_await,
    cst.Yield: Expressions.ev_yield,
}


def _is_property(fn: cst.FunctionDef) -> bool:
    """A method read as an attribute: `@property` or `@functools.cached_property`."""
    return any(dotted(d.decorator) in _PROPERTY_DECORATORS for d in fn.decorators)


_PROPERTY_DECORATORS = frozenset({"property", "cached_property", "functools.cached_property"})


_NOT_A_VALUE = object()


@lru_cache(maxsize=4096)
def _string_value(raw: str) -> object:
    """A string literal's value, as libcst's `SimpleString.evaluated_value` gives it (`ast.literal_eval` of its
    text), once per distinct text: each evaluation compiles the text, and a file repeats its strings.
    A literal without a backslash, a carriage return or a bytes prefix is its text between the quotes (no compile, and none of
    the cyclic garbage literal_eval's nested functions leave for the collector)."""
    body = raw[1:] if raw[:1] in ("r", "R", "u", "U") else raw
    if "\\" not in body and "\r" not in body and body[:1] in ("'", '"'):  # (compile reads \r\n as \n)
        n = 3 if len(body) >= 6 and body.startswith(body[0] * 3) else 1
        return body[n:-n]
    try:
        return ast.literal_eval(raw)
    except Exception:  # noqa: BLE001  (whatever literal_eval raises: the value is unknown)
        return _NOT_A_VALUE


def _is_add(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add)


def _indexed(dev: str) -> bool:
    """A device torch.device compares as the model names it: `cpu` or `cuda:<k>` (not the index-less
    current device, whose tensors report an index, nor a symbolic one)."""
    return dev == "cpu" or (dev.startswith("cuda:") and dev[5:].isdigit())


def _index_lives_there(idx: Val, table: Obj) -> bool:
    """An index tensor made on the GPU the table was moved to (not one moved there beside it from where the table
    was, `x.to(dev)[idx.to(dev)]`, or from the host, whose indices pick rows on any device): it cannot pick the rows
    where the table was, so moving the table whole is no waste MP016 can fix."""
    return (
        isinstance(idx, Obj)
        and idx.devs == table.devs
        and both_cuda(idx.devs, table.devs)
        and not (idx.moved_from is not None and idx.moved_from in (table.moved_from, one("cpu")))
    )


def _contains(container: Val, key: int | str) -> bool | None:
    """`key in container` for a dict of known keys, or a list, tuple or set of known ints or strings; None
    where not certain."""
    if isinstance(container, DictV) and not container.namespace:
        return key in container.items
    if isinstance(container, NamePrefix) and isinstance(key, str):
        return container.contains(key)  # `"backbone" in n` for a parameter of `self.backbone`
    if isinstance(container, SeqV) and container.items is not None and not container.module:
        if all(isinstance(i, Const) and type(i.value) in (int, str) for i in container.items):
            return any(i.value == key and type(i.value) is type(key) for i in container.items)  # type: ignore[attr-defined]
    return None


def _host_scalar(v: Val) -> bool:
    """A CPU tensor that may be 0-d (Obj kind "scalar"): it takes the device of what it meets."""
    return isinstance(v, Obj) and v.kind == "scalar" and v.devs == one("cpu")


def _one_number(v: Obj) -> bool:
    """Was `v` made from `torch.tensor(<one number>)` (a learned temperature, a loss scale), by the
    factory itself or through elementwise work on it? Beside an activation, it is the one to move."""
    at = v.at
    if not isinstance(at, cst.Call) or (dotted(at.func) or "").rsplit(".", 1)[-1] not in ("tensor", "scalar_tensor"):
        return False
    data = [a.value for a in at.args if a.keyword is None]
    return len(data) == 1 and a_number(data[0])


def _right_operand(node: cst.CSTNode) -> cst.BaseExpression | None:
    """The right operand of `a + b` (BinaryOperation), `a += b` (AugAssign) or `a == b` (Comparison)."""
    if isinstance(node, cst.Comparison):
        return node.comparisons[0].comparator if node.comparisons else None
    return getattr(node, "right", None) or getattr(node, "value", None)


def _moves_its_item_only(node: cst.CSTNode, target: cst.BaseAssignTargetExpression) -> bool:
    """`[f.to(dev) for f in ...]`: a list or tuple comprehension whose element only moves its item."""
    elt = getattr(node, "elt", None)
    return (
        isinstance(node, cst.ListComp)
        and isinstance(target, cst.Name)
        and isinstance(elt, cst.Call)
        and plain_device_move(elt)
        and isinstance(elt.func, cst.Attribute)
        and isinstance(elt.func.value, cst.Name)
        and elt.func.value.value == target.value
    )


def _parameters_of_both(a: ParamsOf, b: ParamsOf) -> Val:
    """The parameters of two modules in one list: one item for each device they certainly span (Obj.spans, as a
    split model's own), when each module has parameters on known devices; else a list of items alike."""
    reps: dict[str, Obj] = {}
    for p in (a, b):
        if p.shape != "params" or p.mod.kind != "module" or p.mod.nn_class in torchapi.PARAMETERLESS:
            return SeqV(None, elem=UNK, kind="list")
        per_device = p.per_device()
        each: list[Val] = list(per_device) if per_device else [p.first()]
        for r in each:
            dev = single(r.devs) if isinstance(r, Obj) else None
            if dev is None or dev.startswith("sym:") or not isinstance(r, Obj):
                return SeqV(None, elem=UNK, kind="list")
            reps.setdefault(dev, r)
    head = a.first()
    if len(reps) < 2:
        return SeqV(None, elem=join_all(list(reps.values())), kind="list", head=head)
    elem = join_all(list(reps.values()))
    return SeqV(None, elem=elem, kind="list", spans=tuple(reps.values()), spans_by=tuple(reps), head=head)


def _certainly_not_none(v: Val) -> bool:
    """A value the program built as a container, a device or a tensor (on every path: not one joined with
    None), or a known constant other than None. (A module's attribute, such as a layer's `bias`, may be None
    where the model says parameter, and an element unpacked from an unknown value may be anything: not here.)"""
    if isinstance(v, Const):
        return v.value is not None
    if isinstance(v, Obj):
        return v.kind == "tensor" and not v.maybe_none and not v.opaque
    return isinstance(v, (SeqV, DictV, DeviceV)) and not getattr(v, "module", False)


def _gpu_index_of_host(idx: Obj, base: Obj) -> bool:
    """A tensor on a GPU used as the index of one in host memory: PyTorch refuses it ("indices should be
    either on cpu or on the same device as the indexed tensor"). Both devices must be certain."""
    if idx.kind in ("scalar", "module") or idx.may_be_0d or base.kind not in ("tensor", "param", "buffer"):
        return False  # (a 0-dim integer index is read as a number: `table[logits.argmax()]` runs, with a sync)
    i, b = single(idx.devs), single(base.devs)
    return bool(i and i.startswith("cuda") and b == "cpu" and not base.opaque)


# Factories of the same values wherever they run, from sizes alone (`torch.eye(n)`, `torch.arange(n)`).
_CONSTANT_FACTORIES = torchapi.SHAPE_FACTORIES - torchapi.RANDOM_FACTORIES - {"zeros", "empty"}


def _picks_positions(node: cst.Subscript) -> bool:
    """`h[:, 0]`, `h[-1]`, `h[..., 0]`: whole dimensions kept and one position of at least one other picked,
    so that the result drops that dimension."""
    picked = False
    for el in node.slice:
        sl = el.slice
        if isinstance(sl, cst.Slice):
            if sl.lower is not None or sl.upper is not None or sl.step is not None:
                return False
        elif isinstance(sl, cst.Index):
            v = sl.value
            if isinstance(v, cst.UnaryOperation) and isinstance(v.operator, cst.Minus):
                v = v.expression
            if isinstance(v, cst.Integer):
                picked = True
            elif not isinstance(v, cst.Ellipsis):
                return False
        else:
            return False
    return picked


def _element_kind(base: Obj, node: cst.Subscript, indices: list[Val]) -> str:
    """ "scalar" for a CPU tensor indexed by numbers only (`alpha_bar[t]`, `table[i, j]`): the result may be
    0-dim, and a 0-dim CPU tensor mixes with tensors on any GPU (the rank is not known, so it is not taken
    for a row); else "tensor"."""
    if base.devs != one("cpu") or len(indices) != len(node.slice):
        return "tensor"  # (a slice among the indices: `indices` holds only those of `cst.Index`)
    for el, v in zip(node.slice, indices, strict=True):
        if not isinstance(el.slice, cst.Index) or _none_or_ellipsis(el.slice.value):
            return "tensor"
        if isinstance(v, (Obj, SeqV)) or (isinstance(v, Const) and type(v.value) is not int):
            return "tensor"
    return "scalar"


def _none_or_ellipsis(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Ellipsis) or (isinstance(expr, cst.Name) and expr.value == "None")
