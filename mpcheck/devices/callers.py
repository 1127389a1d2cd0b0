"""Values across files: a helper of one project file run with the arguments another file calls it with.

Within a file, a helper is interpreted at each call with the caller's argument values
(Calls.call_function). Across files the same question spans two analyses: `main.py`
calls `utils.train_one_epoch(model, loader, devices[0], opt)` with a model split over
cuda:0 and cuda:1, and the loss line that mixes them is in `utils.py`. So:

- while `main.py` is interpreted, `note_call` keeps each call of a function of another
  module (a summarised one, or a dotted name the model does not know) with arguments
  whose devices are known, in a JSON form (`encode`): only concrete devices (`cpu`,
  `cuda:N`) cross, never symbolic ones, whose names mean nothing in the other file;
- the lint pipeline (lint/callers.py) gives each such call whose module is a linted
  file to that file's analysis as a caller context;
- `run_callers` runs the function once per distinct context, the arguments decoded
  (`decode`; an argument with no known device is what an entry-point run gives it),
  and the facts of that run name the call (events.CallSite), as a same-file helper's
  facts name theirs.

A method of another file's class (`trainer.train_epoch(loader)` on `trainer =
Trainer(model, "cuda:0")`) is kept the same way, as `Trainer.train_epoch`, with the
arguments the instance was built with (`init`); the callee runs it on an instance built
from those (`_callee`). It is followed only when the calling function leaves the instance,
and the modules it was built with, as built (devices/as_built.py: never passed to another
function, stored, moved or given an attribute, in any order); an instance the caller changed
(`trainer.device = ...`, Statements.assign_attr) or moved is not followed either.

Several files deep: a call of a function of another file made inside such a run
(`engine.train`, run with main.py's arguments, calls `utils.step(model, batch, dev)`) is
kept too, with the calls that led there (`chain`, outermost first); the pipeline gives it
to `utils.py` as a context of its own, and its facts name the whole chain. A context is at
most codes.CALLER_DEPTH files away from the call that made its devices known; deeper calls are not
kept. Only encoded devices cross each hop, so a value unknown at one level stays unknown
below it.

Precision: an argument whose device is not known stays unknown in the callee, and
each context runs on its own: a helper called from two places with different devices
reports only what one call proves, naming that call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import libcst as cst

from mpcheck import codes
from mpcheck.devices import torchapi as T
from mpcheck.devices.as_built import Uses
from mpcheck.devices.events import CallSite
from mpcheck.devices.moves import moved_instance
from mpcheck.devices.names import dotted
from mpcheck.devices.program import FuncInfo, State, params_of
from mpcheck.devices.summarized import constant_value
from mpcheck.devices.unmoved import moved_by_a_method
from mpcheck.devices.values import (
    PROBE,
    Const,
    DeviceV,
    Devs,
    Obj,
    ParamsOf,
    SeqV,
    Starred,
    SymV,
    Val,
    one,
)

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.interp import Interp

_CONCRETE = re.compile(r"^(?:cpu|cuda:\d+)$")
_MAX_ITEMS = 8  # lists of arguments (devices, stages) longer than this cross as unknown
# Dotted names of libraries, never a project file: their calls are not worth encoding.
_LIBRARIES = frozenset(("torch", "numpy", "np", "math", "os", "sys", "builtins", "logging", "time", "copy"))


def _concrete(devs: Devs) -> list[str] | None:
    """The devices, sorted, when all are concrete (`cpu`, `cuda:N`); else None."""
    if not devs or not all(_CONCRETE.match(d) for d in devs):
        return None
    return sorted(devs)


def _split(obj: Obj) -> list[list[str]] | None:
    if not obj.split or not all(_CONCRETE.match(d) for _, d in obj.split):
        return None
    return [[a, d] for a, d in obj.split]


def encode(interp: Interp, v: Val, depth: int = 0) -> Any:
    """A JSON form of `v` keeping what the callee needs of it: its devices, or for a
    module where its input must be and where its output ends; None when nothing is known."""
    if isinstance(v, DeviceV):
        devs = _concrete(v.devs)
        return {"device": devs} if devs else None
    if isinstance(v, Const) and (v.value is None or isinstance(v.value, (str, int, float, bool))):
        return {"const": v.value}
    if isinstance(v, Obj):
        if v.kind in ("tensor", "param", "buffer"):
            devs = _concrete(v.devs)
            return {"tensor": devs} if devs else None
        if v.kind in ("module", "any"):
            return _module(interp, v)
        if v.kind == "loss":
            return _loss(v)
        return None
    if isinstance(v, SeqV) and v.items is not None and len(v.items) <= _MAX_ITEMS and depth < 2:
        items = [encode(interp, i, depth + 1) for i in v.items]
        return {"list": items, "kind": v.kind} if any(known(i) for i in items) else None
    return None


def _module(interp: Interp, m: Obj) -> dict[str, Any] | None:
    if (m.extra or {}).get("collapsed") or m.dispatched:
        return None  # moved whole after a split, or split by a library: where its parts are is not known
    label = m.label or (m.cls.name if m.cls is not None else "")
    if m.cls is not None and m.attrs is not None:
        in_devs, out_devs = _forward_devices(interp, m)
    elif (m.extra or {}).get("summarized"):
        in_devs, out_devs = m.in_devs, m.out_devs
    else:
        devs = _concrete(m.devs)
        if devs and m.kind == "any":  # `labels.to(device)` of a value of unknown kind: where it is, all that crosses
            return {"any": devs}
        return {"module": label, "devs": devs} if devs and m.kind == "module" else None
    enc = {"module": label, "in": _concrete(in_devs), "out": _concrete(out_devs), "split": _split(m)}
    if enc["split"]:  # where `next(model.parameters())` is, for the callee's `.device` of it
        first = ParamsOf(m).first()
        devs = _concrete(first.devs) if isinstance(first, Obj) else None
        if devs and len(devs) == 1:
            enc["first"] = devs[0]
        spans = param_devices(m)
        if spans:  # where its parameters certainly are, for the callee's `model.parameters()`
            enc["param_devs"] = spans
    if enc["in"] or enc["out"]:
        return enc
    return _settings(m) if not m.split and m.attrs is None else None


def _settings(m: Obj) -> dict[str, Any] | None:
    """An instance of another file's class that is a bag of settings (`cfg = Config()`, its __init__
    leaving `self.embed_device = "cuda:0"`, or a dataclass's field defaults, `down_device: str =
    "cuda:0"`, with the fields the construction set): the device attributes its summary knows, as a
    namespace the callee reads `cfg.embed_device` of (summary._device_attrs); None when it has none."""
    extra = m.extra or {}
    attrs = extra.get("attrs") or {}
    ns = {k: c for k, c in attrs.items() if "param" not in c}
    fields = extra.get("fields") or ()
    if fields:
        # A dataclass: its defaults, then what the construction gave (a value it gave that does not
        # cross, a computed device, leaves the field unknown: dropped).
        ns.update({k: c for k, c in (extra.get("consts") or {}).items() if k in fields and _plain_const(c)})
        for k, v in (extra.get("given") or {}).items():
            ns.pop(k, None)
            if isinstance(v, Const) and isinstance(v.value, (str, int)) and not isinstance(v.value, bool):
                ns[k] = {"const": v.value}
    # Its numbers cross with its devices (`split_at`, `n_layers`: where the callee's split falls), never alone.
    return {"ns": ns} if extra.get("summarized") and any(_device_const(c) for c in ns.values()) else None


def _plain_const(c: Any) -> bool:
    """A summary's constant that is a device, a string or an int (summary._constant)."""
    return _device_const(c) or (isinstance(c, dict) and isinstance(c.get("const"), (str, int)))


def _device_const(c: Any) -> bool:
    """Is a summary's constant a concrete device's name ("cuda:1", or a torch.device)?"""
    return isinstance(c, dict) and (
        "device" in c or (isinstance(c.get("const"), str) and _CONCRETE.match(c["const"]) is not None)
    )


def param_devices(m: Obj) -> list[str] | None:
    """The concrete devices the parameters of a split module certainly span (ParamsOf.per_device), in
    order: what another file needs of it for per-parameter work (`for p in model.parameters()`)."""
    reps = ParamsOf(m).per_device()
    devs = [d for r in reps or () for d in _concrete(r.devs) or ()]
    return devs if reps and len(devs) == len(reps) else None


def _loss(m: Obj) -> dict[str, Any]:
    """A loss module (`nn.CrossEntropyLoss()`, passed as `criterion`): the callee's loss line compares
    its inputs only when it knows the callee is a loss. Its class-dimension kind (MP014) and the
    weights whose devices are concrete cross; a weight of unknown device is left out (never checked)."""
    extra = m.extra or {}
    kind = extra.get(T.CLASS_DIM)
    weights = {}
    for k, w in extra.items():
        devs = _concrete(w.devs) if isinstance(w, Obj) and k != T.CLASS_DIM else None
        if devs:
            weights[k] = devs
    return {"loss": {"class_dim": kind.value if isinstance(kind, Const) else None, "weights": weights}}


def _forward_devices(interp: Interp, m: Obj) -> tuple[Devs, Devs]:
    """(where the forward of an instance of a class of this file needs its input, where its
    output ends), as a summary says it of a class of another file (devices/summary.py)."""
    assert m.cls is not None
    fwd = m.cls.method("forward")
    if fwd is None:
        return None, None
    in_devs = interp.calls.input_devs(m, fwd)
    st = State.fresh(dict(interp.globals), "<caller>", m)
    with interp.recorder.muted():
        res = interp.calls.call_function(fwd, m, [Obj("tensor", PROBE)], {}, st, None)
    out = res.devs if isinstance(res, Obj) and res.devs != PROBE else None
    return in_devs, out


def known(enc: Any) -> bool:
    """Does an encoded value carry a device (a constant alone, but for a device's name like
    "cuda:1", does not make a call worth running)?"""
    if not isinstance(enc, dict):
        return False
    if "const" in enc:
        return isinstance(enc["const"], str) and _CONCRETE.match(enc["const"]) is not None
    if "list" in enc:
        return any(known(i) for i in enc["list"])
    if "loss" in enc:  # a loss tells where nothing is
        return bool(enc["loss"]["weights"])
    return True


def decode(enc: Any, name: str) -> Val:
    """The value an encoded argument stands for in the callee; `name`, the parameter's,
    for one with nothing known (as an entry-point run binds it: a symbolic value)."""
    if not isinstance(enc, dict):
        return SymV(name)
    if "device" in enc:
        return DeviceV(frozenset(enc["device"]))
    if "const" in enc:
        return Const(enc["const"])
    if "tensor" in enc:
        return Obj("tensor", frozenset(enc["tensor"]), origin="as the caller passed it")
    if "any" in enc:
        return Obj("any", frozenset(enc["any"]), origin="as the caller passed it")
    if "loss" in enc:
        extra: dict[str, Val] = {
            k: Obj("tensor", frozenset(d), origin="as the caller passed it") for k, d in enc["loss"]["weights"].items()
        }
        if enc["loss"].get("class_dim"):
            extra[T.CLASS_DIM] = Const(enc["loss"]["class_dim"])
        return Obj("loss", None, label="", extra=extra)
    if "ns" in enc:
        return constant_value(enc)  # a settings object's device attributes (_settings)
    if "list" in enc:
        return SeqV(tuple(decode(i, f"{name}[{k}]") for k, i in enumerate(enc["list"])), kind=enc.get("kind", "list"))
    if "devs" in enc:
        return Obj("module", frozenset(enc["devs"]), label=enc.get("module", ""))
    split = tuple((a, d) for a, d in enc["split"]) if enc.get("split") else None
    label = enc.get("module", "") or "the model"
    return Obj(
        "module",
        None,
        label=label,
        split=split,
        in_devs=frozenset(enc["in"]) if enc.get("in") else None,
        out_devs=frozenset(enc["out"]) if enc.get("out") else None,
        extra={
            "in_known": True,
            "summarized": label,
            "first": enc.get("first") if split else None,
            "param_devs": enc.get("param_devs") if split else None,
        },
    )


def note_call(
    interp: Interp,
    module: str,
    func: str,
    args: list[Val],
    kwargs: dict[str, Val],
    node: cst.CSTNode,
    instance: Obj | None = None,
    within: Obj | None = None,
    moved: str | None = None,
    receiver: cst.BaseExpression | None = None,
) -> None:
    """Keep a call of `module`.`func` (maybe another project file's) for the pipeline, when
    one of its arguments has a known device (Interp.outgoing, read by analysis.analyze).
    `instance`: for a method (`Class.method`), the instance of another file's class it is
    called on; the arguments it was built with go along (`init`, by name), when nothing in
    the calling function may have changed it since (devices/as_built.py). A call of the instance
    itself is `Class.forward` (`receiver`: the instance's expression, the call's function);
    `moved`: the one device the caller then moved it to, whole."""
    if not module or module.split(".")[0] in _LIBRARIES or not interp.recorder.live or interp.probes:
        return
    if moved is not None and not _CONCRETE.match(moved):
        return  # moved to the current device, or a symbolic one: its name means nothing in the callee
    if not isinstance(node, cst.Call) or any(a.star for a in node.args):
        return  # `*args` / `**kwargs`: which parameter gets what is not known
    init = None if instance is None else ((instance.extra or {}).get("bound") or {})
    given = (*args, *kwargs.values(), *(init or {}).values())
    if any(isinstance(a, Starred) for a in args) or not (within is not None or any(_may_know(a) for a in given)):
        return
    enc_args = [encode(interp, a) for a in args]
    enc_kwargs = {k: encode(interp, v) for k, v in sorted(kwargs.items())}
    enc_init = {k: encode(interp, v) for k, v in sorted((init or {}).items())}
    split = _split(within) if within is not None else None
    enc_within = (
        {"module": within.label or (within.cls.name if within.cls else ""), "split": split}
        if within and split
        else None
    )
    if not (enc_within or any(known(e) for e in (*enc_args, *enc_kwargs.values(), *enc_init.values()))):
        return
    if instance is not None and init is not None and not _left_as_built(interp, node, instance, init, receiver):
        return
    call: dict[str, Any] = {"module": module, "func": func, "args": enc_args, "kwargs": enc_kwargs}
    if init is not None:
        call["init"] = enc_init
    if moved is not None:
        call["moved"] = moved
    if enc_within:  # called by a method of a split class: the helper works inside it (MP003's question)
        call["within"] = enc_within
    outer = _outer_site(interp)
    if outer is not None:  # made in a run a caller of another file started: the calls that led here
        if len(outer.chain) + 2 > codes.CALLER_DEPTH:
            return
        call["chain"] = [_site_dict(c) for c in (*outer.chain, outer)]
    key = (id(node), repr(call))
    if key not in interp.outgoing_seen:
        interp.outgoing_seen.add(key)
        interp.outgoing.append((node, call))


def _left_as_built(
    interp: Interp, node: cst.Call, instance: Obj, init: Mapping[str, Val], receiver: cst.BaseExpression | None
) -> bool:
    """Is the instance a method is called on (`trainer` of `trainer.fit(...)`; `receiver`, else the
    call's: `model` of `model(x)`), and each module or list it was built with (`Trainer(model, ...)`),
    as they were built, for all the calling function (or file) may do (devices/as_built.py)? Only
    names bound there can tell, and a part of `self` built in __init__: anything else is not."""
    build = (instance.extra or {}).get("built")
    recv = receiver if receiver is not None else (node.func.value if isinstance(node.func, cst.Attribute) else None)
    uses = _uses(interp, interp.stack[-1].node if interp.stack else interp.module)
    named = isinstance(recv, cst.Name) and uses.as_built(recv.value)
    part = None
    if isinstance(recv, cst.Attribute) and isinstance(recv.value, cst.Name) and recv.value.value == "self":
        part = recv.attr.value  # `self.pe(h)`
    elif isinstance(recv, cst.Name) and not named:
        part = uses.iterated_part(recv.value)  # `for block in self.blocks: h = block(h)`
    if part is not None:
        # A part __init__ built (`self.pe = SinusoidalPE(d).to("cuda:0")`), as built in its whole file, and
        # built with no module or list the file may change in the meantime.
        return (
            isinstance(build, cst.Call)
            and not any(isinstance(v, SeqV) or (isinstance(v, Obj) and v.kind != "tensor") for v in init.values())
            and _uses(interp, interp.module).attribute_as_built(part)
        )
    if not named or not isinstance(build, cst.Call):
        return False
    values = list(init.values())
    for i, arg in enumerate(build.args):
        v = init.get(arg.keyword.value) if arg.keyword is not None else (values[i] if i < len(values) else None)
        if not (isinstance(v, SeqV) or (isinstance(v, Obj) and v.kind != "loss")):
            continue  # a device, a number, a string: nothing to change in place
        if isinstance(arg.value, cst.Name):
            if not uses.as_built(arg.value.value, build, strict=True, call=node):
                return False
        elif not isinstance(arg.value, cst.Call):  # `Trainer(self.model, ...)`: held elsewhere too
            return False
    return True


def _uses(interp: Interp, scope: cst.CSTNode) -> Uses:
    uses = interp.uses.get(id(scope))
    if uses is None:
        helpers = {name: f.node for name, f in interp.functions.items() if f.cls is None}
        uses = interp.uses[id(scope)] = Uses(scope, helpers)
    return uses


def _outer_site(interp: Interp) -> CallSite | None:
    """The call of another file whose context run is under way (run_callers puts it first), if any."""
    sites = interp.recorder.sites
    return sites[0] if sites and isinstance(sites[0], CallSite) else None


def _site_dict(c: CallSite) -> dict[str, Any]:
    return {"path": c.path, "line": c.line, "code": c.code}


def _site(d: Mapping[str, Any], chain: tuple[CallSite, ...] = ()) -> CallSite:
    return CallSite(str(d.get("path", "")), int(d.get("line", 0)), str(d.get("code", "")), chain)


def built_with_devices(interp: Interp, instance: Obj) -> bool:
    """Was an instance of another file's class built with an argument that carries a device across
    (`Net(cfg)`, `cfg` a settings object naming GPUs)? Its class then places it as that file's run of
    its __init__ will see."""
    bound = (instance.extra or {}).get("bound") or {}
    return any(_may_know(v) and known(encode(interp, v)) for v in bound.values())


def _may_know(v: Val) -> bool:
    """A cheap test before encoding: could `v` carry a device?"""
    return isinstance(v, (DeviceV, Obj)) or (isinstance(v, SeqV) and v.items is not None)


def _callee(
    interp: Interp, func: str, init: Mapping[str, Any], moved: str | None = None
) -> tuple[FuncInfo | None, Obj | None]:
    """The function `func` names, or for `Class.method` the method and the instance it runs on:
    built, its facts muted, with the arguments the caller built it with (`init`, by name: one
    with no known device is unknown, one not passed takes its default, as in Python).
    None for a name this file does not define, a dunder, a decorated method (a property, a static
    or class method), or a method of a class whose other methods change its attributes or move it:
    the state the call meets may not be what __init__ left. `moved`: the instance, once built,
    moved whole there (`SinusoidalPE(d).to("cuda:0")`: its plain tensor attributes stay)."""
    cls, _, meth = func.rpartition(".")
    if not cls:
        return interp.functions.get(func), None
    cinfo = interp.classes.get(cls)
    info = cinfo.method(meth) if cinfo is not None else None
    if cinfo is None or info is None or meth.startswith("__") or not _plain(info) or moved_by_a_method(cinfo):
        return None, None
    with interp.recorder.muted():
        inst = interp.instances.instantiate(cinfo, [], {k: decode(e, k) for k, e in init.items()}, None, None)
    if interp.moves.rebound_attributes(inst, besides=info.node):
        # Another method may have changed what __init__ left, before this call. What the followed method
        # itself assigns (`self.avg[name] = ...` in an EMA's update) is the interpreter's to follow.
        return None, None
    if moved is not None:
        moved_inst = moved_instance(inst, one(moved), f"moved to {moved!r} whole by its caller", info.node)
        return (info, moved_inst) if moved_inst is not None else (None, None)
    return info, inst


# Decorators that leave a method a method called with its instance: grad modes only.
_GRAD_MODES = frozenset(("torch.no_grad", "torch.inference_mode", "torch.enable_grad", "no_grad", "inference_mode"))


def _plain(info: FuncInfo) -> bool:
    """Is the method undecorated, or decorated by a grad mode only (`@torch.no_grad()` on an
    `evaluate`)? A property, a static or class method, or any other wrapper is not followed."""
    for d in info.node.decorators:
        expr = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        if dotted(expr) not in _GRAD_MODES:
            return False
    return True


def run_callers(interp: Interp, callers: Sequence[Mapping[str, Any]]) -> None:
    """Run each function of this file that another file calls, with the arguments of each of
    its calls there (lint/callers.py gathers them); facts then name that call."""
    for ctx in callers:
        if str(ctx.get("func", "")).endswith(".__init__"):
            _run_init(interp, ctx)
            continue
        moved = ctx.get("moved")
        info, inst = _callee(interp, str(ctx.get("func", "")), ctx.get("init") or {}, moved)
        if info is None:
            continue
        params = [n for n, _ in params_of(info.node)][1 if inst is not None else 0 :]
        args = [decode(e, params[i] if i < len(params) else "_") for i, e in enumerate(ctx.get("args", ()))]
        kwargs = {k: decode(e, k) for k, e in ctx.get("kwargs", {}).items()}
        env = dict(interp.globals)
        interp.calls.bind(info, env, inst, args, kwargs)
        within = decode(ctx["within"], "_") if inst is None and ctx.get("within") else None
        st = State.fresh(env, info.qual, inst if within is None else within)
        st.scope.split_seen = any(isinstance(a, Obj) and a.split for a in (inst, *args, *kwargs.values()))
        if isinstance(within, Obj) and within.split:
            # A helper a split class's method calls: it works inside that class (library._parallel_primitive).
            st.scope.split_seen = st.scope.split_class = True
        chain = tuple(_site(c) for c in ctx.get("chain", ()))
        sites = interp.recorder.sites
        sites.append(_site(ctx.get("via", {}), chain))
        try:
            interp.stmts.run_body(info, st)
        finally:
            sites.pop()


def _run_init(interp: Interp, ctx: Mapping[str, Any]) -> None:
    """Build the class `ctx` names (`Engine.__init__`) with the arguments another file built it with
    (a split model, calls.py notes no other): what its __init__ does to them (`self.model =
    model.cuda()`, MP007) is reported here, naming that construction."""
    cinfo = interp.classes.get(str(ctx.get("func", "")).rpartition(".")[0])
    init = cinfo.method("__init__") if cinfo is not None else None
    if cinfo is None or init is None or init.cls is not cinfo:
        return
    params = [n for n, _ in params_of(init.node)][1:]
    args = [decode(e, params[i] if i < len(params) else "_") for i, e in enumerate(ctx.get("args", ()))]
    kwargs = {k: decode(e, k) for k, e in ctx.get("kwargs", {}).items()}
    st = State.fresh(dict(interp.globals), init.qual)
    st.scope.split_seen = True
    sites = interp.recorder.sites
    sites.append(_site(ctx.get("via", {}), tuple(_site(c) for c in ctx.get("chain", ()))))
    try:
        interp.instances.instantiate(cinfo, args, kwargs, st, None)
    finally:
        sites.pop()
