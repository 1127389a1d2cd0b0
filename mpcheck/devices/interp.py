"""The device-flow interpreter: an abstract interpretation of one file.

It walks statements and expressions directly (no generic visitor, no libcst
metadata), carrying an environment of abstract values (values.py). Entry
points are the module body (a training script), every top-level function and
every method; calls of functions, methods and classes of the same file are
interpreted with their argument values (memoised), and those of other project
files through their summaries (summary.py).

What the rules need is recorded as events (`Event`): a transfer, a mismatch
between the devices of the inputs of an op, a wrap in DataParallel, a move of
a split model, an index-less placement after set_device. Rules read events;
they never walk the tree themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

import libcst as cst

from mpcheck.devices import torchapi
from mpcheck.devices.names import canonical, dotted, import_bindings
from mpcheck.devices.values import (
    CURRENT,
    UNK,
    ClassRef,
    Const,
    DeviceV,
    DictV,
    FuncRef,
    Obj,
    QName,
    SeqV,
    Summarized,
    SymV,
    Val,
    as_device,
    conflict,
    device_from_str,
    is_split_devs,
    join,
    join_devs,
    one,
    single,
)

_MAX_DEPTH = 4
UNPLACED = "built without a device"
_MAX_WORLDS = 4
_MAX_UNROLL = 16


@dataclass(eq=False)
class Starred(Val):
    """`*xs` of unknown length in a call: each item is like `elem`."""

    elem: Val


@dataclass
class Event:
    kind: str
    node: cst.CSTNode
    data: dict
    mode: str = ""


@dataclass(eq=False)
class FuncInfo:
    node: cst.FunctionDef
    name: str
    qual: str
    cls: Optional["ClassInfo"] = None


@dataclass(eq=False)
class ClassInfo:
    node: cst.ClassDef
    name: str
    methods: dict
    bases: list
    local_bases: list = field(default_factory=list)
    instances: dict = field(default_factory=dict)

    def method(self, name: str) -> Optional[FuncInfo]:
        seen = set()
        stack = [self]
        while stack:
            c = stack.pop(0)
            if id(c) in seen:
                continue
            seen.add(id(c))
            if name in c.methods:
                return c.methods[name]
            stack.extend(c.local_bases)
        return None


@dataclass
class Scope:
    """One entry point being interpreted (for MP004's 'code that builds or runs a split model')."""

    name: str
    split_seen: bool = False
    split_class: bool = False  # a method of a split class
    indexless: list = field(default_factory=list)  # after set_device
    indexless_any: list = field(default_factory=list)  # also inside `with torch.cuda.device`


class State:
    __slots__ = ("env", "cur", "setdev", "mode", "self_obj", "in_init", "scope", "returns")

    def __init__(self, env, cur, setdev, mode, self_obj, in_init, scope):
        self.env = env
        self.cur = cur  # the current CUDA device ('cuda' when never set, None unknown)
        self.setdev = setdev  # the set_device / with-device node in effect, or None
        self.mode = mode  # '' | 'eval' | 'train' | 'no_grad'
        self.self_obj = self_obj
        self.in_init = in_init
        self.scope = scope
        self.returns: list = []

    def copy(self) -> "State":
        s = State(dict(self.env), self.cur, self.setdev, self.mode, self.self_obj, self.in_init, self.scope)
        s.returns = self.returns
        return s


def _join_states(states: list[State]) -> State:
    base = states[0].copy()
    for other in states[1:]:
        keys = set(base.env) | set(other.env)
        for k in keys:
            a, b = base.env.get(k), other.env.get(k)
            base.env[k] = UNK if a is None or b is None else join(a, b)
        if base.cur != other.cur:
            base.cur = None
        if base.setdev is None:
            base.setdev = other.setdev
        if base.mode != other.mode:
            base.mode = ""
    return base


class Interp:
    def __init__(self, module: cst.Module, modname: str = "", project: dict | None = None):
        self.module = module
        self.modname = modname
        self.project = project or {}
        self.used_modules: set[str] = set()
        self.globals: dict[str, Val] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.functions: dict[str, FuncInfo] = {}
        self.events: list[Event] = []
        self._seen_events: set = set()
        self._memo: dict = {}
        self._stack: list = []
        self.default_device_changed = False
        self._in_unknown_loop = 0
        self._second_pass = 0
        self._init_indexless: dict[int, list] = {}  # instance -> its __init__'s index-less placements
        self._with_devices: set[int] = set()  # `with torch.cuda.device(...)` calls (lexically scoped)
        self._arg_nodes: list = []
        self._loop_outer: list[set] = []  # ids of the values alive before each enclosing loop
        self._probes: list[dict] = []  # input probes of forward summaries
        self.chains: list[dict] = []  # activation lineages with their transfers (MP006)
        # (id(node), key) -> every device set an operand there had to be on, over all
        # visits (loop iterations, paths, calls): a fix may move it to one fixed device
        # only when that set has one member (see DeviceModel.one_target).
        self.operand_targets: dict[tuple, set] = {}
        self._scan_module()

    # ------------------------------------------------------------ setup

    def _scan_module(self) -> None:
        g = self.globals
        for stmt in self.module.body:
            self._scan_stmt(stmt, g)

    def _scan_stmt(self, stmt, g) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    for local, target in import_bindings(small, self.modname):
                        g[local] = self._imported(target)
        elif isinstance(stmt, cst.ClassDef):
            info = ClassInfo(stmt, stmt.name.value, {}, [dotted(b.value) or "" for b in stmt.bases])
            for s in stmt.body.body:
                if isinstance(s, cst.FunctionDef):
                    info.methods[s.name.value] = FuncInfo(s, s.name.value, f"{info.name}.{s.name.value}", info)
            for b in info.bases:
                if b in self.classes:
                    info.local_bases.append(self.classes[b])
            self.classes[info.name] = info
            g[info.name] = ClassRef(info)
        elif isinstance(stmt, cst.FunctionDef):
            info = FuncInfo(stmt, stmt.name.value, stmt.name.value)
            self.functions[info.name] = info
            g[info.name] = FuncRef(info)
        elif isinstance(stmt, (cst.If, cst.Try)):
            for s in stmt.body.body:
                self._scan_stmt(s, g)

    def _imported(self, target: str, hops: int = 0) -> Val:
        # A class or function of another checked file: use its summary.
        mod, _, name = target.rpartition(".")
        summ = self.project.get(mod)
        if summ is not None and hops < 4:
            if name in summ.get("classes", {}):
                self.used_modules.add(mod)
                return Summarized(summ["classes"][name], name, "class")
            if name in summ.get("functions", {}):
                self.used_modules.add(mod)
                return Summarized(summ["functions"][name], name, "function")
            if name in summ.get("constants", {}):
                from mpcheck.devices.summary import constant_value

                self.used_modules.add(mod)
                return constant_value(summ["constants"][name])
            again = summ.get("reexports", {}).get(name)
            if again and again != target:
                self.used_modules.add(mod)
                return self._imported(again, hops + 1)
        return QName(canonical(target))

    # ------------------------------------------------------------ events

    def note_target(self, node, key, devs) -> None:
        """An operand at `node` (`key` as in its mismatch event) must be on `devs` on this visit."""
        if not self._probes:
            self.operand_targets.setdefault((id(node), key), set()).add(devs)

    def emit(self, kind: str, node: cst.CSTNode, st: State | None = None, **data) -> None:
        key = (kind, id(node), data.get("key"))
        if key in self._seen_events:
            return
        self._seen_events.add(key)
        self.events.append(Event(kind, node, data, st.mode if st else ""))

    # ------------------------------------------------------------ entry points

    def run_all(self) -> None:
        scope = Scope("<module>")
        # Module-level assignments are the globals functions and methods see (LEAD = torch.device(...)).
        st = State(self.globals, CURRENT, None, "", None, False, scope)
        self._run_entry(self.module.body, st)
        for info in self.functions.values():
            self._run_function_entry(info, None)
        for cinfo in self.classes.values():
            inst = self.default_instance(cinfo)
            for m in cinfo.methods.values():
                if m.name == "__init__":
                    continue
                self._run_function_entry(m, inst)

    def _run_entry(self, body, st: State) -> None:
        try:
            self.exec_block(body, [st])
        except RecursionError:
            pass
        self._finish_scope(st.scope)

    def _finish_scope(self, scope: Scope) -> None:
        if scope.split_seen:
            for node, setdev, dev, st_mode in scope.indexless:
                self.emit("indexless_after_setdev", node, None, setdev=setdev, dev=dev)

    def _run_function_entry(self, info: FuncInfo, inst: Val | None) -> None:
        scope = Scope(info.qual)
        if isinstance(inst, Obj) and inst.split:
            scope.split_seen = True
            scope.split_class = True
        env = dict(self.globals)
        params = self._params(info.node)
        for i, (name, default) in enumerate(params):
            if i == 0 and inst is not None:
                env[name] = inst
                continue
            env[name] = self._default_param(name, default, info)
        st = State(env, CURRENT, None, "", inst, False, scope)
        self._stack.append(info)
        try:
            self.exec_block(info.node.body.body if isinstance(info.node.body, cst.IndentedBlock) else [], [st])
        except RecursionError:
            pass
        finally:
            self._stack.pop()
        self._finish_scope(scope)

    def _default_param(self, name: str, default, info: FuncInfo) -> Val:
        if default is not None:
            v = self.ev(default, State(dict(self.globals), CURRENT, None, "", None, False, Scope("<default>")))
            if isinstance(v, (Const, DeviceV)) and (as_device(v, ints_are_cuda=False) is not None or isinstance(v, DeviceV)):
                # A default device argument: the caller may pass another one.
                return SymV(name)
            if isinstance(v, Const) and v.value is None:
                return UNK
            return v if isinstance(v, Const) else SymV(name)
        return SymV(name)

    @staticmethod
    def _params(fn: cst.FunctionDef) -> list:
        p = fn.params
        out = []
        for prm in list(p.posonly_params) + list(p.params):
            out.append((prm.name.value, prm.default))
        for prm in p.kwonly_params:
            out.append((prm.name.value, prm.default))
        return out

    # ------------------------------------------------------------ instances

    def default_instance(self, cinfo: ClassInfo) -> Obj:
        return self.instantiate(cinfo, [], {}, None, None)

    def instantiate(self, cinfo: ClassInfo, args: list, kwargs: dict, st: State | None, node) -> Obj:
        cur = st.cur if st else CURRENT
        key = (tuple(_sig(a) for a in args), tuple(sorted((k, _sig(v)) for k, v in kwargs.items())), cur)
        if key in cinfo.instances:
            obj = cinfo.instances[key]
            self._check_built_after_setdev(cinfo, obj, args, kwargs, st, node)
            return obj
        obj = Obj("module", None, label=cinfo.name, cls=cinfo, attrs={})
        cinfo.instances[key] = obj
        self._inherit_summarized(cinfo, obj)
        init = cinfo.method("__init__")
        scope = Scope(f"{cinfo.name}.__init__")
        if init is not None and len(self._stack) < _MAX_DEPTH:
            env = dict(self.globals)
            self._bind(init, env, obj, args, kwargs)
            ist = State(env, cur, st.setdev if st else None, "", obj, True, scope)
            self._stack.append(init)
            try:
                self.exec_block(init.node.body.body if isinstance(init.node.body, cst.IndentedBlock) else [], [ist])
            except RecursionError:
                pass
            finally:
                self._stack.pop()
        self._finish_instance(obj)
        self._init_indexless[id(obj)] = list(scope.indexless_any)
        self._check_built_after_setdev(cinfo, obj, args, kwargs, st, node)
        return obj

    def _inherit_summarized(self, cinfo: ClassInfo, obj: Obj) -> None:
        """A base class from another checked file places its parts before our __init__ runs."""
        for b in cinfo.bases:
            base = self.globals.get(b) if b and "." not in b else None
            if isinstance(base, Summarized) and base.kind == "class":
                for attr, dev in base.summary.get("split") or []:
                    obj.attrs.setdefault(attr, Obj("module", one(dev), origin=f"placed by {base.name}.__init__"))
                devs = base.summary.get("devs")
                if devs and len(devs) == 1 and not base.summary.get("split"):
                    obj.attrs.setdefault(f"<{base.name}>", Obj("module", one(devs[0]), origin=f"placed by {base.name}"))

    def _check_built_after_setdev(self, cinfo, obj: Obj, args, kwargs, st, node) -> None:
        where = self._init_indexless.get(id(obj))
        if st is None or st.setdev is None or not where or node is None:
            return
        # Built after set_device: would it be split with the default current device?
        plain = self.instantiate(cinfo, args, kwargs, None, None)
        if plain.split and obj.split != plain.split:
            self.emit("split_built_after_setdev", node, st, setdev=st.setdev, plain=plain, obj=obj, where=where)

    def _finish_instance(self, obj: Obj) -> None:
        placed: list[tuple[str, str, Any]] = []
        for attr, v in obj.attrs.items():
            for d, at in _placements(v):
                placed.append((attr, d, at))
        devs = [d for _, d, _ in placed]
        split = bool(placed) and is_split_devs(devs)
        # A class that places parts on a given GPU by hand is not moved as a whole later:
        # what it leaves unplaced stays on the CPU. Any other class may be moved whole
        # (model.cuda()), so its CPU tensors and unplaced modules are of unknown device.
        hand_placed = split or any(d.startswith("cuda:") and d != "cuda:0" for d in devs)
        for attr, v in list(obj.attrs.items()):
            if not isinstance(v, Obj):
                continue
            if hand_placed and v.kind == "module" and v.devs is None and v.origin == UNPLACED:
                obj.attrs[attr] = v.with_(devs=one("cpu"), origin="never placed, so on the CPU")
            elif not hand_placed and v.devs == one("cpu") and v.kind in ("module", "param", "buffer", "tensor", "any"):
                obj.attrs[attr] = v.with_(devs=None)
        if split:
            obj.split = tuple(dict.fromkeys((attr, d) for attr, d, _ in placed))
            obj.devs = None
        elif placed and len(set(devs)) == 1 and all(_placements(v) for v in obj.attrs.values() if _is_moduleish(v)):
            obj.devs = one(devs[0])

    def _bind(self, info: FuncInfo, env: dict, self_val, args: list, kwargs: dict) -> None:
        params = self._params(info.node)
        pos = list(args)
        for i, (name, default) in enumerate(params):
            if i == 0 and self_val is not None:
                env[name] = self_val
                continue
            if pos:
                env[name] = pos.pop(0)
            elif name in kwargs:
                env[name] = kwargs[name]
            else:
                env[name] = self._default_param_value(name, default)
        star = info.node.params.star_arg
        if isinstance(star, cst.Param):
            env[star.name.value] = UNK
        if info.node.params.star_kwarg is not None:
            env[info.node.params.star_kwarg.name.value] = UNK

    def _default_param_value(self, name: str, default) -> Val:
        if default is None:
            return SymV(name)
        return self.ev(default, State(dict(self.globals), CURRENT, None, "", None, False, Scope("<default>")))

    def call_function(self, info: FuncInfo, self_val, args: list, kwargs: dict, st: State, node) -> Val:
        if info in self._stack or len(self._stack) >= _MAX_DEPTH:
            return UNK
        key = (id(info), id(self_val), tuple(_sig(a) for a in args), tuple(sorted((k, _sig(v)) for k, v in kwargs.items())), st.cur, st.mode, len(self._probes))
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = UNK
        env = dict(self.globals)
        self._bind(info, env, self_val, args, kwargs)
        cst_ = State(env, st.cur, st.setdev, st.mode, self_val if self_val is not None else None, st.in_init and info.name != "forward", st.scope)
        cst_.returns = []
        self._stack.append(info)
        try:
            self.exec_block(info.node.body.body if isinstance(info.node.body, cst.IndentedBlock) else [], [cst_])
        except RecursionError:
            pass
        finally:
            self._stack.pop()
        result: Val | None = None
        for r in cst_.returns:
            result = r if result is None else join(result, r)
        if result is None:
            result = Const(None)
        self._memo[key] = result
        return result

    def module_call(self, mod: Obj, args: list, kwargs: dict, st: State, node, exprs=None) -> Val:
        """Calling a module: its inputs must be where it is; the output is where it ends."""
        if mod.cls is not None and mod.attrs is not None:
            st.scope.split_seen = st.scope.split_seen or bool(mod.split)
            fwd = mod.cls.method("forward")
            if fwd is None:
                return UNK
            if args and isinstance(args[0], Obj) and args[0].kind != "scalar":
                need = self.input_devs(mod, fwd)
                self.note_target(node, 0, need)
                if need is not None and conflict(args[0].devs, need):
                    self.emit("mismatch", node, st, key=0, value=args[0], target=need,
                              what=f"the first stage of {mod.cls.name}", op="module", arg_index=0,
                              expr=_nth(exprs, 0))
                    # Report once, at the call: the forward then runs on a correctly placed input.
                    args = [args[0].with_(devs=need)] + list(args[1:])
            return self.call_function(fwd, mod, args, kwargs, st, node)
        if mod.cls is None and mod.extra and mod.extra.get("summarized"):
            # A class of another file, known by its summary: input and output devices.
            if mod.in_devs is not None and args and isinstance(args[0], Obj):
                self.check_operand(node, args[0], mod.in_devs, st, what=f"the first stage of {mod.extra['summarized']}",
                                   arg_index=0, expr=_nth(exprs, 0))
            if mod.out_devs is not None:
                return Obj("tensor", mod.out_devs, origin="output of", at=node, opaque=True)
            if single(mod.devs) is None:
                return UNK
        if mod.kind == "passthrough":
            first = args[0] if args else UNK
            return first.with_(label="", worked=True) if isinstance(first, Obj) and first.kind != "module" else UNK
        if mod.kind == "loss":
            self.loss_call(mod, args, kwargs, st, node, exprs)
            return Obj("tensor", None, origin="loss")
        if mod.kind in ("module", "any") and single(mod.devs) is not None:
            what = mod.label or "the module"
            if args and failed(args[0]):
                return FAILED
            used(*args, *kwargs.values())
            for i, a in enumerate(list(args) + list(kwargs.values())):
                if failed(a):
                    continue
                if i == 0:
                    if self.check_operand(node, a, mod.devs, st, what=what, arg_index=0, expr=_nth(exprs, 0), module=mod):
                        return FAILED
                    continue
                self.note_target(node, i, mod.devs)  # also on the visits that skip the check below
                if isinstance(a, Obj) and _cuda_only(a.devs, mod.devs):
                    # Other arguments may legitimately live on the CPU (lengths, indices):
                    # only a tensor on another GPU is certainly wrong. The activation
                    # itself is fine, so the flow goes on with the module's output.
                    self.check_operand(node, a, mod.devs, st, what=what, arg_index=i, expr=_nth(exprs, i))
            first = args[0] if args else None
            return Obj("tensor", mod.devs, origin="output of", at=node, opaque=mod.opaque or mod.kind == "any",
                       chain=first.chain if isinstance(first, Obj) else None)
        return UNK

    def loss_call(self, mod: Obj, args, kwargs, st, node, exprs=None) -> None:
        pairs = list(zip(list(args) + list(kwargs.values()), list(exprs or []) + [None] * 99))
        pairs += [(w, None) for w in (mod.extra or {}).values()]
        first = None
        for a, e in pairs:
            if not isinstance(a, Obj) or a.kind in ("scalar", "module") or a.devs is None:
                continue
            if first is None:
                first = (a, e)
                continue
            if conflict(a.devs, first[0].devs):
                self.emit("loss_mismatch", node, st, key="loss", value=a, target=first[0].devs, expr=e,
                          other=first[0], other_expr=first[1], op=mod.label or "the loss")
                return

    def input_devs(self, mod: Obj, fwd: FuncInfo):
        """Where a class's forward needs its first argument: the device of the
        first module or op that uses it before any transfer (None: anywhere)."""
        if mod.in_devs is not None or (mod.extra or {}).get("in_known"):
            return mod.in_devs
        probe = {"devs": None}
        self._probes.append(probe)
        saved = self._seen_events, self.events, self.chains
        self._seen_events, self.events, self.chains = set(), [], []  # the probe run reports nothing
        try:
            pst = State(dict(self.globals), CURRENT, None, "", mod, False, Scope("<probe>"))
            self.call_function(fwd, mod, [Obj("tensor", _PROBE)], {}, pst, None)
        finally:
            self._probes.pop()
            self._seen_events, self.events, self.chains = saved
        mod.in_devs = probe["devs"]
        mod.extra = dict(mod.extra or {}, in_known=True)
        return mod.in_devs

    def _probe_hit(self, val: Val, devs) -> None:
        if self._probes and isinstance(val, Obj) and val.devs == _PROBE and single(devs) is not None:
            if self._probes[-1]["devs"] is None:
                self._probes[-1]["devs"] = devs

    def check_operand(self, node, val: Val, devs, st: State, what: str, arg_index: int = 0, expr=None, op: str = "module",
                      module=None) -> bool:
        """Reports `val` when it is certainly not on `devs`; True when it did."""
        self.note_target(node, arg_index, devs)
        if not isinstance(val, Obj) or val.kind in ("scalar", "module"):
            return False
        self._probe_hit(val, devs)
        c = conflict(val.devs, devs)
        if c:
            self.emit("mismatch", node, st, key=arg_index, value=val, target=devs, what=what, op=op, expr=expr,
                      arg_index=arg_index, module=module)
            return True
        return False

    # ------------------------------------------------------------ statements

    def exec_block(self, stmts: Iterable[cst.CSTNode], states: list[State]) -> list[State]:
        for stmt in stmts:
            if not states:
                break
            states = self.exec_stmt(stmt, states)
        return states

    def exec_stmt(self, stmt, states: list[State]) -> list[State]:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                nxt = []
                for st in states:
                    if self.exec_small(small, st):
                        nxt.append(st)
                states = nxt
            return states
        t = type(stmt)
        if t is cst.If:
            return self.exec_if(stmt, states)
        if t is cst.For:
            return [self.exec_for(stmt, st) for st in states]
        if t is cst.While:
            out = []
            for st in states:
                body = self.exec_block(stmt.body.body, [st.copy()])
                self._second_pass += 1
                try:
                    body = self.exec_block(stmt.body.body, body) if body else body
                finally:
                    self._second_pass -= 1
                out.append(_join_states([st] + body) if body else st)
            return out
        if t is cst.With:
            return [s for st in states for s in self.exec_with(stmt, st)]
        if t is cst.Try:
            out = []
            for st in states:
                body = self.exec_block(stmt.body.body, [st.copy()])
                branches = list(body)
                for h in stmt.handlers:
                    branches.extend(self.exec_block(h.body.body, [st.copy()]))
                if stmt.orelse is not None and body:
                    branches = self.exec_block(stmt.orelse.body.body, branches)
                if not branches:
                    continue
                j = _join_states(branches)
                if stmt.finalbody is not None:
                    j = self.exec_block(stmt.finalbody.body.body, [j])
                    out.extend(j)
                else:
                    out.append(j)
            return out
        if t is cst.FunctionDef:
            for st in states:
                st.env[stmt.name.value] = FuncRef(FuncInfo(stmt, stmt.name.value, stmt.name.value))
            return states
        if t is cst.ClassDef:
            return states
        return states

    def exec_small(self, s, st: State) -> bool:
        """Returns False when the path ends (return/raise)."""
        t = type(s)
        if t is cst.Assign:
            v = self.ev(s.value, st)
            for tgt in s.targets:
                self.assign(tgt.target, v, st, s.value)
            return True
        if t is cst.Expr:
            self.ev(s.value, st)
            return True
        if t is cst.AnnAssign:
            if s.value is not None:
                self.assign(s.target, self.ev(s.value, st), st, s.value)
            return True
        if t is cst.AugAssign:
            left = self.ev(s.target, st)
            right = self.ev(s.value, st)
            self.binop(s, left, right, st)
            return True
        if t is cst.Return:
            st.returns.append(self.ev(s.value, st) if s.value is not None else Const(None))
            return False
        if t is cst.Raise:
            return False
        if t in (cst.Import, cst.ImportFrom):
            for local, target in import_bindings(s, self.modname):
                st.env[local] = self._imported(target)
            return True
        return True

    def exec_if(self, stmt: cst.If, states: list[State]) -> list[State]:
        out: list[State] = []
        mode = _mode_test(stmt.test)
        for st in states:
            t = self.ev(stmt.test, st)
            if isinstance(t, Const) and isinstance(t.value, bool) and not mode:
                # A test the model can decide (i == 4 in an unrolled loop): one path only.
                if t.value:
                    out.extend(self.exec_block(stmt.body.body, [st]))
                elif stmt.orelse is None:
                    out.append(st)
                elif isinstance(stmt.orelse, cst.If):
                    out.extend(self.exec_if(stmt.orelse, [st]))
                else:
                    out.extend(self.exec_block(stmt.orelse.body.body, [st]))
                continue
            then = self.exec_block(stmt.body.body, [self._with_mode(st.copy(), mode, True)])
            if stmt.orelse is None:
                other = [self._with_mode(st.copy(), mode, False)]
            elif isinstance(stmt.orelse, cst.If):
                other = self.exec_if(stmt.orelse, [self._with_mode(st.copy(), mode, False)])
            else:
                other = self.exec_block(stmt.orelse.body.body, [self._with_mode(st.copy(), mode, False)])
            branches = then + other
            if not branches:
                continue
            if mode:
                out.extend(branches)  # eval and training paths are kept apart
            else:
                out.append(_join_states(branches))
        if len(out) > _MAX_WORLDS:
            out = [_join_states(out)]
        return out

    @staticmethod
    def _with_mode(st: State, mode, taken: bool) -> State:
        if mode:
            st.mode = mode[0] if taken else mode[1]
        return st

    def exec_for(self, stmt: cst.For, st: State) -> State:
        outer = {id(v) for v in st.env.values() if isinstance(v, Obj)}
        if isinstance(st.self_obj, Obj) and st.self_obj.attrs:
            outer |= {id(v) for v in st.self_obj.attrs.values()}
        self._loop_outer.append((outer, _assigned_names(stmt)))
        try:
            return self._exec_for(stmt, st)
        finally:
            self._loop_outer.pop()

    def _exec_for(self, stmt: cst.For, st: State) -> State:
        it = self.ev(stmt.iter, st)
        items = _iter_items(it)
        if items is not None and len(items) <= _MAX_UNROLL:
            cur = [st]
            for item in items:
                nxt = []
                for s in cur:
                    self.assign(stmt.target, item, s, None)
                    nxt.extend(self.exec_block(stmt.body.body, [s]))
                cur = nxt if nxt else cur
                if len(cur) > _MAX_WORLDS:
                    cur = [_join_states(cur)]
            end = _join_states(cur) if len(cur) > 1 else cur[0]
            if stmt.orelse is not None:
                end = _join_states(self.exec_block(stmt.orelse.body.body, [end]) or [end])
            return end
        elem = _iter_elem(it, stmt.target)
        before = st.copy()
        body = st.copy()
        self.assign(stmt.target, elem, body, None)
        self._in_unknown_loop += 1
        try:
            first = self.exec_block(stmt.body.body, [body])
            if first:
                again = _join_states(first)
                self.assign(stmt.target, elem, again, None)
                # The second pass only lets values that change per iteration settle; it
                # records no transfer lineage (MP006 counts each crossing once).
                self._second_pass += 1
                try:
                    second = self.exec_block(stmt.body.body, [again])
                finally:
                    self._second_pass -= 1
                return _join_states([before] + first + second)
        finally:
            self._in_unknown_loop -= 1
        return before

    def exec_with(self, stmt: cst.With, st: State) -> list[State]:
        inner = st.copy()
        for item in stmt.items:
            call = item.item
            q = self.qname(call.func) if isinstance(call, cst.Call) else None
            if q in torchapi.NO_GRAD:
                inner.mode = "no_grad"
            elif q in torchapi.DEVICE_CONTEXT and isinstance(call, cst.Call) and call.args:
                dv = self.ev(call.args[0].value, st)
                devs = as_device(dv)
                inner.cur = single(devs) if devs else None
                inner.setdev = call
                self._with_devices.add(id(call))
                v = dv
            else:
                v = self.ev(call, inner)
                if item.asname is not None:
                    self.assign(item.asname.name, UNK if not isinstance(v, Obj) else v, inner, None)
        after = self.exec_block(stmt.body.body, [inner])
        out = []
        for a in after:
            # Leaving `with torch.cuda.device(...)` / `no_grad` restores the outer state.
            a.cur, a.setdev, a.mode = st.cur, st.setdev, st.mode
            out.append(a)
        return out

    # ------------------------------------------------------------ assignment

    def assign(self, target, v: Val, st: State, value_node) -> None:
        t = type(target)
        if t is cst.Name:
            if isinstance(v, Obj) and not v.label and v.kind not in ("module", "any", "loss", "passthrough"):
                v = v.with_(label=target.value)  # a module keeps its identity (in-place .to())
            st.env[target.value] = v
        elif t is cst.Attribute:
            base = self.ev(target.value, st)
            name = target.attr.value
            if isinstance(v, Obj) and not v.label and v.kind not in ("module", "any", "loss", "passthrough"):
                v = v.with_(label=(dotted(target) or name))
            if isinstance(base, Obj) and base.attrs is not None:
                if st.in_init and base is st.self_obj:
                    base.attrs[name] = v
                else:
                    st.env[f"{id(base)}.{name}"] = v
        elif t in (cst.Tuple, cst.List):
            elts = [e.value for e in target.elements]
            items = v.items if isinstance(v, SeqV) and v.items is not None and len(v.items) == len(elts) else None
            for i, e in enumerate(elts):
                if isinstance(e, cst.StarredElement):
                    self.assign(e.value, UNK, st, None)
                    continue
                if items is not None:
                    sub = items[i]
                elif isinstance(v, Obj) and v.kind in ("tensor", "any"):
                    sub = v.with_(label="", opaque=True)
                elif isinstance(v, SeqV):
                    sub = v.elem
                else:
                    sub = UNK
                self.assign(e, sub, st, None)
        elif t is cst.Subscript:
            base = self.ev(target.value, st)
            if isinstance(base, DictV) and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index):
                k = self.ev(target.slice[0].slice.value, st)
                if isinstance(k, Const):
                    base.items[k.value] = v

    # ------------------------------------------------------------ expressions

    def qname(self, node) -> str | None:
        """The canonical dotted name an expression refers to (imports resolved)."""
        d = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        if d is None:
            return None
        head, _, rest = d.partition(".")
        v = self.globals.get(head)
        if isinstance(v, QName):
            return canonical(v.q + ("." + rest if rest else ""))
        if v is None and head in torchapi.BUILTINS:
            return head
        return None

    def ev(self, node, st: State) -> Val:
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
            return QName(canonical(f"{base.q}.{name}"))
        if isinstance(base, Obj):
            if base.attrs is not None:
                key = f"{id(base)}.{name}"
                if key in st.env:
                    return st.env[key]
                if name in base.attrs:
                    return base.attrs[name]
                if base.cls is not None:
                    m = base.cls.method(name)
                    if m is not None:
                        return FuncRef(m, base)
                if name == "device" and base.devs is not None:
                    return DeviceV(base.devs)
                if name == "module":
                    return base
                return UNK
            if name == "device":
                return DeviceV(base.devs) if base.devs is not None else SymV(f"{dotted(node) or 'value.device'}")
            if name in ("weight", "bias") and base.kind in ("module", "any"):
                return Obj("param", base.devs, label=dotted(node) or name, origin=base.origin, at=base.at, invariant=True)
            if name in ("T", "mT", "data", "real", "imag"):
                return base.with_(label=dotted(node) or base.label)
            if name == "module":
                return base
            return UNK
        if isinstance(base, SymV):
            return SymV(f"{base.name}.{name}")
        return UNK

    def ev_subscript(self, node: cst.Subscript, st: State) -> Val:
        base = self.ev(node.value, st)
        if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
            for el in node.slice:
                if isinstance(el.slice, cst.Index):
                    self.ev(el.slice.value, st)
            if isinstance(base, Obj) and base.kind in ("tensor", "param", "buffer", "any"):
                used(base)
                return base.with_(label="", kind="tensor", worked=True)
            return UNK
        idx = self.ev(node.slice[0].slice.value, st)
        if isinstance(base, SeqV):
            if isinstance(idx, Const) and isinstance(idx.value, int) and base.items is not None:
                if -len(base.items) <= idx.value < len(base.items):
                    return base.items[idx.value]
                return UNK
            if isinstance(idx, Const) and isinstance(idx.value, int) and base.items is None:
                text = dotted(node.value)
                if text and _deviceish(base.elem):
                    return DeviceV(one(f"sym:{text}[{idx.value}]"))
                return base.elem
            return base.elem if base.items is None else _join_all(base.items)
        if isinstance(base, DictV):
            if isinstance(idx, Const) and idx.value in base.items:
                return base.items[idx.value]
            vals = list(base.items.values())
            return _join_all(vals) if vals else UNK
        if isinstance(base, QName) and isinstance(idx, Const) and isinstance(idx.value, int) and not base.q.startswith("torch."):
            # An entry of an imported list whose values this file cannot see (DEVICES[1]):
            # symbolic, so DEVICES[0] and DEVICES[1] still count as two devices.
            return SymV(f"@{base.q}[{idx.value}]")
        if isinstance(base, SymV) and isinstance(idx, Const) and isinstance(idx.value, (int, str)):
            return SymV(f"{base.name}[{idx.value!r}]" if isinstance(idx.value, str) else f"{base.name}[{idx.value}]")
        if isinstance(base, Obj) and base.kind in ("tensor", "param", "buffer", "any"):
            used(base)
            if isinstance(idx, Obj) and _cuda_only(idx.devs, base.devs):
                # CPU index tensors may index a CUDA tensor; one on another GPU may not.
                self.check_operand(node, idx, base.devs, st, what=base.label or "the tensor", op="index")
            return base.with_(label="", kind="tensor", invariant=base.invariant, worked=True)
        return UNK

    def ev_const(self, node, st: State) -> Val:
        t = type(node)
        if t is cst.Integer:
            try:
                return Const(int(node.value, 0))
            except ValueError:
                return UNK
        if t is cst.Float:
            return Const(0.5)
        if t is cst.SimpleString:
            try:
                return Const(node.evaluated_value)
            except Exception:
                return UNK
        return UNK

    def ev_fstring(self, node: cst.FormattedString, st: State) -> Val:
        text = ""
        sym = None
        for p in node.parts:
            if isinstance(p, cst.FormattedStringText):
                text += p.value
            else:
                v = self.ev(p.expression, st)
                if isinstance(v, Const) and isinstance(v.value, (int, str)) and p.format_spec is None:
                    text += str(v.value)
                elif isinstance(v, SymV):
                    sym = v.name
                    text += "{" + v.name + "}"
                else:
                    src = dotted(p.expression)
                    if src is None:
                        return UNK
                    sym = src
                    text += "{" + src + "}"
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

    def ev_seq(self, node, st: State) -> Val:
        items = []
        for e in node.elements:
            if isinstance(e, cst.StarredElement):
                v = self.ev(e.value, st)
                if isinstance(v, SeqV) and v.items is not None:
                    items.extend(v.items)
                    continue
                return SeqV(None, elem=_join_all(items + [v.elem if isinstance(v, SeqV) else UNK]) if items else UNK, kind="list")
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
            else:
                self.ev(e.value, st)
                return UNK
        return DictV(items)

    def ev_comp(self, node, st: State) -> Val:
        # [elt for target in iter if ...]: unrolled for short known iterables.
        inner = st.copy()
        inner.returns = []
        fors = []
        f = node.for_in
        while f is not None:
            fors.append(f)
            f = f.inner_for_in
        if len(fors) == 1:
            it = self.ev(fors[0].iter, inner)
            items = _iter_items(it)
            if items is not None and len(items) <= _MAX_UNROLL and not fors[0].ifs:
                out = []
                for item in items:
                    self.assign(fors[0].target, item, inner, None)
                    out.append(self._comp_elt(node, inner))
                return self._comp_result(node, tuple(out), None)
        for f in fors:
            it = self.ev(f.iter, inner)
            self.assign(f.target, _iter_elem(it, f.target), inner, None)
        self._in_unknown_loop += 1
        try:
            elem = self._comp_elt(node, inner)
        finally:
            self._in_unknown_loop -= 1
        return self._comp_result(node, None, elem)

    def _comp_elt(self, node, st):
        if isinstance(node, cst.DictComp):
            self.ev(node.key, st)
            return self.ev(node.value, st)
        return self.ev(node.elt, st)

    @staticmethod
    def _comp_result(node, items, elem) -> Val:
        if isinstance(node, cst.DictComp):
            return DictV({}) if items is None else UNK
        if isinstance(node, cst.GeneratorExp):
            return SeqV(items, elem=elem if elem is not None else UNK, kind="gen")
        return SeqV(items, elem=elem if elem is not None else UNK, kind="list")

    def ev_ifexp(self, node: cst.IfExp, st: State) -> Val:
        t = self.ev(node.test, st)
        if isinstance(t, Const) and isinstance(t.value, bool):
            return self.ev(node.body if t.value else node.orelse, st)
        return join(self.ev(node.body, st), self.ev(node.orelse, st))

    def ev_binop(self, node: cst.BinaryOperation, st: State) -> Val:
        a = self.ev(node.left, st)
        b = self.ev(node.right, st)
        return self.binop(node, a, b, st)

    def binop(self, node, a: Val, b: Val, st: State) -> Val:
        if failed(a) or failed(b):
            return FAILED
        used(a, b)
        if isinstance(a, SeqV) or isinstance(b, SeqV):
            return SeqV(None, elem=a.elem if isinstance(a, SeqV) else b.elem) if isinstance(a, (SeqV, Const)) and isinstance(b, (SeqV, Const)) else UNK
        if isinstance(a, Obj) and isinstance(b, Obj) and a.kind != "module" and b.kind != "module":
            if a.kind == "scalar":
                return b.with_(label="", invariant=False, worked=True) if b.kind != "scalar" else a
            if b.kind == "scalar":
                return a.with_(label="", invariant=False, worked=True)
            self._probe_hit(a, b.devs)
            self._probe_hit(b, a.devs)
            self.note_target(node, "binop", a.devs)
            c = conflict(a.devs, b.devs)
            if c:
                self.emit("mismatch", node, st, key="binop", value=b, target=a.devs, what=a.label or "the left operand",
                          op="op", other=a, arg_index=1, expr=getattr(node, "right", None),
                          what_expr=getattr(node, "left", None))
                return FAILED
            return Obj("tensor", join_devs(a.devs, b.devs), origin=a.origin or b.origin, at=a.at or b.at,
                       invariant=a.invariant and b.invariant, chain=a.chain or b.chain)
        if isinstance(a, Obj) and a.kind != "module":
            return a.with_(label="", kind="tensor" if a.kind != "scalar" else "scalar", worked=True)
        if isinstance(b, Obj) and b.kind != "module":
            return b.with_(label="", kind="tensor" if b.kind != "scalar" else "scalar", worked=True)
        if isinstance(a, Const) and isinstance(b, Const):
            op = getattr(node, "operator", None)
            try:
                f = _CONST_OPS.get(type(op))
                if f is not None and isinstance(a.value, (int, str)) and isinstance(b.value, (int, str)):
                    return Const(f(a.value, b.value))
            except Exception:
                return UNK
        return UNK

    def ev_unary(self, node, st):
        v = self.ev(node.expression, st)
        if isinstance(v, Obj) and v.kind != "module":
            return v.with_(label="", worked=True)
        return UNK

    def ev_compare(self, node, st):
        left = self.ev(node.left, st)
        if len(node.comparisons) == 1 and isinstance(left, Const):
            c = node.comparisons[0]
            right = self.ev(c.comparator, st)
            f = _CMP_OPS.get(type(c.operator))
            if f is not None and isinstance(right, Const) and type(left.value) in (int, str, bool) and type(right.value) is type(left.value):
                return Const(bool(f(left.value, right.value)))
            if isinstance(c.operator, (cst.Is, cst.IsNot)) and isinstance(right, Const) and right.value is None and left.value is None:
                return Const(isinstance(c.operator, cst.Is))
            return UNK
        for c in node.comparisons:
            right = self.ev(c.comparator, st)
            if isinstance(c.operator, (cst.Equal, cst.NotEqual, cst.LessThan, cst.GreaterThan, cst.LessThanEqual,
                                       cst.GreaterThanEqual)):
                if isinstance(left, Obj) and isinstance(right, Obj):
                    out = self.binop(node, left, right, st)
                    if isinstance(out, Obj):
                        return out.with_(invariant=False)
            left = right
        return UNK

    def ev_boolop(self, node, st):
        a = self.ev(node.left, st)
        b = self.ev(node.right, st)
        if isinstance(a, Obj) or isinstance(b, Obj):
            return join(a, b) if isinstance(a, Obj) and isinstance(b, Obj) else UNK
        return UNK

    def ev_lambda(self, node, st):
        return UNK

    def ev_await(self, node, st):
        return self.ev(node.expression, st)

    # ------------------------------------------------------------ calls

    def ev_call(self, node: cst.Call, st: State) -> Val:
        func = node.func
        if isinstance(func, cst.Attribute):
            recv = self.ev(func.value, st)
            meth = func.attr.value
            if isinstance(recv, QName):
                return self.library_call(canonical(f"{recv.q}.{meth}"), node, st)
            overlay = f"{id(recv)}.{meth}"
            if isinstance(recv, Obj) and recv.attrs is not None and (meth in recv.attrs or overlay in st.env):
                callee = st.env.get(overlay) or recv.attrs[meth]  # self.stage(x): a submodule, not a method
            else:
                args, kwargs = self.ev_args(node, st)
                return self.method_call(recv, meth, args, kwargs, node, st)
        else:
            callee = self.ev(func, st)
        if isinstance(callee, QName):
            return self.library_call(callee.q, node, st)
        args, kwargs = self.ev_args(node, st)
        exprs = self._arg_nodes
        if isinstance(callee, ClassRef):
            obj = self.instantiate(callee.info, args, kwargs, st, node)
            self._note_class_use(obj, st, node)
            return obj
        if isinstance(callee, FuncRef):
            return self.call_function(callee.info, callee.bound, args, kwargs, st, node)
        if isinstance(callee, Summarized):
            from mpcheck.devices.summary import call_summarized

            return call_summarized(self, callee, args, kwargs, st, node)
        if isinstance(callee, Obj) and callee.kind in ("module", "any", "passthrough", "loss"):
            return self.module_call(callee, args, kwargs, st, node, exprs)
        if isinstance(callee, SeqV) and callee.module:
            return self.sequential_call(callee, args, kwargs, st, node, exprs)
        return UNK

    def _note_class_use(self, obj: Obj, st: State, node) -> None:
        if obj.split:
            st.scope.split_seen = True

    def ev_args(self, node: cst.Call, st: State) -> tuple[list, dict]:
        """The values of a call's arguments; `self._arg_nodes` then holds their
        expressions in the same order (positional, then keyword), for messages."""
        args: list = []
        kwargs: dict = {}
        pos_nodes: list = []
        kw_nodes: list = []
        for a in node.args:
            v = self.ev(a.value, st)
            if a.keyword is not None:
                kwargs[a.keyword.value] = v
                kw_nodes.append(a.value)
            elif a.star == "*":
                if isinstance(v, SeqV) and v.items is not None:
                    args.extend(v.items)
                    pos_nodes.extend([None] * len(v.items))
                else:
                    args.append(Starred(v.elem if isinstance(v, SeqV) else UNK))
                    pos_nodes.append(None)
            elif a.star == "**":
                pass
            else:
                args.append(v)
                pos_nodes.append(a.value)
        self._arg_nodes = pos_nodes + kw_nodes
        return args, kwargs

    def sequential_call(self, seq: SeqV, args, kwargs, st, node, exprs=None) -> Val:
        h = args[0] if args else UNK
        first = list(exprs or [])[:1]  # the argument's expression, for the first item only
        if seq.items is None:
            # Items of unknown number: a call is only understood when they share one device.
            if isinstance(seq.elem, Obj) and seq.elem.kind in ("module", "any") and single(seq.elem.devs) and seq.elem.cls is None:
                return self.module_call(seq.elem, [h], {}, st, node, first)
            return UNK
        for item in seq.items:
            if isinstance(item, Obj):
                h = self.module_call(item, [h], {}, st, node, first)
            elif isinstance(item, SeqV) and item.module:
                h = self.sequential_call(item, [h], {}, st, node, first)
            else:
                h = UNK
            first = []
        return h

    from mpcheck.devices.calls import (  # noqa: E402  (methods of Interp, kept in their own module)
        _chain_step,
        _indexless,
        _move_target,
        _repeated,
        _note_indexless_arg,
        _rebind,
        dispatched,
        factory,
        library_call,
        method_call,
        move,
        tensor_op,
    )


