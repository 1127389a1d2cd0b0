"""Summaries of a file's classes and functions, for the files that import it.

A summary is plain JSON (it is cached): for each class, where its __init__
puts its parts (split or one device), where its forward needs its input and
where its output ends; for each function, what it returns (a module or tensor
on a device, possibly "on the device of argument `device`"); and the names a
package's __init__ re-exports from other modules.

    {"classes": {"SplitNet": {"params": ["dev0"], "split": [["enc", "cuda:0"], ...],
                              "devs": null, "in": ["cuda:0"], "out": ["cuda:1"],
                              "dispatched": ""}},
     "functions": {"make_stage": {"params": ["dim", "device"],
                                  "returns": {"kind": "module", "devs": ["sym:device"]}}},
     "reexports": {"SplitNet": "models.split.SplitNet"}}
"""

from __future__ import annotations

import libcst as cst

from mpcheck.devices.interp import _PROBE, Interp, Scope, State
from mpcheck.devices.names import import_bindings
from mpcheck.devices.values import (
    CURRENT,
    UNK,
    Const,
    DeviceV,
    Obj,
    SeqV,
    SymV,
    Val,
    as_device,
    one,
    single,
)

_MAX_RETURN_ITEMS = 4


def summarize_module(module: cst.Module, modname: str) -> dict:
    interp = Interp(module, modname, {})
    out: dict = {"classes": {}, "functions": {}, "reexports": {}, "constants": {}}
    st = State(interp.globals, CURRENT, None, "", None, False, Scope("<summary>"))
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom):
                    for local, target in import_bindings(small, modname):
                        out["reexports"][local] = target
                elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                    # Module-level device constants (DEVICES = ["cuda:0", "cuda:1"]) that other files import.
                    name = small.targets[0].target.value
                    value = _constant(interp.ev(small.value, st))
                    if value is not None:
                        out["constants"][name] = value
                        interp.globals[name] = constant_value(value)
    for name, cinfo in interp.classes.items():
        try:
            inst = interp.default_instance(cinfo)
            out["classes"][name] = _class_summary(interp, cinfo, inst)
        except RecursionError:
            continue
    for name, finfo in interp.functions.items():
        try:
            out["functions"][name] = _function_summary(interp, finfo)
        except RecursionError:
            continue
    return out


def _devs(d) -> list | None:
    return sorted(d) if d is not None else None


def _class_summary(interp: Interp, cinfo, inst: Obj) -> dict:
    params = [n for n, _ in interp._params(cinfo.method("__init__").node)][1:] if cinfo.method("__init__") else []
    s = {
        "params": params,
        "split": [list(p) for p in inst.split] if inst.split else None,
        "devs": _devs(inst.devs),
        "in": None,
        "out": None,
    }
    fwd = cinfo.method("forward")
    if fwd is not None:
        s["in"] = _devs(interp.input_devs(inst, fwd))
        st = State(dict(interp.globals), CURRENT, None, "", inst, False, Scope("<summary>"))
        saved = interp._seen_events, interp.events, interp.chains
        interp._seen_events, interp.events, interp.chains = set(), [], []
        try:
            res = interp.call_function(fwd, inst, [Obj("tensor", _PROBE)], {}, st, None)
        finally:
            interp._seen_events, interp.events, interp.chains = saved
        d = res.devs if isinstance(res, Obj) and res.devs != _PROBE else None
        s["out"] = _devs(d) if d is not None and not any(x.startswith("sym:__") for x in d) else None
    return s


def _function_summary(interp: Interp, finfo) -> dict:
    params = [n for n, _ in interp._params(finfo.node)]
    st = State(dict(interp.globals), CURRENT, None, "", None, False, Scope("<summary>"))
    saved = interp._seen_events, interp.events, interp.chains
    interp._seen_events, interp.events, interp.chains = set(), [], []
    try:
        res = interp.call_function(finfo, None, [SymV(p) for p in params], {}, st, None)
    finally:
        interp._seen_events, interp.events, interp.chains = saved
    return {"params": params, "returns": _value_summary(res)}


