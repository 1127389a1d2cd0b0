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

A class whose parts are on no known device (built on the default one) has "in": null; with
`"in_moved": true` its forward, once the importer moves the instance whole (`Net().to("cuda:1")`),
needs its input where the instance went, and with `"out_moved": true` its output ends there.

A function whose result the summary does not know, short and undecorated, also carries
`"source"` (its text) and `"free"` (its free names -> the dotted names they read): the importer
runs it with its arguments (summarized.call_inlined). A class whose parts go on devices its
constructor's parameters name has `"parts"` ([[attr, "sym:dev0"], ...]: a split where the
importer's arguments differ); a split one has `"first"`, the device of its first parameter; a
device-named `@property` that gives a device is one of its `"attrs"`.

A module whose summaries ask `torch.cuda.device_count()` also has `counts`: per assumed GPU
count, the summaries that differ under it (`{"4": {"classes": {"ChainNet": {..., "out":
["cuda:3"]}}}}`), `{"refused": true}` for one whose own `assert n >= 4` fails there.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable
from functools import partial
from typing import Any

import libcst as cst

from mpcheck.devices.callers import param_devices
from mpcheck.devices.events import LossMismatch
from mpcheck.devices.interp import Interp
from mpcheck.devices.moves import moved_instance
from mpcheck.devices.names import import_bindings
from mpcheck.devices.program import ClassInfo, FuncInfo, State, body_of, params_of
from mpcheck.devices.summarized import constant_value
from mpcheck.devices.values import (
    PROBE,
    Const,
    DeviceV,
    Devs,
    DictV,
    Obj,
    ParamsOf,
    SeqV,
    SymV,
    Val,
    one,
    placements,
    single,
)
from mpcheck.devices.walk import attribute_assignments, walk

_MAX_RETURN_ITEMS = 4


