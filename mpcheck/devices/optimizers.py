"""torch.optim optimizers, and where their state is: MP001's stale optimizer state.

An optimizer holds its parameters by reference, so `model.to(dev)` after `Adam(model.parameters())`
is fine: the parameters move in place and the optimizer follows. Its *state* (Adam's `exp_avg`,
SGD's momentum buffer) does not: it is made on each parameter's device when it first exists, by the
first `step()` or by `load_state_dict()` (which casts the loaded state to where each parameter is at
that moment, usually the CPU of a fresh model on resume), and nothing moves it afterwards. A model
moved after that (`opt.load_state_dict(ckpt["opt"])`, then `model.parallelize()`) makes the next
`step()` raise: a state tensor on one device, its parameter on another.

So an optimizer is an object (`Obj` of kind "optimizer") that knows the module objects whose
`parameters()` it was given and, once it has state, the devices those parameters were on then. A
`step()` that finds them on other devices is the fact. The module objects are found again by
identity (`Obj.ident`, `Obj.built_idents`: kept by every moved copy) among the names of the step's
scope; where they are not, or a device is not known, nothing is said. The state is kept on the
object itself (a `step()` in a helper changes the caller's optimizer too, as Python does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import libcst as cst

from mpcheck.devices.events import StaleOptimizerState, StepsLoadedOnOneGpu
from mpcheck.devices.names import dotted
from mpcheck.devices.values import (
    LOADED,
    UNK,
    UNPLACED,
    Const,
    Devs,
    DictV,
    Obj,
    ParamsOf,
    SeqV,
    Val,
    is_moduleish,
    single,
)

if TYPE_CHECKING:
    from mpcheck.devices.interp import Interp
    from mpcheck.devices.program import ClassInfo, State

# torch.optim's optimizers. SGD has state only with momentum (it is the only one without by default);
# Adagrad makes its state in its constructor.
OPTIMIZERS = frozenset(
    (
        "Adadelta",
        "Adafactor",
        "Adagrad",
        "Adam",
        "AdamW",
        "Adamax",
        "ASGD",
        "LBFGS",
        "NAdam",
        "RAdam",
        "RMSprop",
        "Rprop",
        "SGD",
        "SparseAdam",
    )
)
OPTIMIZER_NAMES = tuple(f"torch.optim.{n}" for n in sorted(OPTIMIZERS))
# Those whose state holds a `step` tensor per parameter (SGD's momentum buffer has none; LBFGS counts in ints).
_STEP_TENSORS = OPTIMIZERS - {"SGD", "LBFGS", "SparseAdam"}
_KEY = "optimizer"
_FLAGS = "optimizer flags"  # its boolean keywords as built (`fused=True`, `foreach=False`)


@dataclass(frozen=True)
class _Optimizer:
    name: str  # "Adam"
    modules: tuple[Obj, ...]  # the modules whose parameters() it holds, as they were when it was built
    labels: tuple[str, ...]  # their expressions (`model`)
    stateful: bool
    state: frozenset[str] | None = None  # the devices its state was made on, once it has state
    state_at: cst.CSTNode | None = None  # the call that made it (`opt.step()`, `opt.load_state_dict(...)`)


def build(interp: Interp, name: str, args: list[Val], kwargs: dict[str, Val], node: cst.Call, st: State) -> Val:
    """`torch.optim.<name>(params, ...)`: an optimizer over the modules `params` names, else unknown."""
    given = args[0] if args else kwargs.get("params", UNK)
    found = _modules_of(interp, given, node.args[0].value if node.args and node.args[0].keyword is None else None, st)
    if found is None:
        return UNK
    modules, labels = found
    info = _Optimizer(name, modules, labels, _stateful(name, args, kwargs))
    flags = {k: v.value for k, v in kwargs.items() if isinstance(v, Const) and isinstance(v.value, bool)}
    opt = Obj(_KEY, None, origin=f"a torch.optim.{name}", at=node, extra={_KEY: info, _FLAGS: flags})
    if name == "Adagrad":  # its state (`sum`) is made in the constructor, where the parameters are
        _make_state(interp, opt, node, st)
    return opt


def method(interp: Interp, opt: Obj, meth: str, node: cst.Call, st: State, args: list[Val] | None = None) -> Val:
    """A method of an optimizer: `step()` checks and makes its state, `load_state_dict()` makes it anew."""
    info = _info(opt)
    if info is None:
        return UNK
    if meth == "load_state_dict":
        _make_state(interp, opt, node, st, again=True)
        _note_steps_loaded(interp, opt, info, args[0] if args else None, node, st)
    elif meth == "step":
        if info.state is None:
            _make_state(interp, opt, node, st)
        else:
            _check_step(interp, info, node, st)
    return UNK


def is_optimizer(v: Val) -> bool:
    return isinstance(v, Obj) and v.kind == _KEY and _info(v) is not None


def _info(opt: Obj) -> _Optimizer | None:
    got = (opt.extra or {}).get(_KEY)
    return got if isinstance(got, _Optimizer) else None


def _make_state(interp: Interp, opt: Obj, node: cst.Call, st: State, again: bool = False) -> None:
    info = _info(opt)
    if info is None or not info.stateful or (info.state is not None and not again):
        return
    devs = _devices_now(interp, info, st)
    # Not known: the state's devices stay unknown (a frozenset() would compare); later steps say nothing.
    state = frozenset(devs) if devs is not None else frozenset({"?"})
    opt.extra = {**(opt.extra or {}), _KEY: replace(info, state=state, state_at=node)}


def _note_steps_loaded(
    interp: Interp, opt: Obj, info: _Optimizer, given: Val | None, node: cst.Call, st: State
) -> None:
    """`opt.load_state_dict(ckpt["opt"])` with `ckpt = torch.load(path, map_location="cuda:0")`: load_state_dict
    casts each state tensor to its parameter's device, but not `step` (torch.optim.Optimizer's
    `_process_value_according_to_param_policy`: it is moved only for fused or capturable optimizers), so the
    steps of parameters on other GPUs stay on the mapped one, and the foreach step (the CUDA default) raises
    "Tensors of the same index must be on the same device" (StepsLoadedOnOneGpu)."""
    if info.name not in _STEP_TENSORS or not (isinstance(given, Obj) and given.origin.startswith(LOADED)):
        return
    mapped = single(given.devs)
    if mapped is None or not mapped.startswith("cuda"):
        return
    if any(_flag(opt, k) for k in ("fused", "capturable")) or _flag(opt, "foreach") is False:
        return
    now = _devices_now(interp, info, st)
    elsewhere = sorted(d for d in now or () if d != mapped and d.startswith("cuda"))
    if not elsewhere:
        return
    interp.recorder.record(
        StepsLoadedOnOneGpu(
            node=node,
            mode=st.mode,
            optimizer=info.name,
            mapped=mapped,
            loaded_at=given.at,
            params=tuple(sorted(now or ())),
            modules=info.labels,
        )
    )


def _flag(opt: Obj, name: str) -> bool | None:
    """A keyword the optimizer was built with, when a known constant (`fused=True`)."""
    v = ((opt.extra or {}).get(_FLAGS) or {}).get(name)
    return v if isinstance(v, bool) else None


def _check_step(interp: Interp, info: _Optimizer, node: cst.Call, st: State) -> None:
    assert info.state is not None
    now = _devices_now(interp, info, st)
    if now is None or "?" in info.state or now == info.state:
        return
    interp.recorder.record(
        StaleOptimizerState(
            node=node,
            mode=st.mode,
            optimizer=info.name,
            state=tuple(sorted(info.state)),
            state_at=info.state_at,
            params=tuple(sorted(now)),
            modules=info.labels,
        )
    )


def _devices_now(interp: Interp, info: _Optimizer, st: State) -> set[str] | None:
    """The devices the optimizer's parameters are on now, or None where a module is not found or a device
    is not known."""
    out: set[str] = set()
    for built in info.modules:
        now = _current(built, st, interp.default_device_changed)
        devs = _param_devices(now, interp.default_device_changed) if now is not None else None
        if devs is None:
            return None
        out |= devs
    return out


def _current(built: Obj, st: State, default_changed: bool) -> Obj | None:
    """The module object `built`, as the names of this scope (and `self`'s parts) hold it now."""
    candidates = list(st.env.values())
    me = st.self_obj
    if isinstance(me, Obj) and me.attrs is not None:
        candidates += [me, *me.attrs.values()]
    found: Obj | None = None
    for v in candidates:
        if isinstance(v, Obj) and v.kind in ("module", "any") and _same_object(v, built):
            if found is not None and _param_devices(found, default_changed) != _param_devices(v, default_changed):
                return None  # two views of it that disagree (paths not joined yet): not known
            found = v
    return found


def _same_object(a: Obj, b: Obj) -> bool:
    if a.built_idents is not None or b.built_idents is not None:
        return a.built_idents == b.built_idents and a.cls is b.cls
    return a.ident is not None and a.ident == b.ident


def _param_devices(m: Val, default_changed: bool, depth: int = 0) -> set[str] | None:
    """The devices of a module's parameters: its parts' (an instance of a class of the file), or its own
    device; None where one is not known (a symbolic or unknown device, a library dispatch). `default_changed`:
    the file changes the default device, so a module built without one is not known to be on the CPU."""
    if depth > 4:
        return None
    if isinstance(m, SeqV) and m.module:
        parts = list(m.items) if m.items is not None else [m.elem]
        return _union(_param_devices(p, default_changed, depth + 1) for p in parts)
    if isinstance(m, DictV) and m.module:
        return _union(_param_devices(p, default_changed, depth + 1) for p in m.items.values())
    if not isinstance(m, Obj) or m.dispatched:
        return None
    if m.kind == "param":
        return _concrete(m.devs)
    if m.kind not in ("module", "any"):
        return set()  # a buffer, a tensor, a number: no parameter of the optimizer's
    if m.attrs is None:
        if m.devs is None and m.origin == UNPLACED and not default_changed:
            return {"cpu"}  # built without a device, not moved since on this path: where torch put it
        return _concrete(m.devs)
    refs = m.cls.refs if m.cls is not None else set()
    parts = [v for a, v in m.attrs.items() if a not in refs]
    own = [p for p in parts if is_moduleish(p) and not (isinstance(p, Obj) and p.kind == "buffer")]
    if not own:
        return _concrete(m.devs)
    return _union(_param_devices(p, default_changed, depth + 1) for p in own)


def _union(parts: Iterable[set[str] | None]) -> set[str] | None:
    out: set[str] = set()
    for p in parts:
        if p is None:
            return None
        out |= p
    return out


def _concrete(devs: Devs) -> set[str] | None:
    """The one device of `devs` when it names one: not unknown, one of several (paths that disagree), `cuda`
    (the current device) or a symbolic device."""
    d = single(devs)
    return {d} if d is not None and (d == "cpu" or (d.startswith("cuda:") and d[5:].isdigit())) else None


def _modules_of(
    interp: Interp, given: Val, expr: cst.BaseExpression | None, st: State
) -> tuple[tuple[Obj, ...], tuple[str, ...]] | None:
    """The modules whose parameters `given` is: `model.parameters()`, or param groups of those
    (`[{"params": model.parameters(), "lr": ...}]`); None for anything else (a filtered list)."""
    if isinstance(given, ParamsOf) and given.shape == "params":
        mod = _identified(interp, given.mod, expr, st)
        return ((mod,), (_label(expr),)) if mod is not None else None
    if isinstance(given, SeqV) and given.items:
        mods: list[Obj] = []
        labels: list[str] = []
        exprs = _elements(expr)
        for i, group in enumerate(given.items):
            params = group.items.get("params") if isinstance(group, DictV) else None
            if not isinstance(params, ParamsOf) or params.shape != "params":
                return None
            in_group = _group_params(exprs[i]) if i < len(exprs) else None
            mod = _identified(interp, params.mod, in_group, st)
            if mod is None:
                return None
            mods.append(mod)
            labels.append(_label(in_group))
        return tuple(mods), tuple(labels)
    return None


def _identified(interp: Interp, mod: Obj, expr: cst.BaseExpression | None, st: State) -> Obj | None:
    """`mod` with an identity its moved copies keep (Obj.ident, Obj.built_idents), to be found again at a step.
    A module built outside an `__init__` has none yet: the name `expr` reads it from (`model` of
    `model.parameters()`) is given one, when that name holds it."""
    if mod.built_idents is not None or mod.ident is not None:
        return mod
    owner = expr.func.value if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) else None
    if not isinstance(owner, cst.Name) or st.env.get(owner.value) is not mod or mod.kind not in ("module", "any"):
        return None
    named = mod.with_(ident=interp.new_ident(mod.nn_class or mod.label or owner.value))
    st.env[owner.value] = named
    return named


