"""Using the summaries of other files (summary.py makes them): an imported name
resolved to a summarized class, function or constant, and a call of one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import libcst as cst

from mpcheck.devices.names import canonical
from mpcheck.devices.program import FuncInfo, State
from mpcheck.devices.values import (
    UNK,
    Const,
    DeviceV,
    Devs,
    DictV,
    Obj,
    QName,
    SeqV,
    Summarized,
    SymV,
    Val,
    as_device,
    is_split_devs,
    one,
    value_key,
)

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.gpucount import GpuCount
    from mpcheck.devices.interp import Interp


def resolve_import(
    project: dict[str, Any], target: str, used: Callable[[str], None], gpus: GpuCount | None = None, hops: int = 0
) -> Val:
    """The value an imported dotted name has: a summary of another checked file
    (`used(module)` is told which), else a library name (QName). `gpus`: the importer's
    assumed GPU count, which picks the summary made under that count (_under_count)."""
    mod, _, name = target.rpartition(".")
    summ = project.get(mod)
    if summ is not None and hops < 4:
        if name in summ.get("classes", {}):
            used(mod)
            return Summarized(_under_count(summ, "classes", name, gpus), name, "class", mod)
        if name in summ.get("functions", {}):
            used(mod)
            return Summarized(_under_count(summ, "functions", name, gpus), name, "function", mod)
        if name in summ.get("constants", {}) or any(
            name in c.get("constants", {}) for c in summ.get("counts", {}).values()
        ):
            # A constant built from the count (`DEVICES = [... for i in range(device_count())]`) is one only under a count.
            used(mod)
            c = _under_count(summ, "constants", name, gpus)
            return constant_value(c) if c is not None else UNK
        again = summ.get("reexports", {}).get(name)
        if again and again != target:
            used(mod)
            return resolve_import(project, again, used, gpus, hops + 1)
    return QName(canonical(target))


def _under_count(summ: dict[str, Any], kind: str, name: str, gpus: GpuCount | None) -> Any:
    """The summary of `name` under the importer's assumed GPU count (summary._by_count made one
    per count where it differs from the base one, made with the count unknown). A name whose
    summary depends on the count makes the importer one that asks the count (it is interpreted
    again per count, analysis.analyze); with the count unknown, or one no summary was made for,
    the base summary is the answer (what is unknown there stays unknown)."""
    base = summ[kind].get(name)
    counts = summ.get("counts")
    if not counts or gpus is None or not any(name in c.get(kind, {}) for c in counts.values()):
        return base
    gpus.asked = True
    if gpus.count is None:
        return base
    return counts.get(str(gpus.count), {}).get(kind, {}).get(name, base)


def refused(callee: Summarized) -> bool:
    """Does building (calling) it stop the program under the assumed count: its `assert n >= 4`
    fails there (summary._definitions)? Then the importer's count is refuted at the call."""
    return bool(callee.summary.get("refused"))


def constant_value(c: dict[str, Any]) -> Val:
    if "device" in c:
        return DeviceV(one(c["device"]))
    if "const" in c:
        return Const(c["const"])
    if "ns" in c:
        return DictV({k: constant_value(v) for k, v in c["ns"].items()}, namespace=True)
    if "dict" in c:
        return DictV({k: constant_value(v) for k, v in c["dict"].items()})
    return SeqV(tuple(constant_value(i) for i in c["list"]))


def _bind_params(params: list[str], args: list[Val], kwargs: dict[str, Val]) -> dict[str, Val]:
    bound = dict(zip(params, args))
    for k, v in kwargs.items():
        if k in params:
            bound[k] = v
    return bound