def _value_summary(v: Val, depth: int = 0) -> dict | None:
    if isinstance(v, Obj) and v.kind in ("module", "any", "tensor", "param", "buffer"):
        return {
            "kind": "module" if v.kind in ("module",) else ("any" if v.kind == "any" else "tensor"),
            "devs": _devs(v.devs),
            "split": [list(p) for p in v.split] if v.split else None,
            "dispatched": v.dispatched,
        }
    if isinstance(v, SeqV) and v.items is not None and len(v.items) <= _MAX_RETURN_ITEMS and depth < 2:
        return {"kind": "seq", "items": [_value_summary(i, depth + 1) for i in v.items], "module": v.module}
    return None


def _constant(v: Val):
    """A JSON form of a device, a string, an int or a short list of them, else None."""
    if isinstance(v, DeviceV):
        d = single(v.devs)
        return {"device": d} if d is not None and not d.startswith("sym:") else None
    if isinstance(v, Const) and isinstance(v.value, (str, int)) and not isinstance(v.value, bool):
        return {"const": v.value}
    if isinstance(v, SeqV) and v.items is not None and len(v.items) <= 16:
        items = [_constant(i) for i in v.items]
        return {"list": items} if all(i is not None for i in items) else None
    return None


def constant_value(c: dict) -> Val:
    if "device" in c:
        return DeviceV(one(c["device"]))
    if "const" in c:
        return Const(c["const"])
    return SeqV(tuple(constant_value(i) for i in c["list"]))


# ---------------------------------------------------------------- use


def _bind_params(params: list, args: list, kwargs: dict) -> dict:
    bound = dict(zip(params, args))
    for k, v in kwargs.items():
        if k in params:
            bound[k] = v
    return bound


def _subst(devs: list | None, bound: dict):
    """Devices of a summary with the caller's arguments put in for symbolic ones."""
    if devs is None:
        return None
    out = set()
    for d in devs:
        if d.startswith("sym:"):
            name = d[4:]
            base, _, rest = name.partition("[")
            if base in bound:
                v = bound[base]
                if rest and isinstance(v, SeqV) and v.items is not None:
                    try:
                        k = int(rest.rstrip("]"))
                        v = v.items[k]
                    except (ValueError, IndexError):
                        return None
                elif rest:
                    return None
                got = as_device(v)
                if got is None and isinstance(v, SymV):
                    got = one(f"sym:{v.name}")
                if got is None:
                    return None
                out |= got
                continue
            if base in ("__input__",) or base.startswith("each:"):
                out.add(d)
                continue
            return None if name.split(".")[0] in bound else frozenset(devs)
        out.add(d)
    return frozenset(out)


def _obj_from(s: dict | None, bound: dict, label: str, node) -> Val:
    if s is None:
        return UNK
    if s.get("kind") == "seq":
        return SeqV(tuple(_obj_from(i, bound, label, node) for i in s["items"]), kind="tuple", module=s.get("module", False))
    devs = _subst(s.get("devs"), bound)
    split = tuple((a, d) for a, d in s["split"]) if s.get("split") else None
    kind = s.get("kind", "any")
    return Obj(kind, devs if not split else None, label=label, split=split, dispatched=s.get("dispatched", ""),
               origin=f"from `{label}`" if kind != "module" else "", at=node)


def call_summarized(interp: Interp, callee, args: list, kwargs: dict, st: State, node) -> Val:
    summ = callee.summary
    bound = _bind_params(summ.get("params", []), args, kwargs)
    if callee.kind == "function":
        return _obj_from(summ.get("returns"), bound, callee.name, node)
    split = tuple((a, d) for a, d in summ["split"]) if summ.get("split") else None
    if split and bound:
        # Constructor arguments may decide the devices (devices=[...]): substitute them.
        subst = []
        for a, d in split:
            got = _subst([d], bound)
            if got is None or len(got) != 1:
                subst = None
                break
            subst.append((a, next(iter(got))))
        split = tuple(subst) if subst else None
    obj = Obj(
        "module",
        _subst(summ.get("devs"), bound) if not split else None,
        label=callee.name,
        split=split,
        in_devs=_subst(summ.get("in"), bound),
        out_devs=_subst(summ.get("out"), bound),
        extra={"in_known": True, "summarized": callee.name},
    )
    if split:
        st.scope.split_seen = True
    return obj