_PROBE = one("sym:__input__")
_CPU = one("cpu")
# What an op that was reported returns: a tensor of unknown device, so one bug gives one finding.
FAILED_MARK: dict = {"failed": True}
FAILED = Obj("tensor", None, origin="", extra=FAILED_MARK)


def failed(v: Val) -> bool:
    return isinstance(v, Obj) and v.extra is FAILED_MARK


def used(*vals) -> None:
    """Marks tensors as worked on since their last transfer (MP005 counts only idle round trips)."""
    for v in vals:
        if isinstance(v, Obj) and not v.worked:
            v.worked = True
_CMP_OPS = {
    cst.Equal: lambda a, b: a == b,
    cst.NotEqual: lambda a, b: a != b,
    cst.LessThan: lambda a, b: a < b,
    cst.GreaterThan: lambda a, b: a > b,
    cst.LessThanEqual: lambda a, b: a <= b,
    cst.GreaterThanEqual: lambda a, b: a >= b,
}
_CONST_OPS = {
    cst.Add: lambda a, b: a + b,
    cst.Subtract: lambda a, b: a - b,
    cst.Multiply: lambda a, b: a * b if not (isinstance(a, str) or isinstance(b, str)) else None,
    cst.Modulo: lambda a, b: a % b if isinstance(a, int) and isinstance(b, int) and b else None,
    cst.FloorDivide: lambda a, b: a // b if isinstance(a, int) and isinstance(b, int) and b else None,
}