def _label(expr: cst.BaseExpression | None) -> str:
    """`model` for `model.parameters()`."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        return dotted(expr.func.value) or ""
    return ""


def _elements(expr: cst.BaseExpression | None) -> list[cst.BaseExpression | None]:
    if isinstance(expr, (cst.List, cst.Tuple)):
        return [e.value if isinstance(e, cst.Element) else None for e in expr.elements]
    return []


def _group_params(expr: cst.BaseExpression | None) -> cst.BaseExpression | None:
    if isinstance(expr, cst.Dict):
        for el in expr.elements:
            if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
                if el.key.evaluated_value == "params":
                    return el.value
    return None


def _stateful(name: str, args: list[Val], kwargs: dict[str, Val]) -> bool:
    if name != "SGD":
        return True
    momentum = kwargs.get("momentum", args[2] if len(args) > 2 else Const(0))
    # momentum=0 (the default) keeps no state; an unknown value may.
    return not (isinstance(momentum, Const) and not momentum.value)


def is_optimizer_class(cls: ClassInfo, qname: Callable[[cst.CSTNode], str | None]) -> bool:
    """A class of the file written on torch.optim.Optimizer (SAM, Lookahead, a hand-written Adam)."""
    return any(qname(b.value) == "torch.optim.Optimizer" for b in cls.node.bases)


def init_param_groups(me: Val, args: list[Val], kwargs: dict[str, Val]) -> None:
    """`super().__init__(params, defaults)` of such a class: `self.param_groups` is one group of `params`
    (with the defaults' keys), or the groups given (a list of dicts), as torch.optim.Optimizer makes it. Its
    methods' loops over `group["params"]` then meet a parameter on each device of a split model."""
    if not isinstance(me, Obj) or me.attrs is None:
        return
    params = args[0] if args else kwargs.get("params", UNK)
    defaults = args[1] if len(args) > 1 else kwargs.get("defaults", UNK)
    if isinstance(params, SeqV) and params.items and all(isinstance(g, DictV) for g in params.items):
        groups: SeqV = params
    elif isinstance(params, ParamsOf) or (isinstance(params, SeqV) and params.spans is not None):
        # `model.parameters()`, or `list(a.parameters()) + list(b.parameters())`
        extra = dict(defaults.items) if isinstance(defaults, DictV) else {}
        groups = SeqV((DictV({**extra, "params": params}),), kind="list")
    else:
        return
    me.attrs["param_groups"] = groups