def summarize_module(
    module: cst.Module, modname: str, gpus: tuple[int, ...] = (), project: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The summary of a module; with `gpus`, also what changes of it under each assumed GPU count
    when its code asks `torch.cuda.device_count()` (`counts`, see _by_count). `project`: the
    summaries of other modules it may read (the device constants it imports: `constants_of`)."""
    project = project or {}
    out: dict[str, Any] = {"classes": {}, "functions": {}, "reexports": {}, "constants": {}}
    with Interp(module, modname, project) as interp:
        _top_level(interp, module, out)
        top_asked = interp.gpus.asked  # a module-level constant built from the count
        asked = _definitions(interp, out)
        by_count = gpus and (asked or top_asked) and interp.gpus.visible is None
    if by_count:
        # A module-level name built from the count (its own, or a constant it imports) may be read by any
        # definition: then all are made again under each count (only those that differ are kept).
        counts = _by_count(module, modname, gpus, out, None if top_asked else asked, project)
        if counts:
            out["counts"] = counts
    return out


def constants_of(summary: dict[str, Any] | None) -> dict[str, Any]:
    """Of a module's summary, its device constants only (those made under a GPU count too): what a
    module that imports them is summarised with (summarize_module's `project`)."""
    if not summary:
        return {}
    out: dict[str, Any] = {"constants": summary.get("constants", {})}
    counts = {n: {"constants": c["constants"]} for n, c in summary.get("counts", {}).items() if c.get("constants")}
    if counts:
        out["counts"] = counts
    return out


def _top_level(interp: Interp, module: cst.Module, out: dict[str, Any]) -> None:
    """Re-exports and module-level device constants (DEVICES = ["cuda:0", "cuda:1"]) that other files import."""
    st = State.fresh(interp.globals, "<summary>")
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.ImportFrom) and "reexports" in out:
                for local, target in import_bindings(small, interp.modname):
                    out["reexports"][local] = target
            elif (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
            ):
                name = small.targets[0].target.value
                value = _constant(interp.exprs.ev(small.value, st))
                if value is not None:
                    out["constants"][name] = value
                    interp.globals[name] = constant_value(value)


def _definitions(interp: Interp, out: dict[str, Any], only: set[tuple[str, str]] | None = None) -> set[tuple[str, str]]:
    """The summaries of the module's classes and functions (of `only`, ("classes" | "functions",
    name) pairs, when given); returns the pairs whose interpretation asked the GPU count. Under an
    assumed count, one whose interpretation meets a failing `assert n >= 4` (or a taken
    `if n < 2: raise`) is `refused`: building or calling it stops the program under that count
    (summarized.refused)."""
    asked: set[tuple[str, str]] = set()
    defs: list[tuple[str, str, Callable[[], dict[str, Any]]]] = [
        ("classes", name, partial(_class_summary_of, interp, cinfo)) for name, cinfo in interp.classes.items()
    ]
    defs += [("functions", name, partial(_function_summary, interp, finfo)) for name, finfo in interp.functions.items()]
    for kind, name, summarize in defs:
        if only is not None and (kind, name) not in only:
            continue
        interp.gpus.refuted_at = None
        interp.gpus.asked = False
        try:
            out[kind][name] = summarize()
        except RecursionError:
            continue
        finally:
            if interp.gpus.asked:
                asked.add((kind, name))
        if interp.gpus.refuted_at is not None and interp.gpus.visible is None:
            out[kind][name] = {"refused": True}
    return asked


def _class_summary_of(interp: Interp, cinfo: ClassInfo) -> dict[str, Any]:
    return _class_summary(interp, cinfo, interp.instances.default_instance(cinfo))


def _by_count(
    module: cst.Module,
    modname: str,
    gpus: tuple[int, ...],
    base: dict[str, Any],
    asked: set[tuple[str, str]] | None,
    project: dict[str, Any],
) -> dict[str, Any]:
    """{"4": {"classes": {...}, "functions": {...}, "constants": {...}}, ...}: for each assumed count,
    the summaries that differ from the base ones (made with the count unknown), the module
    interpreted again with `torch.cuda.device_count()` answering that count. `self.devices =
    [torch.device(f"cuda:{i}") for i in range(n)]` is unknown in the base summary and a list of
    n devices here. Only the definitions whose base summary asked the count (`asked`) are made
    again (all of them when `asked` is None). Empty when no summary depends on the count."""
    out: dict[str, Any] = {}
    for count in gpus:
        got: dict[str, Any] = {"classes": {}, "functions": {}, "constants": {}}
        with Interp(module, modname, project, gpu_count=count) as interp:
            _top_level(interp, module, got)
            _definitions(interp, got, asked)
        changed = {
            kind: {name: s for name, s in got[kind].items() if base[kind].get(name) != s}
            for kind in ("classes", "functions", "constants")
        }
        if any(changed.values()):
            out[str(count)] = {kind: by_name for kind, by_name in changed.items() if by_name}
    return out


def _devs(d: Devs) -> list[str] | None:
    return sorted(d) if d is not None else None


def _class_summary(interp: Interp, cinfo: ClassInfo, inst: Obj) -> dict[str, Any]:
    init = cinfo.method("__init__")
    params = [n for n, _ in params_of(init.node)][1:] if init else []
    s: dict[str, Any] = {
        "params": params,
        "split": [list(p) for p in inst.split] if inst.split else None,
        "devs": _devs(inst.devs),
        "in": None,
        "out": None,
    }
    if inst.split:
        first = ParamsOf(inst).first()  # `next(model.parameters()).device` in a user of an instance
        first_dev = single(first.devs) if isinstance(first, Obj) else None
        if first_dev is not None and not first_dev.startswith("sym:"):
            s["first"] = first_dev
        spans = param_devices(inst)
        if spans:  # the devices its parameters certainly span (ParamsOf.per_device in an importer)
            s["param_devs"] = spans
    if not inst.split and inst.attrs and params:
        parts = _parts_by_params(cinfo, inst, params)
        if parts:
            s["parts"] = parts
    attrs = _device_attrs(interp, inst, params)
    attrs.update(_device_properties(interp, cinfo, inst, attrs))
    if attrs:
        s["attrs"] = attrs
    consts = _class_constants(interp, cinfo, inst)
    if consts:
        s["consts"] = consts
        if init is None and cinfo.generated_init:
            s["fields"] = list(cinfo.fields)
    fwd = cinfo.method("forward")
    if fwd is not None:
        s["in"] = _devs(interp.calls.input_devs(inst, fwd))
        if s["in"] is None:  # placed parts say where a moved instance needs its input (moves._moved_summarized)
            s.update(_after_move(interp, inst, fwd))
        st = State.fresh(dict(interp.globals), "<summary>", inst)
        with interp.recorder.muted():
            res = interp.calls.call_function(fwd, inst, [Obj("tensor", PROBE)], {}, st, None)
        d = res.devs if isinstance(res, Obj) and res.devs != PROBE else None
        s["out"] = _devs(d) if d is not None and not any(x.startswith("sym:__") for x in d) else None
        if isinstance(res, SeqV):
            # A tuple or list of outputs (features, skips): each item with its own device.
            s["returns"] = _value_summary(_without_probe(res))
        named_loss = any(w in cinfo.name.lower() for w in ("loss", "criterion"))  # only those: probes cost
        if named_loss and not inst.split and inst.devs is None and _is_loss_of_inputs(interp, inst, fwd):
            s["loss"] = True
    return s


def _parts_by_params(cinfo: ClassInfo, inst: Obj, params: list[str]) -> list[list[str]] | None:
    """[[attr, device], ...] of the parts __init__ places on devices its parameters name
    (`self.a = nn.Linear(4, 4).to(dev0)`, `self.b = ... .to(dev1)`, `.to(cfg.head_device)`,
    `.to(cfg["devices"]["head"])`), at least two devices and at
    least one such parameter: not a split here (two parameters may name one device), one in an
    importer whose arguments name two (summarized.call_summarized). None otherwise."""
    placed: list[list[str]] = []
    for attr, v in inst.attrs.items() if inst.attrs else ():
        if attr in cinfo.refs:
            continue
        for d, _ in placements(v):
            if d.startswith("sym:") and d[4:].partition("[")[0].partition(".")[0] not in params:
                return None  # a device of something else the summary cannot name
            if [attr, d] not in placed:
                placed.append([attr, d])
    devs = {d for _, d in placed}
    return placed if len(devs) >= 2 and any(d.startswith("sym:") for d in devs) else None


# Where an importer's `.to(d)` puts a whole instance, for the probe of what its forward then needs.
_MOVED = one("sym:__moved__")


def _after_move(interp: Interp, inst: Obj, fwd: FuncInfo) -> dict[str, bool]:
    """What the forward of an instance moved whole (`Net().to("cuda:1")` in the importing file)
    needs and gives: {"in_moved": True} when it then needs its input where the instance went,
    {"out_moved": True} when its output ends there. An instance built on the default device has
    no known "in" (its parts are on no device the model knows), yet once moved its forward needs
    its input on the target like any module of the importer's own file (moves.moved_instance)."""
    moved = moved_instance(inst, _MOVED, "moved", fwd.node)
    if moved is None:
        return {}
    out: dict[str, bool] = {}
    if interp.calls.input_devs(moved, fwd) == _MOVED:
        out["in_moved"] = True
    st = State.fresh(dict(interp.globals), "<summary>", moved)
    with interp.recorder.muted():
        res = interp.calls.call_function(fwd, moved, [Obj("tensor", _MOVED)], {}, st, None)
    if isinstance(res, Obj) and res.devs == _MOVED:
        out["out_moved"] = True
    return out


def _device_attrs(interp: Interp, inst: Obj, params: list[str]) -> dict[str, Any]:
    """The attributes __init__ leaves holding devices (`self.devices = devices`, `self.head_device =
    "cuda:1"`) and no other method assigns: what `model.devices[0]` reads in an importing file
    (summarized.summarized_attr). A constructor parameter is named, for the caller's argument."""
    out: dict[str, Any] = {}
    rebound = interp.moves.rebound_attributes(inst)
    for name, v in (inst.attrs or {}).items():
        if name in rebound:
            continue
        if isinstance(v, SymV) and v.name in params:
            out[name] = {"param": v.name}
            continue
        c = _constant(v)
        if c is not None and _names_devices(c):
            out[name] = c
    return out


def _device_properties(interp: Interp, cinfo: ClassInfo, inst: Obj, attrs: dict[str, Any]) -> dict[str, Any]:
    """The short `@property` methods of the class (not its bases') named for a device that give one
    (`device` returning `next(self.parameters()).device`, the first parameter's): what `model.device`
    reads in an importing file, as an attribute __init__ left (summarized.summarized_attr). The
    summary's cut keeps those (lint/slices.py, _short_property)."""
    out: dict[str, Any] = {}
    for name, info in cinfo.methods.items():
        if "device" not in name or name in attrs or len(body_of(info.node)) > 3 or len(params_of(info.node)) != 1:
            continue
        if not any(isinstance(d.decorator, cst.Name) and d.decorator.value == "property" for d in info.node.decorators):
            continue
        st = State.fresh(dict(interp.globals), "<summary>", inst)
        with interp.recorder.muted():
            got = _constant(interp.calls.call_function(info, inst, [], {}, st, None))
        if got is not None and _names_devices(got):
            out[name] = got
    return out


def _class_constants(interp: Interp, cinfo: ClassInfo, inst: Obj) -> dict[str, Any]:
    """The class body's constants that name devices (`device = "cuda:1"`, a dataclass's
    `device: str = "cuda:1"`), and its plain numbers and strings beside them: what `C.device`, or `cfg.device` of an instance, reads in an
    importing file (Expressions._constant_attr, summarized._class_constant). Not one that a method
    assigns on the instance, or that this module assigns on the class (`C.device = ...`; what it
    assigns on an instance of its own, `cfg.device = ...`, is that object's, not the importer's)."""
    out: dict[str, Any] = {}
    lineage = list(cinfo.lineage())
    if not any(c.class_attrs for c in lineage):
        return out  # no class-body constant anywhere: nothing to read, no walk of the module
    on_class = attribute_assignments(interp.module).on_name.get(cinfo.name, frozenset())
    rebound = interp.moves.rebound_attributes(inst) | on_class
    st = State.fresh(dict(interp.globals), "<class>")
    for c in reversed(lineage):
        for name, expr in c.class_attrs.items():
            if name in rebound or name in (inst.attrs or {}):
                out.pop(name, None)
                continue
            v = _constant(interp.exprs.ev(expr, st))
            if v is not None and (_names_devices(v) or "const" in v):
                out[name] = v
            else:
                out.pop(name, None)
    # A class of settings that names a device keeps its numbers and strings too (`split_at: int = 2`,
    # `n_layers = 4`): where a split falls, and how many blocks each side gets, are read beside the devices.
    return out if any(_names_devices(v) for v in out.values()) else {}


def _names_devices(c: dict[str, Any]) -> bool:
    """Is a constant (summary._constant's form) a device, or a list of devices only?"""
    if "device" in c:
        return True
    if "const" in c:  # "cuda:1"
        return isinstance(c["const"], str) and re.fullmatch(r"cpu|cuda:\d+", c["const"]) is not None
    if "list" in c:
        return bool(c["list"]) and all(_names_devices(i) for i in c["list"])
    if "dict" in c:  # a settings dict: some entry names one
        return any(_names_devices(i) for i in c["dict"].values())
    return False


# Two inputs certainly on two different devices, whatever they are (values.affine): a probe pair.
_PAIR = (one("sym:__pair__"), one("sym:__pair__+1"))


def _is_loss_of_inputs(interp: Interp, inst: Obj, fwd: FuncInfo) -> bool:
    """Does the class's forward give its first two arguments, unmoved, to a loss (a criterion class of
    another file, `FocalLoss()(logits, target)`)? Then a caller that passes them on two devices
    gets MP008 at its call. Probed with two inputs on two distinct symbolic devices."""
    if len(params_of(fwd.node)) < 3:
        return False
    st = State.fresh(dict(interp.globals), "<summary>", inst)
    args: list[Val] = [Obj("tensor", d) for d in _PAIR]
    with interp.recorder.muted():
        interp.calls.call_function(fwd, inst, args, {}, st, None)
        return any(
            isinstance(f, LossMismatch)
            and {single(f.value.devs), single(f.other.devs)} == {d for p in _PAIR for d in p}
            for f in interp.recorder.facts
        )


def _function_summary(interp: Interp, finfo: FuncInfo) -> dict[str, Any]:
    params = [n for n, _ in params_of(finfo.node)]
    st = State.fresh(dict(interp.globals), "<summary>")
    with interp.recorder.muted():
        res = interp.calls.call_function(finfo, None, [SymV(p) for p in params], {}, st, None)
    out: dict[str, Any] = {"params": params, "returns": _value_summary(res)}
    if not _tells_devices(out["returns"]) or _moves_a_module(out["returns"]):
        inlined = _inlined(interp, finfo)
        if inlined is not None:
            out.update(inlined)
    return out


def _tells_devices(r: dict[str, Any] | None) -> bool:
    """Does a `returns` summary say where anything is (a tuple of unknown items does not)?"""
    if r is None:
        return False
    if r.get("kind") == "seq":
        return any(_tells_devices(i) for i in r["items"])
    return bool(r.get("devs") or r.get("split") or r.get("dispatched"))


def _moves_a_module(r: dict[str, Any] | None) -> bool:
    """Does the function give back a module (or a value of unknown kind) moved whole (`return
    model.cuda().eval()`)? Its devices say where an unknown module would go; the importer's own
    module may be one its forward moves the input of, or a split the move collapses (MP007): the
    function's text, run there with that module, says which."""
    return r is not None and r.get("kind") in ("module", "any") and not r.get("split") and not r.get("dispatched")


_MAX_INLINED_STATEMENTS = 6
_MAX_INLINED = 600  # characters of a function's text that its summary may carry (summarized.call_inlined)
_BUILTINS = frozenset(dir(builtins))


def _inlined(interp: Interp, finfo: FuncInfo) -> dict[str, Any] | None:
    """{"source": the function's text, "free": its free name -> the dotted name it reads (an import,
    else this module's name for it: a definition or constant its summary has, unknown otherwise)}, for a short,
    undecorated function whose result the summary does not know: `layer_device(i)` returning
    f"cuda:{i % 2}", `move(batch, device)` returning `[t.to(device) for t in batch]` depend on the
    caller's arguments in ways no symbolic summary says. The importer runs it with its arguments
    (summarized.call_inlined). Not one whose defaults read names (evaluated in the importer, they
    would read its own), nor one that defines functions or classes inside."""
    node = finfo.node
    if node.decorators or node.asynchronous is not None or len(body_of(node)) > _MAX_INLINED_STATEMENTS:
        return None  # (a long body is not written out as text only to be found too long)
    if _not_inlined(node):
        return None
    source = interp.module.code_for_node(node).strip("\n")
    if len(source) > _MAX_INLINED:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    fn = tree.body[0]
    if not isinstance(fn, ast.FunctionDef):
        return None
    loads: set[str] = set()
    bound: set[str] = set()
    for n in ast.walk(fn):
        if n is not fn and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return None
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.Global, ast.Nonlocal, ast.Await)):
            return None
    defaults = [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]
    if any(isinstance(n, ast.Name) for d in defaults for n in ast.walk(d)):
        return None
    imports = _module_imports(interp)
    free: dict[str, str] = {}
    for name in sorted(loads - bound):
        if name in imports:
            free[name] = imports[name]
        elif name not in _BUILTINS or name in interp.globals:
            free[name] = f"{interp.modname}.{name}"  # a definition or constant of the module, if its summary has it
    return {"source": source, "free": free}