def _subst(devs: list[str] | None, bound: dict[str, Val]) -> Devs:
    """Devices of a summary with the caller's arguments put in for symbolic ones."""
    if devs is None:
        return None
    out: set[str] = set()
    for d in devs:
        if d.startswith("sym:"):
            name = d[4:]
            base, _, rest = name.partition("[")
            head, _, path = base.partition(".")
            if path and head in bound:
                # `sym:cfg.head_device`: an attribute of the caller's config object (another file's instance,
                # a namespace)
                v = _attribute_path(bound[head], path)
                v = _subscripted(v, f"[{rest}") if rest and v is not None else v
                got = as_device(v) if v is not None else None
                if got is None:
                    return None
                out |= got
                continue
            if base in bound:
                v = _subscripted(bound[base], f"[{rest}") if rest else bound[base]
                if v is None:
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


# One subscript of a symbolic device's name: `[1]`, `['head']`, `["head"]` (sym:cfg['devices']['head']).
_SUBSCRIPT = re.compile(r"""\[(?:(-?\d+)|'([^']*)'|"([^"]*)")\]""")


def _subscripted(v: Val, rest: str) -> Val | None:
    """`v` read through the subscripts `rest` spells (`[0]`, `['devices']['head']`): a list's item by
    index, a dict's entry by key; None when one is not there or not of that kind."""
    pos = 0
    while pos < len(rest):
        m = _SUBSCRIPT.match(rest, pos)
        if m is None:
            return None
        pos = m.end()
        index, *keys = m.groups()
        key = next((k for k in keys if k is not None), None)
        if (
            index is not None
            and isinstance(v, SeqV)
            and v.items is not None
            and -len(v.items) <= int(index) < len(v.items)
        ):
            v = v.items[int(index)]
        elif key is not None and isinstance(v, DictV) and key in v.items:
            v = v.items[key]
        else:
            return None
    return v


def _attribute_path(v: Val, path: str) -> Val | None:
    """`v.a.b` for `path` "a.b": the attributes an instance of another file's class was left with
    (summarized_attr), a namespace's; None where one is not known."""
    for name in path.split("."):
        if isinstance(v, Obj) and (v.extra or {}).get("summarized"):
            got = summarized_attr(v, name)
        elif isinstance(v, DictV) and v.namespace:
            got = v.items.get(name)
        else:
            return None
        if got is None:
            return None
        v = got
    return v


def _obj_from(s: dict[str, Any] | None, bound: dict[str, Val], label: str, node: cst.CSTNode | None) -> Val:
    if s is None:
        return UNK
    if s.get("kind") == "seq":
        return SeqV(
            tuple(_obj_from(i, bound, label, node) for i in s["items"]), kind="tuple", module=s.get("module", False)
        )
    devs = _subst(s.get("devs"), bound)
    split = tuple((a, d) for a, d in s["split"]) if s.get("split") else None
    kind = s.get("kind", "any")
    return Obj(
        kind,
        devs if not split else None,
        label=label,
        split=split,
        dispatched=s.get("dispatched", ""),
        origin=f"from `{label}`" if kind != "module" else "",
        at=node,
    )


