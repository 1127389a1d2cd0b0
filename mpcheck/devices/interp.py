"""The device-flow interpreter: an abstract interpretation of one file.

It walks statements and expressions directly (no generic visitor, no libcst
metadata), carrying an environment of abstract values (values.py). Entry
points are the module body (a training script), every top-level function and
every method; calls of functions, methods and classes of the same file are
interpreted with their argument values (memoised), and those of other project
files through their summaries (summarized.py).

`Interp` holds what one interpretation shares (the file's names, the call
stack, the facts recorded) and its parts, one per concern, which reach each
other through it (as mypy's checker and expression checker do):

    stmts      statements.Statements   blocks, branches, loops, assignment
    exprs      expressions.Expressions the value of an expression; operand checks
    calls      calls.Calls             calls of functions, modules and methods
    instances  instances.Instances     classes built, and where their parts are
    library    library.Library         library names: the torch API table
    moves      moves.Moves             .to() / .cuda() / .cpu()

What the rules need is recorded as facts (events.py) by `recorder`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import libcst as cst

from mpcheck.devices.callers import run_callers
from mpcheck.devices.calls import Calls
from mpcheck.devices.events import EntryPointRun, IndexlessPlacement, Recorder
from mpcheck.devices.expressions import Expressions
from mpcheck.devices.gpucount import GpuCount, visible_devices
from mpcheck.devices.instances import Instances
from mpcheck.devices.library import Library
from mpcheck.devices.moves import Moves
from mpcheck.devices.names import dotted, import_bindings
from mpcheck.devices.program import (
    ClassInfo,
    FuncInfo,
    Part,
    Scope,
    State,
    params_of,
)
from mpcheck.devices.statements import Statements
from mpcheck.devices.summarized import resolve_import
from mpcheck.devices.torchapi import SET_DEVICE
from mpcheck.devices.values import (
    UNK,
    ClassRef,
    Const,
    DeviceV,
    FuncRef,
    Obj,
    SymV,
    Val,
    as_device,
    single,
)
from mpcheck.devices.walk import children


class Interp:
    def __init__(
        self,
        module: cst.Module,
        modname: str = "",
        project: dict[str, dict[str, Any]] | None = None,
        gpu_count: int | None = None,
        callers: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.module = module
        # Calls of this file's functions in other linted files, with their arguments (callers.py),
        # and the calls of other files' functions made here (node, encoded call), for the pipeline.
        self.callers = callers
        self.outgoing: list[tuple[cst.CSTNode, dict[str, Any]]] = []
        self.outgoing_seen: set[tuple[int, str]] = set()
        self.uses: dict[int, Any] = {}  # id of a scope -> its as_built.Uses (callers.py asks)
        self.modname = modname
        self.project = project or {}
        self.used_modules: set[str] = set()
        self.inlined: dict[
            str, FuncInfo
        ] = {}  # another file's function run here, by its text (summarized.call_inlined)
        self.inlined_runs: dict[tuple[Any, ...], tuple[Val | None, bool]] = {}  # its runs' results, by arguments
        self.globals: dict[str, Val] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.functions: dict[str, FuncInfo] = {}
        self.recorder = Recorder()
        self.gpus = GpuCount(
            self.recorder, gpu_count, visible_devices(module)
        )  # what torch.cuda.device_count() answers (gpucount.py)
        # torch.set_default_device() & co. change where factories put tensors: then say nothing about them.
        self.default_device_changed = False
        # Names of unknown values the code uses as a CUDA index (`torch.device("cuda", GPU)`, `.cuda(GPU)`): a
        # tensor on `sym:GPU` is on some GPU (MP020 needs no more).
        self.cuda_symbols: set[str] = set()
        self.default_device: str | None = None  # where factories put tensors then, when known (default_device.py)
        # Shared by the parts while one interpretation runs:
        self.memo: dict[Any, Val] = {}  # call_function's results, by callee and argument values
        # The FuncInfo of each nested `def` run, kept alive: `memo` keys them by id(), which must not be reused.
        self.nested_defs: list[FuncInfo] = []
        # The lineages of those arguments, and whether the body took steps of them (calls._relinked).
        self.memo_lineages: dict[Any, tuple[tuple[int | None, ...], bool]] = {}
        self.memo_changed: dict[Any, tuple[tuple[int, Obj], ...]] = {}  # instances a memoised call changed
        # the current device a memoised call left behind (its set_device), or None (calls.py, _current_after)
        self.memo_current: dict[Any, tuple[str | None, Any] | None] = {}
        self.memo_idle: dict[Any, frozenset[int]] = {}  # a memoised call's arguments its body left idle
        # The module objects (Obj.ident, from .. to) a memoised call's body built: each later call builds its own.
        self.memo_built: dict[Any, tuple[int, int]] = {}
        self.stack: list[FuncInfo] = []  # the functions being interpreted, innermost last
        # The memo keys of the calls being run, by function (Calls.call_function): a call that repeats one of them,
        # the same function with the same argument values, would only run the same body again, deeper.
        self.calls_running: dict[int, list[Any]] = {}
        self.in_unknown_loop = 0  # inside a loop (or comprehension) of unknown length
        self.second_pass = 0  # in a loop's second pass (values settle; no lineage recorded)
        # host tensors made from constants in a forward call (by id of the factory call): their bytes
        self.host_constants: dict[int, int] = {}
        # what `torch.save(obj, path)` wrote, by the path (library._saved_at): `torch.load(path)` without
        # map_location gives its tensors back on the devices they were saved from
        self.saved: dict[Any, Val] = {}
        # instance (by id) -> the index-less placements of its __init__ after a set_device
        self.init_placements: dict[int, tuple[IndexlessPlacement, ...]] = {}
        # id(instance) -> its CPU parts that its class may yet move whole, as built (instances.py): a method
        # of the class that places parts by hand (placing.py) starts from them, CPU included.
        self.cpu_as_built: dict[int, dict[str, Val]] = {}
        # a torch module placed again, in place, in an __init__: id -> (module, first placement node,
        # its device, second placement node)
        self.placed_again: dict[int, tuple[Any, Any, Any, Any]] = {}
        self.with_devices: set[int] = set()  # `with torch.cuda.device(...)` calls (lexically scoped)
        self.arg_nodes: list[Any] = []  # the argument expressions of the call last evaluated (Calls.ev_args)
        # Per enclosing loop: ids of values alive before it, names it rebinds, and the depth of the
        # function running it (len(stack)): a loop repeats a move only in its own function's body.
        self.loop_outer: list[tuple[set[int], frozenset[str], int]] = []
        # How many of them are comprehensions: a loop for MP011's repeated moves, but no sign by itself that the
        # code runs on every step (a script's one `[p.item() for p in preds]`), as a `for` statement is (in_loop).
        self.comprehension_loops = 0
        # The members of the file's enumerations read so far (Expressions._enum_member), one object each.
        self.enum_members: dict[tuple[int, str], Obj] = {}
        # The loops of loop_outer (by their position in it) that run joined, not unrolled (a loader's batches).
        self.joined_loops: set[int] = set()
        # The joined loops over a tensor's row indices being run (`for i in range(len(t))`): (i, the expression
        # of t), for MP021's `t[i].to(dev)` (Expressions.ev_subscript gives that row Obj.row_of).
        self.row_loops: list[tuple[str, cst.BaseExpression]] = []
        self.device_lists_seen: set[object] = set()  # loops and comprehensions device_loops.py checked
        # Modules dealt over several devices that a loop being unrolled walks (ids): a deliberate
        # split, so a mismatch at one of them is fixed by a hop to it (Calls.module_call).
        self.spread_modules: set[int] = set()
        self.probes: list[dict[str, Any]] = []  # input probes of forward summaries (Calls.input_devs)
        self.branch_outputs: set[int] = set()  # lists returned by parallel_apply over one-device branches
        self._lineages = 0
        self._hops: dict[int, int] = {}
        # Module objects (Obj.ident): the type each was built as (what an instance's own __init__ built:
        # Obj.built_idents).
        self.ident_names: dict[int, str] = {}
        self.defaults: dict[int, Val] = {}  # default arguments that are module objects, by id of their node
        self.rebound: dict[int, frozenset[str]] = {}  # class (by id) -> attributes assigned outside __init__
        self.unmoved: dict[tuple[int, str, int], bool] = {}  # (scope, name, class) -> provably never moved
        self.stmts = Statements(self)
        self.exprs = Expressions(self)
        self.calls = Calls(self)
        self.instances = Instances(self)
        self.library = Library(self)
        self.moves = Moves(self)
        self._scan_module()

    def __enter__(self) -> Interp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop everything this interpreter holds, once its results are taken (`with Interp(...) as
        interp:` does it on leaving). Its parts (stmts, exprs, calls, ...: every `Part` it holds) point
        back at it: a cycle that only the garbage collector could free, and the collector would first
        scan the whole tree the cycle keeps alive (linting torch, a tenth of the CPU). Emptied, the cycle
        holds nothing, and the tree goes as soon as the file's findings do."""
        for value in self.__dict__.values():
            if isinstance(value, Part):
                value.__dict__.clear()
        self.__dict__.clear()

    # ------------------------------------------------------------ setup

    def _scan_module(self) -> None:
        g = self.globals
        for stmt in self.module.body:
            self._scan_stmt(stmt, g)

    def _scan_stmt(self, stmt: cst.CSTNode, g: dict[str, Val]) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    for local, target in import_bindings(small, self.modname):
                        g[local] = self.imported(target)
        elif isinstance(stmt, cst.ClassDef):
            info = ClassInfo(stmt, stmt.name.value, {}, [dotted(b.value) or "" for b in stmt.bases])
            for s in stmt.body.body:
                if isinstance(s, cst.FunctionDef):
                    info.methods[s.name.value] = FuncInfo(s, s.name.value, f"{info.name}.{s.name.value}", info)
                elif isinstance(s, cst.SimpleStatementLine):
                    for small in s.body:
                        if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                            info.fields.append(small.target.value)
                        named = _class_body_target(small)
                        if named is not None:
                            info.class_attrs[named[0]] = named[1]
            info.generated_init = bool(stmt.decorators) or any(b.endswith("NamedTuple") for b in info.bases)
            for b in info.bases:
                if b in self.classes:
                    info.local_bases.append(self.classes[b])
            self.classes[info.name] = info
            g[info.name] = ClassRef(info)
        elif isinstance(stmt, cst.FunctionDef):
            fn = FuncInfo(stmt, stmt.name.value, stmt.name.value)
            self.functions[fn.name] = fn
            g[fn.name] = FuncRef(fn)
        elif isinstance(stmt, (cst.If, cst.Try)):
            for s in stmt.body.body:
                self._scan_stmt(s, g)

    def imported(self, target: str) -> Val:
        """The value of an imported name (a summary of another checked file, else a library name)."""
        return resolve_import(self.project, target, self.used_modules.add, self.gpus)

    def new_ident(self, name: str) -> int:
        """A new module object (Obj.ident), built as `name` (a class name, for messages)."""
        ident = len(self.ident_names) + 1
        self.ident_names[ident] = name
        return ident

    def in_loop(self) -> bool:
        """Inside a `for` statement's body (a comprehension alone does not count)."""
        return len(self.loop_outer) > self.comprehension_loops

    def bound_before_loop(self, value: Val, name: str) -> bool:
        """`name` holds `value`, alive before a loop of the current function that is running now and not
        rebound in it: what the loop does with it is done on every pass to the same value. A loop in a
        caller does not count (which value a caller passes on each pass is the caller's business)."""
        depth = len(self.stack)
        return any(d == depth and id(value) in outer and name not in assigned for outer, assigned, d in self.loop_outer)

    def new_lineage(self) -> int:
        self._lineages += 1
        return self._lineages

    def next_hop(self, lineage: int) -> int:
        """The number of the next crossing of `lineage` (Crossing.hop, Obj.hop)."""
        self._hops[lineage] = self._hops.get(lineage, 0) + 1
        return self._hops[lineage]

    # ------------------------------------------------------------ entry points

    def run_all(self) -> None:
        # Module-level assignments are the globals functions and methods see (LEAD = torch.device(...)).
        st = State.fresh(self.globals, "<module>")
        try:
            self.stmts.exec_block(self.module.body, [st])
        except RecursionError:
            pass
        self._finish_scope(self.module, st.scope)
        at_import = self._import_time_device()
        for info in self.functions.values():
            self._run_function_entry(info, None, at_import)
        for cinfo in self.classes.values():
            if cinfo.replaced_outside:
                continue  # its instances run with parts placed from outside: checked where they are called
            # A class the file builds itself is checked where it is built (SplitBuiltAfterSetDevice).
            built_here = at_import is not None and _calls_any(self.module, {cinfo.name})
            inst = self.instances.default_instance(cinfo, None if built_here else at_import)
            for m in cinfo.methods.values():
                if m.name == "__init__":
                    continue
                self._run_function_entry(m, inst)
        if self.callers:
            run_callers(self, self.callers)

    def _finish_scope(self, node: cst.CSTNode, scope: Scope) -> None:
        self.recorder.record(
            EntryPointRun(node=node, name=scope.name, builds_split=scope.split_seen, placements=tuple(scope.placements))
        )

    def _import_time_device(self) -> State | None:
        """A state whose current device is the one a top-level `torch.cuda.set_device(k)` selects
        when the file is imported: every function and class of the file runs after it. Only for
        one such call, with a known index, and before any top-level use of the file's own
        functions or classes (one called earlier ran on the default device); else None."""
        calls = [
            (i, small.value)
            for i, stmt in enumerate(self.module.body)
            if isinstance(stmt, cst.SimpleStatementLine)
            for small in stmt.body
            if isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and self.exprs.qname(small.value.func) in SET_DEVICE
        ]
        if len(calls) != 1 or not calls[0][1].args:
            return None
        at, call = calls[0]
        st = State.fresh(dict(self.globals), "<module>")
        dev = single(as_device(self.exprs.ev(call.args[0].value, st)))
        local = set(self.classes) | set(self.functions)
        if dev is None or not dev.startswith("cuda:") or any(_calls_any(s, local) for s in self.module.body[:at]):
            return None
        st.cur, st.setdev = dev, call
        return st

    def _run_function_entry(self, info: FuncInfo, inst: Val | None, at_import: State | None = None) -> None:
        env = dict(self.globals)
        for i, (name, default) in enumerate(params_of(info.node)):
            if i == 0 and inst is not None:
                env[name] = inst
                continue
            env[name] = self._default_param(name, default)
        st = State.fresh(env, info.qual, inst)
        if at_import is not None:
            st.cur, st.setdev = at_import.cur, at_import.setdev
        if isinstance(inst, Obj) and inst.split:
            st.scope.split_seen = True
            st.scope.split_class = True
        self.stmts.run_body(info, st)
        self._finish_scope(info.node, st.scope)

    def _default_param(self, name: str, default: cst.BaseExpression | None) -> Val:
        if default is not None:
            v = self.exprs.ev(default, State.fresh(dict(self.globals), "<default>"))
            if isinstance(v, (Const, DeviceV)) and (
                as_device(v, ints_are_cuda=False) is not None or isinstance(v, DeviceV)
            ):
                # A default device argument: the caller may pass another one.
                return SymV(name)
            if isinstance(v, Const) and v.value is None:
                return UNK
            return v if isinstance(v, Const) else SymV(name)
        return SymV(name)


def _class_body_target(small: cst.BaseSmallStatement) -> tuple[str, cst.BaseExpression] | None:
    """(name, value) of `name = value` / `name: T = value` in a class body, else None."""
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value, small.value
    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.value is not None:
        return small.target.value, _field_default(small.value)
    return None


def _field_default(value: cst.BaseExpression) -> cst.BaseExpression:
    """A dataclass field's default as an expression: `field(default=X)` gives X, and
    `field(default_factory=lambda: X)` gives X (a new X for each instance, which changes no device);
    anything else, as written."""
    if not (isinstance(value, cst.Call) and (dotted(value.func) or "").rsplit(".", 1)[-1] == "field"):
        return value
    for arg in value.args:
        if arg.keyword is not None and arg.keyword.value == "default":
            return arg.value
        if arg.keyword is not None and arg.keyword.value == "default_factory" and isinstance(arg.value, cst.Lambda):
            if not arg.value.params.params:
                return arg.value.body
    return value


def _calls_any(node: cst.CSTNode, names: set[str]) -> bool:
    """Does `node` call one of `names` (`Net()`, `build(...)`)?"""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in names:
        return True
    return any(_calls_any(c, names) for c in children(node))