# What refuses inlining below, found by a walk (the text is written out only for the rest: on linting torch,
# code generation for bodies then refused was a third of this step).
_REFUSED_INSIDE = (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.Global, cst.Nonlocal, cst.Await)
_WORDS = (cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)


def _not_inlined(node: cst.FunctionDef) -> bool:
    """Is the function certainly refused: something inside it that `_inlined` refuses, or names and
    literals alone longer than its text may be (a lower bound of that length)?"""
    size = 0
    for n in walk(node.body):
        kind = type(n)
        if kind in _REFUSED_INSIDE:
            return True
        if kind in _WORDS:
            size += len(n.value)  # type: ignore[attr-defined]
            if size > _MAX_INLINED:
                return True
    return False


def _module_imports(interp: Interp) -> dict[str, str]:
    """The module-level imports of the module: local name -> dotted target."""
    out: dict[str, str] = {}
    for stmt in interp.module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    out.update(import_bindings(small, interp.modname))
    return out


def _without_probe(v: Val) -> Val:
    """The input's own device (a probe) is not a device the caller can use: unknown."""
    if isinstance(v, Obj) and v.devs is not None and any(x.startswith("sym:__") for x in v.devs):
        return v.with_(devs=None)
    if isinstance(v, SeqV) and v.items is not None:
        return SeqV(tuple(_without_probe(i) for i in v.items), kind=v.kind)
    return v