def _nth(exprs, i):
    return exprs[i] if exprs is not None and i < len(exprs) else None


def _cuda_only(a, b) -> bool:
    x, y = single(a), single(b)
    return bool(x and y and x.startswith("cuda") and y.startswith("cuda"))


def _sig(v: Val):
    if isinstance(v, Const):
        return ("c", repr(v.value))
    if isinstance(v, DeviceV):
        return ("d", v.devs)
    if isinstance(v, Obj):
        return ("o", v.kind, v.devs, id(v.cls) if v.cls else None, id(v.attrs) if v.attrs is not None else None)
    if isinstance(v, SymV):
        return ("s", v.name)
    if isinstance(v, SeqV):
        return ("l", tuple(_sig(i) for i in v.items) if v.items is not None and len(v.items) < 8 else None)
    return (type(v).__name__, id(v) if isinstance(v, (ClassRef, FuncRef, Summarized)) else None)


def _is_moduleish(v: Val) -> bool:
    return (isinstance(v, Obj) and v.kind in ("module", "any", "param", "buffer")) or (isinstance(v, SeqV) and v.module) or (
        isinstance(v, DictV) and v.module
    )


def _placements(v: Val, depth: int = 0) -> list[tuple[str, int]]:
    """The devices a submodule/parameter/container attribute puts weights on."""
    if depth > 3:
        return []
    if isinstance(v, Obj):
        if v.kind not in ("module", "any", "param", "buffer"):
            return []
        if v.split:
            return [(d, 0) for _, d in v.split]
        if v.devs is not None and len(v.devs) == 1:
            if v.devs == _CPU and not v.origin.startswith(("moved to", "built with")):
                return []  # left on the CPU by default: not a stage placement
            return [(d, v.at) for d in v.devs]
        return []  # unknown, or different devices on different paths: not a fact
    if isinstance(v, SeqV) and v.module:
        if v.items is not None:
            return [p for i in v.items for p in _placements(i, depth + 1)]
        return _placements(v.elem, depth + 1)
    if isinstance(v, DictV) and v.module:
        return [p for i in v.items.values() for p in _placements(i, depth + 1)]
    return []