def call_summarized(
    callee: Summarized, args: list[Val], kwargs: dict[str, Val], st: State, node: cst.CSTNode | None
) -> Val:
    """A call of a class or function of another file: its summary, with the caller's arguments put in."""
    summ = callee.summary
    bound = _bind_params(summ.get("params", []), args, kwargs)
    if callee.kind == "function":
        return _obj_from(summ.get("returns"), bound, callee.name, node)
    split = tuple((a, d) for a, d in summ["split"]) if summ.get("split") else None
    if split and bound:
        # Constructor arguments may decide the devices (devices=[...]): substitute them.
        subst: list[tuple[str, str]] = []
        for a, d in split:
            got = _subst([d], bound)
            if got is None or len(got) != 1:
                subst = []  # a device the arguments do not decide: no split known
                break
            subst.append((a, next(iter(got))))
        split = tuple(subst) if subst else None
    elif not split and summ.get("parts") and bound:
        # Parts placed on devices the constructor's arguments name (ToyMP(dev0, dev1)): split when they differ.
        split = _parts_split(summ["parts"], bound)
    obj = Obj(
        "module",
        _subst(summ.get("devs"), bound) if not split else None,
        label=callee.name,
        split=split,
        in_devs=_subst(summ.get("in"), bound),
        out_devs=_subst(summ.get("out"), bound),
        extra={
            "in_known": True,
            "summarized": callee.name,
            "first": summ.get("first") if split else None,  # the device of its first parameter
            "param_devs": summ.get("param_devs") if split else None,  # the devices its parameters span
            "returns": summ.get("returns"),
            "bound": bound,
            "loss": bool(summ.get("loss")),
            "in_moved": bool(summ.get("in_moved")),  # moved whole, its forward needs its input there
            "out_moved": bool(summ.get("out_moved")),
            "attrs": summ.get("attrs"),
            "consts": summ.get("consts"),
            "fields": summ.get("fields"),
            # What the construction set of the fields of a generated __init__ (a dataclass's).
            "given": {**dict(zip(summ.get("fields") or (), args)), **kwargs},
            "module": callee.module,  # where the class is defined: its methods' calls go there (callers.py)
            "built": node,  # the constructor call: what callers.note_call asks devices/as_built.py about
        },
    )
    if split:
        st.scope.split_seen = True
    return obj


def _parts_split(parts: list[list[str]], bound: dict[str, Val]) -> tuple[tuple[str, str], ...] | None:
    placed: list[tuple[str, str]] = []
    for a, d in parts:
        got = _subst([d], bound)
        if got is None or len(got) != 1:
            return None
        placed.append((a, next(iter(got))))
    return tuple(placed) if is_split_devs(d for _, d in placed) else None


def summarized_attr(mod: Obj, name: str, constants: bool = True) -> Val | None:
    """`model.devices` of an instance of a class of another file: the devices its __init__ left
    there (summary._device_attrs), the caller's argument for one it was given; None if unknown.
    `constants`: else a constant of the class body (`cfg.device`, see _class_constant)."""
    extra = mod.extra or {}
    c = (extra.get("attrs") or {}).get(name)
    if c is None:
        return _class_constant(extra, name) if constants else None
    if "param" in c:
        v = (extra.get("bound") or {}).get(c["param"])
        return v if isinstance(v, (DeviceV, SeqV)) or (isinstance(v, Const) and as_device(v) is not None) else None
    return constant_value(c)


def _class_constant(extra: dict[str, Any], name: str) -> Val | None:
    """`cfg.device` of an instance of a class of another file whose body gives it a constant
    (`device: str = "cuda:1"` of a dataclass): that constant, unless the construction passed the
    field (then its argument, when it is a device) or the class has no summary of it."""
    c = (extra.get("consts") or {}).get(name)
    if c is None:
        return None
    given = extra.get("given") or {}
    if name in given:
        v = given[name]
        return v if isinstance(v, DeviceV) or (isinstance(v, Const) and as_device(v) is not None) else None
    return constant_value(c)


def summarized_output(mod: Obj, node: cst.CSTNode | None) -> Val | None:
    """What calling an instance of a class of another file returns, when its summary
    knows more than one device: a tuple or list with a device per item. None otherwise."""
    extra = mod.extra or {}
    returns = extra.get("returns")
    if not returns:
        return None
    out = _obj_from(returns, extra.get("bound") or {}, extra.get("summarized", ""), node)
    return _opaque(out)


def _opaque(v: Val) -> Val:
    if isinstance(v, Obj):
        return v.with_(origin="output of", opaque=True)
    if isinstance(v, SeqV) and v.items is not None:
        return SeqV(tuple(_opaque(i) for i in v.items), kind=v.kind)
    return v