def _value_summary(v: Val, depth: int = 0) -> dict[str, Any] | None:
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


def _constant(v: Val) -> dict[str, Any] | None:
    """A JSON form of a device, a string, an int or a short list of them, else None."""
    if isinstance(v, DeviceV):
        d = single(v.devs)
        return {"device": d} if d is not None and not d.startswith("sym:") else None
    if isinstance(v, Const) and isinstance(v.value, (str, int)) and not isinstance(v.value, bool):
        return {"const": v.value}
    if isinstance(v, SeqV) and v.items is not None and len(v.items) <= 16:
        items = [_constant(i) for i in v.items]
        return {"list": items} if all(i is not None for i in items) else None
    if isinstance(v, DictV) and v.namespace:
        # types.SimpleNamespace(device="cuda:1", ...): its constant attributes.
        ns = {k: c for k, c in ((k, _constant(i)) for k, i in v.items.items()) if c is not None}
        return {"ns": ns} if ns else None
    if isinstance(v, DictV) and len(v.items) <= 32 and all(isinstance(k, str) for k in v.items):
        # A settings dict (`CONFIG = {"devices": {"head": "cuda:1"}, ...}`, as yaml.safe_load gives it):
        # its constant entries, kept only when some entry, at any depth, names a device.
        entries = {k: c for k, c in ((k, _constant(i)) for k, i in v.items.items()) if c is not None}
        return {"dict": entries} if any(_names_devices(c) for c in entries.values()) else None
    return None