def _deviceish(v: Val) -> bool:
    return isinstance(v, DeviceV) or (isinstance(v, Const) and isinstance(v.value, str) and device_from_str(v.value) is not None)


def _join_all(vals) -> Val:
    out = None
    for v in vals:
        out = v if out is None else join(out, v)
    return out if out is not None else UNK


def _iter_items(it: Val):
    if isinstance(it, SeqV) and it.items is not None:
        return list(it.items)
    if isinstance(it, DictV):
        return [Const(k) for k in it.items]
    return None


def _iter_elem(it: Val, target) -> Val:
    if isinstance(it, Obj) and it.kind in ("tensor", "any"):
        return it.with_(label="")  # rows of a tensor, items of a module's list output: same device
    if isinstance(it, SeqV):
        if it.items is None:
            if isinstance(it.elem, SymV) and it.elem.name.startswith("each:"):
                return it.elem
            return it.elem if it.elem is not UNK else _each(target)
        return _join_all(it.items)
    return _each(target)


def _each(target) -> Val:
    if isinstance(target, cst.Name):
        return SymV(f"each:{target.value}")
    return UNK


_ASSIGNED_CACHE: dict = {}


def _assigned_names(loop: cst.For) -> frozenset:
    """Names (re)bound anywhere in a loop's body or target."""
    got = _ASSIGNED_CACHE.get(id(loop))
    if got is not None and got[0] is loop:
        return got[1]
    names: set[str] = set()

    def targets(t):
        if isinstance(t, cst.Name):
            names.add(t.value)
        elif isinstance(t, (cst.Tuple, cst.List)):
            for e in t.elements:
                targets(e.value)
        elif isinstance(t, cst.StarredElement):
            targets(t.value)

    def walk(stmts):
        for st in stmts:
            if isinstance(st, cst.SimpleStatementLine):
                for sm in st.body:
                    if isinstance(sm, cst.Assign):
                        for t in sm.targets:
                            targets(t.target)
                    elif isinstance(sm, (cst.AugAssign, cst.AnnAssign)):
                        targets(sm.target)
            elif isinstance(st, (cst.For,)):
                targets(st.target)
                walk(st.body.body)
            elif isinstance(st, (cst.If,)):
                walk(st.body.body)
                o = st.orelse
                while o is not None:
                    walk(o.body.body)
                    o = o.orelse if isinstance(o, cst.If) else None
            elif isinstance(st, (cst.While, cst.With, cst.Try)):
                walk(st.body.body)
                if isinstance(st, cst.With):
                    for it in st.items:
                        if it.asname is not None:
                            targets(it.asname.name)

    targets(loop.target)
    walk(loop.body.body)
    out = frozenset(names)
    _ASSIGNED_CACHE[id(loop)] = (loop, out)
    return out