def call_inlined(
    interp: Interp, callee: Summarized, args: list[Val], kwargs: dict[str, Val], st: State, node: cst.CSTNode | None
) -> Val | None:
    """A call of a short function of another file whose summary carries its text (summary._inlined):
    its body run here with the caller's arguments, its free names read as its module reads them
    (an import, that module's summarised definition or constant; unknown else). Facts of the run
    are dropped (they would name lines of the other file), and so are the steps of an activation
    it moved (MP006's, which would name them too). None for a summary without a text."""
    source = callee.summary.get("source")
    if not source or len(interp.stack) >= 8:
        return None
    info = interp.inlined.get(source)
    if info is None:
        try:
            fn = cst.parse_module(source).body[0]
        except Exception:  # noqa: BLE001  (the parser's failures: a text that no longer parses is unknown)
            return None
        if not isinstance(fn, cst.FunctionDef):
            return None
        info = interp.inlined[source] = FuncInfo(fn, fn.name.value, f"{callee.module}.{fn.name.value}")
    if info in interp.stack:
        return None
    # One run per function and arguments (as Calls.call_function memoises): torch's importers call such
    # helpers 17,000 times with few distinct arguments. The run reports nothing and keeps no step.
    key = (
        id(info),
        tuple(value_key(a) for a in args),
        tuple(sorted((k, value_key(v)) for k, v in kwargs.items())),
        st.cur,
        st.mode,
    )
    memo = interp.inlined_runs.get(key)
    if memo is not None:
        return _placed_at(memo[0], node, callee.name, memo[1]) if memo[0] is not None else Const(None)
    env: dict[str, Val] = {}
    for name, target in (callee.summary.get("free") or {}).items():
        v = interp.imported(target) if target else UNK
        if isinstance(v, QName) and target.rpartition(".")[0] == callee.module:
            v = UNK  # a module-level name of that file its summary does not know
        env[name] = v
    interp.calls.bind(info, env, None, args, kwargs)
    run = State(env, st.cur, st.setdev, st.mode, None, False, st.scope)
    run.returns = []
    if info.is_generator:
        run.yields = SeqV((), kind="gen")
    steps = len(interp.recorder.crossings)
    with interp.recorder.muted():
        interp.stmts.run_body(info, run)
    moved = len(interp.recorder.crossings) != steps
    del interp.recorder.crossings[steps:]
    result = run.given_back()
    interp.inlined_runs[key] = (result, moved)
    return _placed_at(result, node, callee.name, moved) if result is not None else Const(None)


def _placed_at(v: Val, node: cst.CSTNode | None, name: str, moved: bool, depth: int = 0) -> Val:
    """`v`, made by a run of another file's code, with the nodes it names replaced by the call's
    (`node`): the other file's nodes have no place in this one. `moved`: the run moved an activation
    (its steps, which would name the other file's lines, are dropped): the result leaves its lineage
    (MP006 follows no chain through it)."""
    if depth > 3:
        return UNK
    if isinstance(v, Obj):
        extra = v.extra
        if extra:  # a loss's weights; "built": not by a call of this file (callers.note_call)
            extra = {
                k: _placed_at(x, node, name, moved, depth + 1) if isinstance(x, Obj) else x for k, x in extra.items()
            }
            if "built" in extra:
                extra["built"] = None
        return v.with_(
            at=node,
            moved_at=node if v.moved_at is not None else None,
            origin=f"from `{name}`" if v.kind != "module" else v.origin,
            extra=extra,
            lineage=None if moved else v.lineage,
            hop=0 if moved else v.hop,
        )
    if isinstance(v, SeqV):
        return SeqV(
            tuple(_placed_at(i, node, name, moved, depth + 1) for i in v.items) if v.items is not None else None,
            _placed_at(v.elem, node, name, moved, depth + 1),
            kind=v.kind,
            module=v.module,
        )
    if isinstance(v, DictV):
        return DictV(
            {k: _placed_at(i, node, name, moved, depth + 1) for k, i in v.items.items()},
            module=v.module,
            namespace=v.namespace,
        )
    return v