def _mode_test(test) -> tuple[str, str] | None:
    """('train','eval') for `self.training`, reversed for `not self.training`."""
    neg = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        neg = not neg
        test = test.expression
    if isinstance(test, cst.Attribute) and test.attr.value == "training":
        return ("eval", "train") if neg else ("train", "eval")
    if isinstance(test, cst.Call) and dotted(test.func) in ("torch.is_grad_enabled",):
        return ("no_grad", "train") if neg else ("train", "no_grad")
    return None


_EV = {
    cst.Name: Interp.ev_name,
    cst.Attribute: Interp.ev_attr,
    cst.Call: Interp.ev_call,
    cst.Subscript: Interp.ev_subscript,
    cst.Integer: Interp.ev_const,
    cst.Float: Interp.ev_const,
    cst.SimpleString: Interp.ev_const,
    cst.FormattedString: Interp.ev_fstring,
    cst.ConcatenatedString: Interp.ev_concat,
    cst.List: Interp.ev_seq,
    cst.Tuple: Interp.ev_seq,
    cst.Set: Interp.ev_seq,
    cst.Dict: Interp.ev_dict,
    cst.ListComp: Interp.ev_comp,
    cst.SetComp: Interp.ev_comp,
    cst.GeneratorExp: Interp.ev_comp,
    cst.DictComp: Interp.ev_comp,
    cst.IfExp: Interp.ev_ifexp,
    cst.BinaryOperation: Interp.ev_binop,
    cst.UnaryOperation: Interp.ev_unary,
    cst.Comparison: Interp.ev_compare,
    cst.BooleanOperation: Interp.ev_boolop,
    cst.Lambda: Interp.ev_lambda,
    cst.Await: Interp.ev_await,
}
