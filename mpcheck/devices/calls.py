"""Calls by value: functions and classes of this file (interpreted with their
arguments, memoised), modules (their input must be where they are), methods
of values, and classes of other files (through their summaries). Calls of
library names go to `library.Library`, moves to `moves.Moves`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any, cast

import libcst as cst

from mpcheck.devices import backward_code, command_line, ini_text, map_lookups, memo, module_tree, optimizers, pre_hooks
from mpcheck.devices import torchapi as T
from mpcheck.devices.callers import built_with_devices, note_call
from mpcheck.devices.command_line import ParserV, SubparsersV, add_command
from mpcheck.devices.events import Collapse, LayerInPlainListOnHost, LossMismatch, Mismatch, OversizedMove
from mpcheck.devices.moves import moved_instance, one_object, plain_device_move
from mpcheck.devices.names import canonical, dotted
from mpcheck.devices.placing import placed_view, places_parts
from mpcheck.devices.program import MAX_DEPTH, MAX_RECURSION, ClassInfo, FuncInfo, Part, State, body_of, params_of
from mpcheck.devices.summarized import call_inlined, call_summarized, refused, summarized_output
from mpcheck.devices.unmoved import IN_A_PLAIN_LIST, built_here, never_placed_view
from mpcheck.devices.values import (
    ANY_KEYWORD,
    DATA_PARALLEL_OUTPUT,
    FAILED,
    HOOKS_KEY,
    LOADED,
    LOSS_OF,
    OFF_CHAIN,
    OWN_MOVE_KEY,
    PROBE,
    UNK,
    ClassRef,
    Const,
    Devs,
    DictV,
    DtypeV,
    FuncRef,
    LambdaV,
    NamePrefix,
    Obj,
    ParamsOf,
    PartialV,
    QName,
    SequentialHook,
    SeqV,
    Starred,
    Summarized,
    SuperV,
    SymV,
    TupleType,
    Val,
    as_device,
    both_cuda,
    conflict,
    failed,
    is_module,
    is_splitish,
    join,
    join_all,
    made_on_cpu_by_default,
    one,
    probe_devs,
    single,
    used,
    value_key,
)
from mpcheck.devices.walk import assigned, walk
from mpcheck.devices.ways import path_off

# The argument expressions of a call, in the order of its values (None where one has none).
ArgExprs = Sequence[cst.BaseExpression | None] | None


# What a tensor tells about itself without its data: reading it uses none of its elements.
_METADATA = frozenset({"shape", "device", "dtype", "ndim", "size", "dim", "numel", "is_cuda", "requires_grad"})


def _feeds_only(body: cst.CSTNode, name: str, inside: set[int], depth: int) -> bool:
    """Does every mention of `name` in `body` go into the reduction (`inside`, its nodes' ids)? So when each one is
    inside it, reads only metadata (`w.shape[0]`, `device=w.device`), or is in the value of a statement that binds a
    local read only so in turn (`gram = w @ w.T`, `gram` then reduced), `depth` bindings deep at most."""
    targets = {id(t) for m in walk(body) for t in assigned(m) if isinstance(t, cst.Name)}
    metadata = _metadata_reads(body, name)
    for n in walk(body):
        if not (isinstance(n, cst.Name) and n.value == name) or id(n) in inside or id(n) in targets:
            continue
        if id(n) in metadata:
            continue
        bound = _bound_by(body, n)
        if bound is None or depth == 0 or bound == name or not _feeds_only(body, bound, inside, depth - 1):
            return False
    return True


def _metadata_reads(body: cst.CSTNode, name: str) -> set[int]:
    """The mentions of `name` that read only metadata: `name.shape`, `name.size(0)`, `name.device`."""
    return {
        id(n.value)
        for n in walk(body)
        if isinstance(n, cst.Attribute)
        and isinstance(n.value, cst.Name)
        and n.value.value == name
        and n.attr.value in _METADATA
    }


def _bound_by(body: cst.CSTNode, mention: cst.Name) -> str | None:
    """The local name whose one-target assignment's value holds `mention` (`gram` of `gram = w @ w.T`), if it is
    the only binding of that name in `body`."""
    for n in walk(body):
        if (
            isinstance(n, cst.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0].target, cst.Name)
            and any(m is mention for m in walk(n.value))
        ):
            target = n.targets[0].target.value
            binds = sum(1 for m in walk(body) for t in assigned(m) if isinstance(t, cst.Name) and t.value == target)
            return target if binds == 1 else None
    return None


def _position_or_count(seq: SeqV, meth: str, x: Val) -> Val:
    """`seq.index(x)` / `seq.count(x)` of a sequence of known constants and a known constant (UNK otherwise; a value
    `index` does not find raises there, and is not guessed)."""
    if seq.items is None or not isinstance(x, Const) or not all(isinstance(i, Const) for i in seq.items):
        return UNK
    values = [cast(Const, i).value for i in seq.items]
    if meth == "count":
        return Const(values.count(x.value))
    return Const(values.index(x.value)) if x.value in values else UNK


class Calls(Part):
    def __init__(self, interp: Any) -> None:
        super().__init__(interp)
        self._unwrapped: set[int] = set()  # functions whose decorators' wrapper is running: called as written

    def bind(
        self, info: FuncInfo, env: dict[str, Val], self_val: Val | None, args: list[Val], kwargs: dict[str, Val]
    ) -> None:
        params = params_of(info.node)
        pos = list(args)
        if self_val is not None and _is_static(info.node):
            self_val = None  # `@staticmethod def reorder(states, idx)` called as `model.reorder(states, idx)`
        for i, (name, default) in enumerate(params):
            if i == 0 and self_val is not None:
                env[name] = self_val
                continue
            if pos:
                env[name] = pos.pop(0)
            elif name in kwargs:
                env[name] = kwargs[name]
            elif ANY_KEYWORD in kwargs:
                # From a `**dict` of unknown keys: certainly, when the parameter has no default
                # (the call would fail without it); else it or the default.
                given = kwargs[ANY_KEYWORD]
                env[name] = (
                    given if default is None else join(given, self.default_param_value(name, default, info.closure))
                )
            elif info.defaults is not None and name in info.defaults:
                env[name] = info.defaults[name]
            else:
                env[name] = self.default_param_value(name, default, info.closure)
        star = info.node.params.star_arg
        if isinstance(star, cst.Param):
            env[star.name.value] = UNK
        if info.node.params.star_kwarg is not None:
            env[info.node.params.star_kwarg.name.value] = UNK

    def default_param_value(
        self, name: str, default: cst.BaseExpression | None, closure: dict[str, Val] | None = None
    ) -> Val:
        """A parameter's default, evaluated where the `def` is: the globals, and the enclosing function's
        names for a nested `def` (`def run(x, blk=blk)` in a loop). `device="cuda"` stays the current device,
        resolved where the tensor is made: a call that gives no device gets cuda:0, or the GPU set_device chose."""
        if default is None:
            return SymV(name)
        shared = self.interp.defaults.get(id(default))
        if shared is not None:
            return shared
        scope = dict(self.interp.globals)
        if closure is not None:
            scope.update(closure)
        v = self.interp.exprs.ev(default, State.fresh(scope, "<default>"))
        if isinstance(v, Obj) and v.kind in ("module", "any") and isinstance(default, cst.Call):
            # `act=nn.PReLU()`: Python builds a default once, so every call gets the same module.
            name = v.cls.name if v.cls is not None else (dotted(default.func) or "module").rsplit(".", 1)[-1]
            v = v.with_(ident=self.interp.new_ident(name))
            self.interp.defaults[id(default)] = v
        return v

    def _decorated(self, info: FuncInfo, st: State) -> FuncInfo | None:
        """The function a call of `info` runs when decorators of the file wrap it: each decorator that is a
        function of the file (`@timed`), or a call of one that returns one (`@stage("cuda:0", "head")`), is
        called with what the ones below it gave, and must give back a function of the file (its inner
        `wrapper`, which sees the decorator's names). None when no decorator is such a function (torch.no_grad,
        functools.lru_cache, property: their meaning is kept as before) or one gives back something else."""
        current: Val = FuncRef(info)
        changed = False
        for d in reversed(info.node.decorators):
            deco = self.interp.exprs.ev(d.decorator, _at_top(st, self.interp.globals))
            if not (isinstance(deco, FuncRef) and deco.bound is None and isinstance(deco.info, FuncInfo)):
                continue
            if deco.info.is_generator or not body_of(deco.info.node):
                return None
            got = self.call_function(deco.info, None, [current], {}, st, d.decorator)
            if not (isinstance(got, FuncRef) and isinstance(got.info, FuncInfo)):
                return None  # a decorator that gives back what is not followed here: as before, run the body
            current, changed = got, True
        return cast(FuncRef, current).info if changed and cast(FuncRef, current).info is not info else None

    def call_function(
        self,
        info: FuncInfo,
        self_val: Val | None,
        args: list[Val],
        kwargs: dict[str, Val],
        st: State,
        node: cst.CSTNode | None,
        helper: bool = False,
    ) -> Val:
        """Runs `info` with these arguments (memoised by their values). `helper`: a call of a
        function or a method by name, whose facts then name the call `node` (Fact.via)."""
        if info.node.decorators and id(info) not in self._unwrapped:
            wrapper = self._decorated(info, st)
            if wrapper is not None:
                # `@stage("cuda:0")` over a method: the call runs the wrapper its decorator returned (which may
                # move the input first, `x = x.to(device)`), with self as its first argument; the wrapper's call
                # of the function it wraps runs the function itself.
                self._unwrapped.add(id(info))
                try:
                    head = [self_val] if self_val is not None else []
                    return self.call_function(wrapper, None, [*head, *args], kwargs, st, node, helper)
                finally:
                    self._unwrapped.discard(id(info))
        on_stack = self.interp.stack.count(info)
        if on_stack >= MAX_RECURSION or len(self.interp.stack) >= MAX_DEPTH:
            return UNK  # (a recursive helper, `move_to(batch)` into nested containers, runs a few levels deep)
        key = (
            id(info),
            _self_key(self_val),
            tuple(value_key(a) for a in args),
            tuple(sorted((k, value_key(v)) for k, v in kwargs.items())),
            st.cur,
            st.mode,
            # A probe run records where its marked arguments are used: a result memoised by another
            # probe (of another module, with the same marks) would skip that, so each probe has its own.
            self.interp.probes[-1].setdefault("serial", next(_PROBE_SERIALS)) if self.interp.probes else None,
        )
        running = self.interp.calls_running.setdefault(id(info), [])
        if on_stack and _recursion_key(key) in map(_recursion_key, running):
            # Recursion with the same values (`get(source.base)` inside `get(source)`, both sources unknown,
            # only their names differ) learns nothing a level deeper: it only multiplied the work per level.
            return UNK
        passed = [a for a in (*args, *kwargs.values()) if isinstance(a, Obj)]
        if key in self.interp.memo and not st.in_init and not self._replays(key, args):
            # (In an __init__ a helper runs again: each call builds modules of its own, Obj.ident.)
            # The body is not run again, so what it did to its arguments is: it computed on each one that
            # its first run did not leave idle (MP005 counts only idle round trips).
            idle = self.interp.memo_idle.get(key, ())
            used(*(a for i, a in enumerate(passed) if i not in idle))
            for i, changed in self.interp.memo_changed.get(key, ()):
                _rebind_changed(self_val if i == _SELF else args[i], changed, st)
            _leave_current(st, self.interp.memo_current.get(key))
            memoised = _relinked(self.interp.memo[key], self.interp.memo_lineages.get(key, ((), True)), args)
            built = self.interp.memo_built.get(key)
            # Each call of a function that builds modules (`G_AB = generator().to(d0)`, `G_BA = generator().to(d1)`)
            # builds objects of its own: moving one call's result leaves the other's where it is.
            return _built_anew(self.interp, memoised, built, {}) if built is not None else memoised
        # A run in an __init__ builds that module's own parts, which its __init__ goes on to place or split:
        # a later call elsewhere must not be handed them as its result, so that run is not remembered.
        remember = not st.in_init
        if remember:
            self.interp.memo[key] = UNK
        fresh = [not a.worked for a in passed]
        lineages = tuple(a.lineage if isinstance(a, Obj) else None for a in args)
        steps_before = len(self.interp.recorder.crossings)
        idents_before = len(self.interp.ident_names)
        env = self._callee_env(info, self_val, args, kwargs)
        held = _instances_given(info, env, args)
        cst_ = State(
            env,
            st.cur,
            st.setdev,
            st.mode,
            self_val if self_val is not None else None,
            st.in_init and info.name != "forward",
            st.scope,
        )
        cst_.returns = []
        if info.is_generator:
            cst_.yields = SeqV((), kind="gen")
        sites = self.interp.recorder.sites
        sites.append(node if helper else None)
        running.append(key)
        try:
            ends = self.interp.stmts.run_body(info, cst_)
        finally:
            sites.pop()
            running.pop()
        changes = _changed_instances(held, ends)
        if _keeps_what_it_sets(info, self_val, st):
            now = _self_after(self_val, ends)  # `self.shadow = {...}` in `ema.load_state_dict(state)`
            if now is not None:
                changes = (*changes, (_SELF, now))
        for i, changed in changes:
            _rebind_changed(self_val if i == _SELF else args[i], changed, st)
        current = _current_after(cst_, st)
        _leave_current(st, current)
        result = cst_.given_back()
        if result is None:
            result = Const(None)
        if not remember:
            return result
        self.interp.memo_changed[key] = changes
        self.interp.memo_current[key] = current
        if len(self.interp.ident_names) > idents_before:
            self.interp.memo_built[key] = (idents_before + 1, len(self.interp.ident_names) + 1)
        self.interp.memo[key] = result
        # The arguments the body certainly left idle: idle before and after it (one already worked on may
        # or may not have been used: counted as used when the result is reused).
        self.interp.memo_idle[key] = frozenset(i for i, a in enumerate(passed) if fresh[i] and not a.worked)
        # Whether the body took steps of its arguments' lineages (crossings, merges): a later call that
        # reuses the result does not replay them for its own arguments (_relinked).
        stepped = any(c.lineage in lineages for c in self.interp.recorder.crossings[steps_before:])
        self.interp.memo_lineages[key] = (lineages, stepped)
        return result

    def _callee_env(
        self, info: FuncInfo, self_val: Val | None, args: list[Val], kwargs: dict[str, Val]
    ) -> dict[str, Val]:
        """The names a call of `info` starts with: the file's, its closure's, its parameters bound to these."""
        env = dict(self.interp.globals)
        if info.closure is not None:
            env.update(info.closure)
        self.bind(info, env, self_val, args, kwargs)
        return env

    def _apply_to_parts(self, model: Val, fn: FuncRef, node: cst.CSTNode, st: State) -> None:
        """`model.apply(init_weights)`: the file's function run on every submodule, as Module.apply does (each
        part's children first, then the part), where every submodule is known. A part the function changed in
        place (`module.weight = nn.Parameter(...)`: its parameter bound anew to the part as changed, on every
        path) is changed where the caller's names hold it."""
        found = module_tree.named_modules(model)
        params = [name for name, _ in params_of(fn.info.node)]
        if found is None or not params or fn.bound is not None:
            return
        for _, part in reversed(found):
            inner = State(
                self._callee_env(fn.info, None, [part], {}), st.cur, st.setdev, st.mode, None, False, st.scope
            )
            inner.returns = []
            sites = self.interp.recorder.sites
            sites.append(node)
            try:
                ends = self.interp.stmts.run_body(fn.info, inner)
            finally:
                sites.pop()
            finals = {id(e.get(params[0])): e.get(params[0]) for e in ends}
            if len(finals) == 1:
                (now,) = finals.values()
                if isinstance(now, Obj) and now is not part and now.kind == "module":
                    _rebind_changed(part, now, st)  # the model itself (`model.apply(place)` ends with the root)
                    self.interp.moves.rebind_holders(part, now, st)

    def _replays(self, key: Any, args: list[Val]) -> bool:
        """Run the body again, memoised or not: its first run took steps of its arguments' lineages
        (crossings, a merge: MP006's evidence) and an argument now carries another activation's."""
        first = self.interp.memo_lineages.get(key)
        if first is None or not first[1] or self.interp.second_pass:
            return False
        return any(isinstance(a, Obj) and a.lineage not in (None, OFF_CHAIN, *first[0]) for a in args)

    def module_call(
        self, mod: Obj, args: list[Val], kwargs: dict[str, Val], st: State, node: cst.CSTNode, exprs: ArgExprs = None
    ) -> Val:
        """Calling a module: its inputs must be where it is; the output is where it ends."""
        if mod.extra and DATA_PARALLEL_OUTPUT in mod.extra:
            # nn.DataParallel: it scatters its inputs itself and gathers the outputs on its output device.
            used(*args, *kwargs.values())
            out_dev = mod.extra[DATA_PARALLEL_OUTPUT]
            return Obj("tensor", one(out_dev), origin="output of DataParallel", at=node) if out_dev else UNK
        hooks = (mod.extra or {}).get(HOOKS_KEY, ())
        if pre_hooks.PRE_HOOK in hooks:
            # A pre-hook runs first and may move or replace the inputs: what one of the file's own hands on
            # is what forward gets (devices/pre_hooks.py); after any other, where they arrive is not known.
            handed = pre_hooks.run(self, mod, args, kwargs, st, node) if self._pre_hooks_known(mod, hooks) else None
            if handed is not None:
                args, kwargs = handed
            else:
                args = [_somewhere(a) for a in args]
                kwargs = {k: _somewhere(a) for k, a in kwargs.items()}
        out = self._module_call(mod, args, kwargs, st, node, exprs)
        if pre_hooks.POST_HOOK in hooks:
            # A forward hook may move or replace the output: what the file's own hooks hand back is known
            after = (
                pre_hooks.run_after(self, mod, args, kwargs, out, st, node) if self._hooks_known(mod, hooks) else None
            )
            return after if after is not None else _somewhere(out)
        return out

    def _note_pooled_after_move(self, first: Obj, node: cst.CSTNode, st: State) -> None:
        """`self.pool(feats.to(d))`: a tensor moved between GPUs and pooled right where it arrived, when pooling
        first would have sent fewer bytes (OversizedMove.pooled). Not ids or a mask, nor a tensor also used for
        more than the pooling (_reduced_alone)."""
        if first.reducible_move is None or first.made_from_move or first.index_like or not isinstance(node, cst.Call):
            return
        moved, src, made_at = first.reducible_move
        there, came = single(first.devs), single(src)
        if there is None or came is None or not there.startswith("cuda") or not came.startswith("cuda"):
            return
        if not self._reduced_alone(moved, node):
            return  # also used whole there (an ASPP's convolutions beside its image pooling): it must cross
        self.interp.recorder.record(
            OversizedMove(node=moved, mode=st.mode, src=src, dst=first.devs, pooled=node, made_at=made_at),
            key=(src, first.devs),
        )

    def _note_plain_list_layer(self, mod: Obj, node: cst.CSTNode, st: State) -> None:
        """A layer of a plain list, never placed, run on the CPU by a method of a model whose other parts are on a
        GPU (the forward sent it its input where it is: nothing fails): MP031's fact. (With its input on a GPU,
        the call fails, and MP001 says so.)"""
        owner = st.self_obj
        if not isinstance(owner, Obj) or owner.attrs is None:
            return
        gpu = next(
            (
                d
                for v in owner.attrs.values()
                if isinstance(v, Obj) and v.kind == "module"
                for d in [single(v.devs)]
                if d is not None and d.startswith("cuda")
            ),
            None,
        )
        if gpu is not None:
            holder = _plain_list_holder(owner, mod)
            self.interp.recorder.record(
                LayerInPlainListOnHost(node=node, mode=st.mode, module=mod, gpu=gpu, holder=holder)
            )

    def _pre_hooks_known(self, mod: Obj, hooks: tuple[str, ...]) -> bool:
        return self._hooks_known(mod, hooks, pre_hooks.PRE_HOOKS_KEY, pre_hooks.PRE_HOOK)

    @staticmethod
    def _hooks_known(
        mod: Obj, hooks: tuple[str, ...], key: str = pre_hooks.POST_HOOKS_KEY, meth: str = pre_hooks.POST_HOOK
    ) -> bool:
        """Was every (pre-)hook of the module registered where this interpretation saw it?"""
        seen = (mod.extra or {}).get(key, ())
        return isinstance(seen, tuple) and len(seen) == hooks.count(meth)

    def _module_call(
        self, mod: Obj, args: list[Val], kwargs: dict[str, Val], st: State, node: cst.CSTNode, exprs: ArgExprs
    ) -> Val:
        if (mod.extra or {}).get("collapsed"):
            return UNK  # a split model moved whole (MP007): its forward's devices are not known
        if mod.origin == IN_A_PLAIN_LIST and args and isinstance(args[0], Obj) and single(args[0].devs) == "cpu":
            self._note_plain_list_layer(mod, node, st)
        if args:
            args = [self._staged(self.interp.moves.stage_call(mod, args[0], node), args[0], exprs, st), *args[1:]]
        if mod.cls is not None and mod.attrs is not None and not self._runs_torch_forward(mod):
            st.scope.split_seen = st.scope.split_seen or bool(mod.split)
            fwd = mod.cls.method("forward")
            if fwd is None:
                # A callable object of the file's (a loss or a callback with `__call__`, not a module): its
                # `__call__` runs as a method does, with nothing about where a module's input must be.
                call = mod.cls.method("__call__")
                if call is None or call.node.decorators:
                    return UNK
                return self.call_function(call, mod, args, kwargs, st, node, helper=True)
            if args and isinstance(args[0], Obj) and args[0].kind != "scalar":
                need = self.input_devs(mod, fwd)
                self.interp.recorder.need(node, 0, need)
                # (or on one way through an `if` before: the value that way)
                way = None if conflict(args[0].devs, need) else path_off(args[0], need, self.interp.stmts.open_tests)
                if (
                    need is not None
                    and (conflict(args[0].devs, need) or way is not None)
                    and not _left_on_host(mod, need)
                    and not _drops_a_move_of_its_input(fwd)
                ):
                    self.interp.recorder.record(
                        Mismatch(
                            node=node,
                            mode=st.mode,
                            value=args[0] if way is None else way.value,
                            path=way,
                            target=need,
                            # A split class is entered through its first stage; a class on one device is
                            # named as the call writes it (MP001's _meets).
                            what=f"the first stage of {mod.cls.name}" if mod.split else mod.cls.name,
                            op="module",
                            module=mod,
                            arg_index=0,
                            expr=_nth(exprs, 0),
                            site=0,
                        ),
                        key=0,
                    )
                    if "never placed" in (mod.origin or ""):
                        # The fix places the module (where its input is), not the input: what its forward
                        # would give then is not judged, as for a torch.nn module reported so.
                        return FAILED
                    # Report once, at the call: the forward then runs on a correctly placed input.
                    args = [args[0].with_(devs=need)] + list(args[1:])
            args = self._check_other_inputs(mod, fwd, args, kwargs, st, node, exprs)
            return self.call_function(fwd, mod, args, kwargs, st, node)
        if mod.cls is None and mod.extra and mod.extra.get("summarized"):
            # A class of another file, known by its summary: input and output devices.
            if mod.extra.get("loss") and len(args) >= 2:
                # Its forward gives its first two arguments to a loss (summary._is_loss_of_inputs).
                pair = Obj("loss", None, label=f"{mod.extra['summarized']}()")
                self.loss_call(pair, list(args[:2]), {}, st, node, list(exprs or [])[:2])
                return Obj("tensor", None, origin="loss")
            if mod.in_devs is not None and args and isinstance(args[0], Obj):
                self.interp.exprs.check_operand(
                    node,
                    args[0],
                    mod.in_devs,
                    st,
                    what=f"the first stage of {mod.extra['summarized']}",
                    arg_index=0,
                    expr=_nth(exprs, 0),
                )
            placed = args
            if mod.in_devs is not None and args and isinstance(args[0], Obj) and conflict(args[0].devs, mod.in_devs):
                placed = [args[0].with_(devs=mod.in_devs), *args[1:]]  # reported here: its file sees it placed
            self._note_forward(mod, placed, kwargs, node)
            if mod.out_devs is not None:
                return Obj("tensor", mod.out_devs, origin="output of", at=node, opaque=True)
            out = summarized_output(mod, node)
            if out is not None:
                return out
            if mod.in_devs is None or single(mod.devs) is None:
                # Its forward moves its input itself, or its output's device is not known.
                return Obj("tensor", mod.devs, origin="output of", at=node, opaque=True) if single(mod.devs) else UNK
        if mod.kind == "passthrough":
            first = args[0] if args else UNK
            if mod.nn_class in T.POOLING and isinstance(first, Obj):
                self._note_pooled_after_move(first, node, st)
            return first.with_(label="", worked=True) if isinstance(first, Obj) and first.kind != "module" else UNK
        if mod.kind == "loss":
            return self.loss_call(mod, args, kwargs, st, node, exprs)
        if mod.kind in ("module", "any") and single(mod.devs) is not None:
            what = mod.label or "the module"
            if args and failed(args[0]):
                return FAILED
            used(*args, *kwargs.values())
            exact = T.SAME_DEVICE_ARGUMENTS.get(mod.nn_class, {})
            if any(isinstance(a, Starred) for a in args):
                exact = {}  # `*xs` of unknown length: which position an argument takes is not known
            names = list(kwargs)
            for i, a in enumerate(list(args) + list(kwargs.values())):
                if failed(a):
                    continue
                # torch.nn's modules whose argument here must be where they are (an RNN's state)
                must = i in exact if i < len(args) else names[i - len(args)] in exact.values()
                if i == 0:
                    if (
                        self.interp.exprs.check_operand(
                            node, a, mod.devs, st, what=what, arg_index=0, expr=_nth(exprs, 0), module=mod
                        )
                        and id(mod) not in self.interp.spread_modules
                    ):
                        # Which side the fix moves (the input or the module) is not known: what
                        # follows is not judged. One of blocks dealt over several GPUs by a loop is
                        # placed on purpose: the fix is a hop to it, so its output is where it is.
                        return FAILED
                    continue
                self.interp.recorder.need(node, i, mod.devs)  # also on the visits that skip the check below
                self.interp.exprs.probe_hit(a, mod.devs)
                if isinstance(a, Obj) and (must or both_cuda(a.devs, mod.devs)):
                    # Other arguments may legitimately live on the CPU (lengths, indices):
                    # only a tensor on another GPU is certainly wrong, unless torch.nn's module
                    # needs it where it is (`must`). The activation itself is fine, so the flow
                    # goes on with the module's output.
                    self.interp.exprs.check_operand(node, a, mod.devs, st, what=what, arg_index=i, expr=_nth(exprs, i))
                elif isinstance(a, SeqV) and (a.items or (a.items is None and isinstance(a.elem, Obj))):
                    self._check_state_tuple(node, a, mod, st, what, i, _nth(exprs, i), must)
            lead = args[0] if args else None
            out = Obj(
                "tensor",
                mod.devs,
                origin="output of",
                at=node,
                opaque=mod.opaque or mod.kind == "any",
                lineage=lead.lineage if isinstance(lead, Obj) else None,
                hop=lead.hop if isinstance(lead, Obj) else 0,
            )
            return _rnn_output(mod.nn_class, out)
        return UNK

    def _check_state_tuple(
        self,
        node: cst.CSTNode,
        seq: SeqV,
        mod: Obj,
        st: State,
        what: str,
        i: int,
        expr: cst.BaseExpression | None,
        must: bool = False,
    ) -> None:
        """A tuple of tensors given to a module after its input (an LSTM's `(h0, c0)`): each
        must be where the module is; report the first one certainly on another GPU (on another
        device at all when the module needs it there: `must`). A tuple of unknown length
        (`tuple(s.to(dev) for s in state)`) is judged by the element all its items are like."""
        elems = expr.elements if isinstance(expr, (cst.Tuple, cst.List)) else None
        items = seq.items if seq.items is not None else (seq.elem,)
        for j, item in enumerate(items):
            if not (isinstance(item, Obj) and item.kind != "scalar" and conflict(item.devs, mod.devs)):
                continue
            if not (must or both_cuda(item.devs, mod.devs)):
                continue
            part = elems[j].value if elems is not None and j < len(elems) else None
            self.interp.recorder.record(
                Mismatch(
                    node=node,
                    mode=st.mode,
                    value=item,
                    target=mod.devs,
                    what=what,
                    op="module",
                    arg_index=i,
                    expr=expr if part is None else part,
                    module=mod,
                    site=i,
                    item=j if part is None else None,  # of unknown length: the first item is like all
                ),
                key=i,
            )
            return

    def loss_call(
        self, mod: Obj, args: list[Val], kwargs: dict[str, Val], st: State, node: cst.CSTNode, exprs: ArgExprs = None
    ) -> Obj:
        """A criterion called: its tensors on one device, checked; the loss it returns is on its predictions'
        device (unknown when they are, or when they disagree: reported here)."""
        kind = (mod.extra or {}).get(T.CLASS_DIM)
        if isinstance(kind, Const):
            self.interp.library.loss_direction(f"nn.{kind.value}", args, list(exprs or []), node, st)
        pairs = list(zip(list(args) + list(kwargs.values()), list(exprs or []) + [None] * 99))
        weights = [w for w in (mod.extra or {}).values() if isinstance(w, Obj)]
        pairs += [(w, None) for w in weights]
        host_targets = T.HOST_TARGETS in (mod.extra or {})
        first = None
        for a, e in pairs:
            if not isinstance(a, Obj) or a.kind in ("scalar", "module") or a.devs is None:
                continue
            if first is None:
                first = (a, e)
                continue
            if host_targets and a.devs == one("cpu"):
                continue  # nn.CTCLoss()(log_probs_on_gpu, targets_on_cpu, ...): as PyTorch wants them
            if conflict(a.devs, first[0].devs):
                fact = LossMismatch.against_first(first, a, e, node=node, mode=st.mode, op=mod.label or "the loss")
                if any(a is w for w in weights):
                    fact = dataclasses.replace(fact, weighs=mod)
                self.interp.recorder.record(fact, key="loss")
                return Obj("tensor", None, origin="loss")
        if first is None or single(first[0].devs) is None:
            return Obj("tensor", None, origin="loss")
        return Obj("tensor", first[0].devs, origin=LOSS_OF, at=node)

    def _autograd_function(self, cls: ClassInfo) -> bool:
        """Does the file's class derive from torch.autograd.Function (directly or through its own classes)?"""
        for c in cls.lineage():
            for base in c.node.bases:
                q = self.interp.exprs.qname(base.value) or ""
                if q in ("torch.autograd.Function", "torch.autograd.function.Function"):
                    return True
        return False

    def _runs_torch_forward(self, mod: Obj) -> bool:
        """A class of the file that writes no forward and derives from a torch.nn module that has one
        (`class DoubleConv(nn.Sequential)` built with `super().__init__(layers...)`, `class Proj(nn.Linear)`),
        placed whole on one device: called, it is that torch.nn module (inputs there, output there)."""
        cls = mod.cls
        if cls is None or single(mod.devs) is None or cls.method("forward") is not None:
            return False
        for c in cls.lineage():
            for base in c.node.bases:
                q = self.interp.exprs.qname(base.value) or ""
                if q.startswith("torch.nn.") and q.rsplit(".", 1)[-1] not in T.MODULES_WITHOUT_FORWARD:
                    return q.rsplit(".", 1)[-1][:1].isupper()
        return False

    def _check_other_inputs(
        self,
        mod: Obj,
        fwd: FuncInfo,
        args: list[Val],
        kwargs: dict[str, Val],
        st: State,
        node: cst.CSTNode,
        exprs: ArgExprs,
    ) -> list[Val]:
        """The positional arguments after the first: where the forward uses one unmoved
        on another device than the argument's, report it at the call (a fix there suits
        this call; one inside the forward would break the other instances of the class),
        and run the forward on a correctly placed copy. A CPU tensor may be meant for
        the CPU (lengths, indices, a scalar): the forward's own checks judge that."""
        tensors = {
            i: a for i, a in enumerate(args) if i > 0 and isinstance(a, Obj) and a.kind in ("tensor", "param", "buffer")
        }
        if not tensors or not any(single(a.devs) for a in tensors.values()):
            return args
        if mod.split and _moves_between_its_parts(fwd):
            # A split model whose forward hops the activation between its own parts (`self.head(h.to(self.dev1),
            # labels)`): an input it passes on unmoved belongs with that hop, where the forward calls the part
            # that needs it; that call reports it (the devices are the instance's own, no other is broken).
            return args
        needs = self.argument_needs(mod, fwd, args, kwargs, list(tensors))
        out = list(args)
        for i, a in tensors.items():
            need = needs.get(i)
            self.interp.recorder.need(node, i, need)
            if need is None or single(a.devs) == "cpu" or not conflict(a.devs, need):
                continue
            self.interp.recorder.record(
                Mismatch(
                    node=node,
                    mode=st.mode,
                    value=a,
                    target=need,
                    what=mod.label or mod.cls.name,
                    op="module",
                    # (a split model, so that the finding says which part needs it: MP001's _meets)
                    module=mod if mod.split else None,
                    arg_index=i,
                    expr=_nth(exprs, i),
                    site=i,
                ),
                key=i,
            )
            out[i] = a.with_(devs=need)
        return out

    def argument_needs(
        self, mod: Obj, fwd: FuncInfo, args: list[Val], kwargs: dict[str, Val], positions: list[int]
    ) -> dict[int, Devs]:
        """Where the forward first uses each positional argument in `positions`, unmoved
        (a probe run, reporting nothing, with those arguments marked by probe devices and
        the others as given): {position: devs}; absent where it moves it first or never uses it."""
        # Keyed by the module's devices too: two placements of one construction (`Block(d).to("cuda:0")`,
        # `Block(d).to("cuda:1")`) share its `extra`, and need their arguments on different devices.
        key = ("arg_needs", tuple(positions), tuple(value_key(a) for a in args), mod.devs, mod.split)
        cache = mod.extra.setdefault("probes", {}) if mod.extra is not None else None
        if cache is not None and key in cache:
            cached: dict[int, Devs] = cache[key]
            return cached
        # The forward runs for real right after: the arguments' lineages take no step in the probe
        # (MP006 would count the activation's crossings twice).
        probe_args = [Obj("tensor", probe_devs(i)) if i in positions else _unlinked(a) for i, a in enumerate(args)]
        if 0 not in positions and probe_args and isinstance(probe_args[0], Obj) and probe_args[0].kind != "scalar":
            probe_args[0] = probe_args[0].with_(devs=mod.in_devs or probe_args[0].devs)
        probe: dict[str, Any] = {"devs": None}
        self.interp.probes.append(probe)
        try:
            with self.interp.recorder.muted():
                pst = State.fresh(dict(self.interp.globals), "<probe>", mod)
                self.call_function(fwd, mod, probe_args, {k: _unlinked(v) for k, v in kwargs.items()}, pst, None)
        finally:
            self.interp.probes.pop()
        by = probe.get("by", {})
        needs = {i: by[probe_devs(i)] for i in positions if probe_devs(i) in by}
        if mod.extra is None:
            mod.extra = {"probes": {}}
        mod.extra.setdefault("probes", {})[key] = needs
        return needs

    def _note_forward(self, mod: Obj, args: list[Val], kwargs: dict[str, Val], node: cst.CSTNode) -> None:
        """A call of an instance of another file's class (`self.pe(h)`), kept for that file's analysis
        (callers.py): its forward runs there with these arguments on an instance built as this file
        built it, and moved whole as this file moved it (`SinusoidalPE(d).to("cuda:0")`: a plain tensor
        attribute stays on the CPU). Only an instance whose devices this file knows: one its class
        places (its summary's), one built with devices its class places it with in ways a summary does not
        keep (`Net(cfg)` appending blocks in a loop, on `cfg.first` or `cfg.second`), or one moved whole to
        one device; an unplaced one may be placed in ways the model does not follow."""
        extra = mod.extra or {}
        moved = single(mod.devs) if extra.get("moved") else None
        if not extra.get("module") or not isinstance(node, cst.Call):
            return
        if extra.get("moved") and moved is None:
            return  # moved to one of several devices (note_call keeps a named one only)
        if not extra.get("moved") and mod.devs is None and not mod.split and not built_with_devices(self.interp, mod):
            return
        func = f"{extra['summarized']}.forward"
        note_call(self.interp, extra["module"], func, args, kwargs, node, mod, moved=moved, receiver=node.func)

    def input_devs(self, mod: Obj, fwd: FuncInfo) -> Devs:
        """Where a class's forward needs its first argument: the device of the
        first module or op that uses it before any transfer (None: anywhere)."""
        if mod.in_devs is not None or (mod.extra or {}).get("in_known"):
            return mod.in_devs
        probe: dict[str, Any] = {"devs": None}
        self.interp.probes.append(probe)
        try:
            with self.interp.recorder.muted():  # the probe run reports nothing
                pst = State.fresh(dict(self.interp.globals), "<probe>", mod)
                self.call_function(fwd, mod, [Obj("tensor", PROBE)], {}, pst, None)
        finally:
            self.interp.probes.pop()
        mod.in_devs = probe["devs"]
        mod.extra = dict(mod.extra or {}, in_known=True)
        return mod.in_devs

    def ev_call(self, node: cst.Call, st: State) -> Val:
        func = node.func
        ref = _object_setattr(node)
        if ref is not None:
            # object.__setattr__(self, "base", base): held by reference, not registered as a child
            self.interp.stmts.hold_reference(ref[0], self.interp.exprs.ev(ref[1], st), st)
            return UNK
        if isinstance(func, cst.Attribute):
            recv = self.interp.exprs.ev(func.value, st)
            meth = func.attr.value
            if isinstance(recv, QName) and recv.q in self.interp.project:
                # `models.Net(...)` of a project module imported whole (`import models`): its summary.
                callee = self.interp.imported(f"{recv.q}.{meth}")
            elif isinstance(recv, QName):
                return self.interp.library.library_call(canonical(f"{recv.q}.{meth}"), node, st)
            elif (
                isinstance(recv, Obj)
                and recv.attrs is not None
                and (meth in recv.attrs or f"{id(recv)}.{meth}" in st.env)
            ):
                # self.stage(x): a submodule, not a method
                callee = st.env.get(f"{id(recv)}.{meth}") or recv.attrs[meth]
            else:
                args, kwargs = self.ev_args(node, st)
                return self.method_call(recv, meth, args, kwargs, node, st)
        else:
            callee = self.interp.exprs.ev(func, st)
        if isinstance(callee, QName):
            return self.interp.library.library_call(callee.q, node, st)
        if isinstance(callee, PartialV) and isinstance(callee.func, QName):
            return self.interp.library.library_call(callee.func.q, node, st, bound=callee)
        args, kwargs = self.ev_args(node, st)
        exprs = self.interp.arg_nodes
        if isinstance(callee, PartialV) and isinstance(callee.func, (ClassRef, FuncRef)):
            # functools.partial(Block, width) / partial(helper, device=d): its arguments go first.
            extra = {k: v for k, v in callee.kwargs.items() if k not in kwargs}
            exprs = [None] * len(callee.args) + list(exprs) + [None] * len(extra)
            args, kwargs, callee = [*callee.args, *args], {**kwargs, **extra}, callee.func
        if isinstance(callee, TupleType):
            return callee.make(args, kwargs)  # `TabConfig(device="cuda:0", ...)` of a namedtuple
        if isinstance(callee, ClassRef):
            obj = self.interp.instances.instantiate(callee.info, args, kwargs, st, node)
            self._note_class_use(obj, st, node)
            return obj
        if isinstance(callee, FuncRef):
            return self.call_function(callee.info, callee.bound, args, kwargs, st, node, helper=True)
        if isinstance(callee, LambdaV):
            return self.call_lambda(callee, args, kwargs, st)
        if isinstance(callee, Summarized):
            if refused(callee):  # its code refuses the assumed GPU count: the program stops here
                self.interp.gpus.refute(node)
                return UNK
            used(*args, *kwargs.values())
            if callee.kind == "function":
                within = st.self_obj if st.scope.split_class and isinstance(st.self_obj, Obj) else None
                note_call(self.interp, callee.module, callee.name, args, kwargs, node, within=within)  # callers.py
                inlined = call_inlined(self.interp, callee, args, kwargs, st, node)
                if inlined is not None:
                    return inlined
            elif any(is_splitish(a) for a in (*args, *kwargs.values())):
                # A split model given to another file's class: its __init__ may move it whole (callers.py).
                note_call(self.interp, callee.module, f"{callee.name}.__init__", args, kwargs, node)
            return call_summarized(callee, args, kwargs, st, node)
        if isinstance(callee, Obj) and callee.cls is not None and isinstance(func, cst.Name):
            callee = never_placed_view(self.interp, callee, func.value) or callee
        elif isinstance(callee, Obj) and callee.cls is not None and isinstance(func, cst.Call):
            if built_here(func, callee.cls.name):  # Net()(x): a temporary, never moved
                callee = never_placed_view(self.interp, callee, None) or callee
        if isinstance(callee, Obj) and callee.kind == "any" and callee.origin.startswith(LOADED):
            # A whole model unpickled by torch.load: of a class not known here, whose forward may move its
            # input itself (`x.to(next(self.parameters()).device)`): where its input must be is not known.
            used(*args, *kwargs.values())
            return UNK
        if isinstance(callee, Obj) and callee.kind in ("module", "any", "passthrough", "loss"):
            return self.module_call(callee, args, kwargs, st, node, exprs)
        if isinstance(callee, SeqV) and callee.module:
            return self.sequential_call(callee, args, kwargs, st, node, exprs)
        # A callable the model does not know (a parameter, a callback): it may compute on
        # what it gets, so a value passed to it is no idle round trip (MP005).
        used(*args, *kwargs.values())
        if args:
            self._staged(self.interp.moves.opaque_call(args[0], node), args[0], exprs, st)
        return UNK

    @staticmethod
    def _staged(lead: Val, given: Val, exprs: ArgExprs, st: State) -> Val:
        """`lead`, the activation a model was called on with the lineage it has from now on: also in the
        caller's variable (`eps = model(z)` then `z = (z.to(...) - eps).to(...)`: the next `model(z)` is a
        new pass, whose way back is the split's own cost, not ping-pong)."""
        first = _nth(exprs, 0)
        if lead is not given and isinstance(first, cst.Name) and st.env.get(first.value) is given:
            st.env[first.value] = lead
        return lead

    def _note_class_use(self, obj: Obj, st: State, node: cst.CSTNode) -> None:
        if obj.split:
            st.scope.split_seen = True

    def ev_args(self, node: cst.Call, st: State) -> tuple[list[Val], dict[str, Val]]:
        """The values of a call's arguments; `self.interp.arg_nodes` then holds their
        expressions in the same order (positional, then keyword), for messages."""
        args: list[Val] = []
        kwargs: dict[str, Val] = {}
        pos_nodes: list[cst.BaseExpression | None] = []
        kw_nodes: list[cst.BaseExpression | None] = []
        for a in node.args:
            v = self.interp.exprs.ev(a.value, st)
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
                # `model(**{"input_ids": ids, "mask": m})`: a dict of known keys binds them by name.
                if isinstance(v, DictV) and not v.module and all(isinstance(k, str) for k in v.items):
                    for k, item in v.items.items():
                        if k not in kwargs:  # else Python raises TypeError: what runs is not this
                            kwargs[k] = item
                            kw_nodes.append(None)
                elif isinstance(v, SeqV) and v.kind == "dict" and v.items is None and v.elem is not UNK:
                    # `model(**batch)` of `batch = {k: t.to(dev) for k, t in batch.items()}`: keys not known,
                    # values alike; each parameter the call leaves unbound may get one (Calls.bind).
                    kwargs[ANY_KEYWORD] = v.elem
                    kw_nodes.append(None)
            else:
                args.append(v)
                pos_nodes.append(a.value)
        self.interp.arg_nodes = pos_nodes + kw_nodes
        return args, kwargs

    def sequential_call(
        self, seq: SeqV, args: list[Val], kwargs: dict[str, Val], st: State, node: cst.CSTNode, exprs: ArgExprs = None
    ) -> Val:
        if seq.hooks:
            # A hook may move what the container gets (a pre-hook) or gives (a forward hook): run where each is
            # one of the file's (`feats[key] = output`, in a closure), not known where one is not.
            holder = Obj("module", None, label="", extra=pre_hooks.as_extra(seq.hooks))
            hooked = pre_hooks.run(self, holder, args, kwargs, st, node)
            if hooked is None:
                h = self._sequential_layers(seq, [_somewhere(a) for a in args[:1]], st, node, [])
                after = None
            else:
                new_args, _ = hooked
                h = self._sequential_layers(seq, new_args, st, node, exprs if new_args == args else [])
                after = pre_hooks.run_after(self, holder, new_args, kwargs, h, st, node)
            if after is not None:
                return after
            return _somewhere(h) if any(k.meth == pre_hooks.POST_HOOK for k in seq.hooks) else h
        return self._sequential_layers(seq, args, st, node, exprs)

    def _sequential_layers(
        self, seq: SeqV, args: list[Val], st: State, node: cst.CSTNode, exprs: ArgExprs = None
    ) -> Val:
        h = args[0] if args else UNK
        first = list(exprs or [])[:1]  # the argument's expression, for the first item only
        if seq.items is None:
            # Items of unknown number: a call is only understood when they share one device.
            if (
                isinstance(seq.elem, Obj)
                and seq.elem.kind in ("module", "any")
                and single(seq.elem.devs)
                and seq.elem.cls is None
            ):
                return self.module_call(seq.elem, [h], {}, st, node, first)
            if isinstance(seq.elem, SeqV) and _leaves_on_one_device(seq.elem):
                # blocks of unknown number, each an nn.Sequential of torch.nn layers on one device
                return self.sequential_call(seq.elem, [h], {}, st, node, first)
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

    def grow(self, seq: SeqV, more: tuple[Val, ...] | None, more_elem: Val) -> None:
        """`seq.append(x)`, `seq.extend(xs)`, `seq += xs` in place: items of known number while both sides
        are known and no loop of unknown length runs; else items of unknown number, each like one of
        those it had or was given (the join)."""
        if seq.items is not None and more is not None and not self.interp.in_unknown_loop:
            seq.items = seq.items + more
            return
        had = list(seq.items) if seq.items is not None else ([] if seq.elem is UNK else [seq.elem])
        given = list(more) if more is not None else [more_elem]
        seq.elem = join_all(had + given)
        seq.items = None

    def pop(self, seq: SeqV, index: Val) -> Val:
        """`skips.pop()` (a U-Net's skip connections, last in first out): the item, taken out, while the items
        are known and no loop of unknown length runs; else one like any of them (the join), the list as it
        was (which item a pass of such a loop takes is not known)."""
        at = index.value if isinstance(index, Const) and type(index.value) is int else None
        if seq.items is not None and at is not None and not self.interp.in_unknown_loop:
            items = list(seq.items)
            if not -len(items) <= at < len(items):
                return UNK  # an IndexError where it runs
            got = items.pop(at)
            seq.items = tuple(items)
            return got
        return join_all(list(seq.items)) if seq.items else seq.elem

    def _load_assigned(self, recv: Obj, sd: Val | None, node: cst.Call, st: State) -> None:
        """`recv.load_state_dict(sd, assign=True)` keeps the checkpoint's tensors, where torch.load put them
        (`map_location="cpu"`): every parameter of the module goes there, as by `.to()`. A split model is
        collapsed (MP007 at this call) and its forward is no longer known."""
        there = single(sd.devs) if isinstance(sd, Obj) and sd.origin.startswith(LOADED) else None
        if there is None or not isinstance(sd, Obj) or not isinstance(node.func, cst.Attribute):
            return
        if is_splitish(recv):
            self.interp.recorder.record(
                Collapse(node=node, mode=st.mode, module=recv, devs=one(there), meth="load_state_dict")
            )
            origin = "collapsed by load_state_dict(assign=True)"
            moved = Obj("module", one(there), origin=origin, at=node, opaque=True, extra={"collapsed": True})
        else:
            origin = f"put on {there} by load_state_dict(assign=True), from a checkpoint {sd.origin}"
            moved = moved_instance(recv, one(there), origin, node) or recv.with_(
                devs=one(there), split=None, origin=origin, at=node
            )
        self.interp.moves.rebind(node.func.value, moved, st)

    def _legacy_type_cast(self, recv: Obj, arg: cst.BaseExpression, node: cst.Call, st: State) -> Val | None:
        """`x.type(torch.cuda.FloatTensor)` (or its name as a string) moves a host `x` to the current CUDA
        device, as `.cuda()` does, and casts a CUDA `x` where it is (torch changes the device only when its
        type differs); `x.type(torch.FloatTensor)` moves `x` to the CPU; `x.type(torch.float32)` casts where
        `x` is. None for anything else (`x.type(y.type())`, or a CUDA type for an `x` not known)."""
        if isinstance(arg, cst.SimpleString):
            name: str | None = arg.evaluated_value if isinstance(arg.evaluated_value, str) else None
        else:
            name = self.interp.exprs.qname(arg)
        if name is None:
            return None
        space, _, last = name.rpartition(".")
        if space == "torch.cuda" and last in T.CUDA_TENSOR_TYPES:
            here = single(recv.devs) or ""
            if here == "cpu":
                return self.interp.moves.move(recv, "cuda", [], {}, node, st)
            return recv if here.startswith("cuda") else None
        if space == "torch" and last in T.CUDA_TENSOR_TYPES:
            return self.interp.moves.move(recv, "cpu", [], {}, node, st)
        if space == "torch" and last in T.DTYPE_NAMES:
            return recv
        return None

    def _check_gradient(self, node: cst.Call, out: Obj, grad: Val | None, st: State) -> None:
        """`out.backward(grad)`: the gradient must be on `out`'s device (autograd refuses it, "invalid gradient
        at index 0 - expected device cuda:0 but got cuda:1"), a pipeline's boundary gradient read from the next
        stage's input (`out.backward(inp.grad)`) must come back first. A 0-dim gradient is moved for you."""
        if not isinstance(grad, Obj) or grad.may_be_0d:
            return
        exprs = self.interp.arg_nodes
        self.interp.exprs.check_operand(
            node,
            grad,
            out.devs,
            st,
            what=out.label or "the tensor",
            op=".backward()",
            expr=exprs[0] if exprs else None,
            other=out,
        )

    def _reduced_alone(self, move: cst.CSTNode, reduction: cst.Call) -> bool:
        """Is the moved tensor used for nothing but this reduction? So when the move is written inside the
        reduction's own expression (`(g.to(d) * 2).sum()`), or is the argument of the helper running now whose
        parameter appears nowhere but inside it (`entropy(w.to(d))`, `return -(w * w.log()).sum(-1).mean()`).
        A moved tensor used for more (a mask moved to weigh a loss, and also counted) must cross anyway."""
        inside = {id(n) for n in walk(reduction)}
        if id(move) in inside:
            return True
        site = self.interp.recorder.sites[-1] if self.interp.recorder.sites else None
        fn = self.interp.stack[-1] if self.interp.stack else None
        if not isinstance(site, cst.Call) or fn is None:
            return False
        params = [p.name.value for p in fn.node.params.params]
        if fn.cls is not None and params[:1] in (["self"], ["cls"]):
            params = params[1:]
        name = next(
            (
                a.keyword.value if a.keyword is not None else params[i] if i < len(params) else None
                for i, a in enumerate(site.args)
                if a.value is move and not a.star
            ),
            None,
        )
        if name is None:
            return False
        return _feeds_only(fn.node.body, name, inside, 3)

    def call_lambda(self, fn: LambdaV, args: list[Val], kwargs: dict[str, Val], st: State) -> Val:
        """`dev(1)` of `dev = lambda i: f"cuda:{i}"`: the body, evaluated with the names the lambda saw where it was
        made and its parameters bound (plain ones; a `*args` or `**kwargs` lambda gives an unknown value)."""
        lam = fn.node
        params = lam.params
        if params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) or params.star_kwarg is not None:
            return UNK
        names = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
        if len(args) > len(names) or any(k not in names for k in kwargs):
            return UNK
        bound: dict[str, Val] = dict(zip(names, args))
        bound.update(kwargs)
        inner = st.copy()
        inner.env = {**fn.env}
        for p in (*params.posonly_params, *params.params, *params.kwonly_params):
            if p.name.value not in bound:
                if p.default is None:
                    return UNK
                made = fn.defaults.get(p.name.value) if fn.defaults is not None else None
                bound[p.name.value] = made if made is not None else self.interp.exprs.ev(p.default, inner)
        inner.env.update(bound)
        return self.interp.exprs.ev(lam.body, inner)

    def _lambda_of_one(self, st: State) -> Callable[[cst.Lambda, Val], Val]:
        """`type=lambda s: ...` of an argparse argument, applied to its default (command_line.method): the lambda's
        body, evaluated with its parameter bound to the value."""

        def apply(lam: cst.Lambda, value: Val) -> Val:
            return self.call_lambda(LambdaV(lam, st.env), [value], {}, st)

        return apply

    def method_call(
        self, recv: Val, meth: str, args: list[Val], kwargs: dict[str, Val], node: cst.Call, st: State
    ) -> Val:
        if meth in ("to", "cuda", "cpu"):
            own = recv.cls.method(meth) if isinstance(recv, Obj) and recv.cls is not None and recv.attrs else None
            if own is not None and isinstance(recv, Obj) and _moves_only_its_tensors(own, recv):
                # A class's own `to()` that never hands on to Module.to and moves only plain tensors it holds
                # (`self.cos = self.cos.to(*args)`; `return self`): its weights stay where they are.
                self.call_function(own, recv, args, kwargs, st, node, helper=True)
                recv.extra = {**(recv.extra or {}), OWN_MOVE_KEY: own.node}  # (in place, as Module.to works)
                return recv
            return self.interp.moves.move(recv, meth, args, kwargs, node, st)
        if meth == "to_empty" and is_module(recv):
            # Module.to_empty(device=d): every parameter and buffer, of every submodule, made anew on d, as
            # `.to(d)` moves them (a split collapses: MP007); `recurse=False` places the module's own tensors only.
            recurse = kwargs.get("recurse")
            if isinstance(recurse, Const) and recurse.value is False:
                return recv
            rest = {k: v for k, v in kwargs.items() if k != "recurse"}
            return self.interp.moves.move(recv, "to_empty", args, rest, node, st)
        if meth == "apply" and len(args) == 1 and not kwargs and isinstance(args[0], FuncRef) and is_module(recv):
            if not (isinstance(recv, Obj) and recv.cls is not None and recv.cls.method(meth)):
                self._apply_to_parts(recv, args[0], node, st)
            return recv
        if meth == "apply" and isinstance(recv, ClassRef) and self._autograd_function(recv.info):
            # A custom torch.autograd.Function of the file: `apply(*args)` runs its static `forward(ctx, *args)`.
            fwd = recv.info.method("forward")
            if fwd is None:
                return UNK
            ctx = backward_code.autograd_ctx(fwd.node, args)
            out = self.call_function(fwd, None, [ctx, *args], kwargs, st, node, helper=True)
            bwd = recv.info.method("backward")
            grads = backward_code.gradients_for(out)
            if bwd is not None and grads and st.mode != "no_grad" and self.interp.recorder.live:
                # Its backward runs when a loss computed from the output goes backward: each gradient arrives
                # where its output is, beside what forward saved on ctx (a `lambd` buffer on another GPU). Not in
                # a probe of where a module's input must be (Calls.input_devs): what backward reads wrong is
                # backward's to report, where it reads it, not the caller's input.
                returned = self.call_function(bwd, None, [ctx, *grads], {}, st, node, helper=True)
                backward_code.check_returned_gradients(self.interp, recv.info, node, args, returned, st)
            return out
        if (
            meth == "type_as"
            and len(args) == 1
            and not kwargs
            and isinstance(args[0], Obj)
            and args[0].kind == "tensor"
        ):
            # PyTorch's type_as is `self.to(other.options())`: the other tensor's dtype and device.
            return self.interp.moves.move(recv, "to", args, {}, node, st)
        if meth == "type" and isinstance(recv, Obj) and recv.kind == "tensor" and len(node.args) == 1 and not kwargs:
            cast = self._legacy_type_cast(recv, node.args[0].value, node, st)
            if cast is not None:
                return cast
        if meth == "step" and args and isinstance(args[0], FuncRef) and (optimizers.is_optimizer(recv) or recv is UNK):
            # `opt.step(closure)` (LBFGS, or any optimizer given one) calls the closure, which runs the forward
            # and the loss: what they meet is checked there.
            self.call_function(args[0].info, args[0].bound, [], {}, st, node, helper=True)
        if optimizers.is_optimizer(recv):
            assert isinstance(recv, Obj)
            return optimizers.method(self.interp, recv, meth, node, st, args)
        if meth == "load_state_dict" and _assigns(kwargs) and isinstance(recv, Obj) and recv.kind == "module":
            self._load_assigned(recv, args[0] if args else kwargs.get("state_dict"), node, st)
            return UNK
        if meth in _FORWARD_HOOKS and isinstance(recv, SeqV) and recv.module:
            # An nn.Sequential's hook (an input mover on a stage, a feature catcher): in place, on every later
            # call, also on the copies of it that holders hold (a move of its layers rebuilt it there: the same
            # layers).
            if args and isinstance(args[0], LambdaV):  # `lambda m, i, o: ...`, given here or by a name
                args = [pre_hooks.lambda_hook(self, args[0].node, st), *args[1:]]
            fn, with_kwargs = pre_hooks.hook_of(args, kwargs)
            for seq in (recv, *_same_layers(recv, st)):
                seq.hooks = (*seq.hooks, SequentialHook(meth, fn, with_kwargs))
            return UNK
        if meth in _FORWARD_HOOKS and isinstance(recv, Obj) and recv.kind in ("module", "any"):
            # Module.register_forward_(pre_)hook works in place, on every later call (module_call).
            extra = recv.extra or {}
            if args and isinstance(args[0], LambdaV):  # `lambda m, i, o: ...`, given here or by a name
                args = [pre_hooks.lambda_hook(self, args[0].node, st), *args[1:]]
            key = pre_hooks.PRE_HOOKS_KEY if meth == pre_hooks.PRE_HOOK else pre_hooks.POST_HOOKS_KEY
            extra = pre_hooks.registered(extra, args, kwargs, key)
            before = extra.get(HOOKS_KEY, ())
            assert isinstance(before, tuple)
            recv.extra = {**extra, HOOKS_KEY: (*before, meth)}
            return UNK
        if meth == "register_hook" and isinstance(recv, Obj) and recv.kind in ("tensor", "param") and args:
            backward_code.run_gradient_hook(self, recv, args[0], node, st)
            return UNK
        if "device_map" in kwargs:
            return self.interp.library.dispatched(meth, args, kwargs, node, st)
        if (
            meth == "parallelize"
            and isinstance(recv, Obj | type(UNK))
            and isinstance(node.func, cst.Attribute)
            and not (isinstance(recv, Obj) and recv.cls is not None and recv.cls.method(meth) is not None)
        ):
            # A library model's parallelize() (transformers' GPT-2, T5): split as the library splits it.
            # A class of the file that writes its own is run as its body says (below).
            obj = Obj("module", None, dispatched="parallelize()", origin="split by .parallelize()", at=node)
            self.interp.moves.rebind(node.func.value, obj, st)
            return UNK
        if (
            meth == "get_submodule"
            and len(args) == 1
            and isinstance(args[0], Const)
            and isinstance(args[0].value, str)
            and not (isinstance(recv, Obj) and recv.cls is not None and recv.cls.method(meth))
        ):
            # `model.get_submodule("h.0")` (a device map applied by name): the part itself, so that moving it
            # moves it where the model holds it (MovesMixin.rebind_holders), as Module.to works in place.
            part = module_tree.submodule(recv, args[0].value, st.env)
            if part is not None:
                return part
        if meth == "get_submodule" and not (isinstance(recv, Obj) and recv.cls is not None and recv.cls.method(meth)):
            # A part not known here (a name computed, a model loaded whole by torch.load): a module all the same,
            # whose .to() works in place, on devices not known.
            return Obj("module", None, origin="a submodule", at=node, opaque=True)
        if meth in _MODULE_WALKS and not (isinstance(recv, Obj) and recv.cls is not None and recv.cls.method(meth)):
            # model.modules() / children(): the submodules, where every one is known (module_tree.py)
            found = module_tree.named_modules(recv) if meth.endswith("modules") else module_tree.named_children(recv)
            if found is not None:
                named = meth.startswith("named_")  # ("stages.0", part): the dotted path torch gives each
                return SeqV(
                    tuple(SeqV((Const(name), m), kind="tuple") if named else m for name, m in found), kind="gen"
                )
        if isinstance(recv, Obj) and meth in _PARAMETER_VIEWS and recv.kind in ("module", "any"):
            if recv.cls is None or recv.cls.method(meth) is None:
                return ParamsOf(recv, _PARAMETER_VIEWS[meth])
        if isinstance(recv, SeqV) and recv.module and recv.items and meth in _PARAMETER_VIEWS:
            # nn.Sequential(a.to("cuda:0"), b.to("cuda:1")): its parameters are its items'.
            return ParamsOf(_container_module(recv.items), _PARAMETER_VIEWS[meth])
        if isinstance(recv, DictV) and recv.module and recv.items and meth in _PARAMETER_VIEWS:
            # nn.ModuleDict({"enc": a.to("cuda:0"), "dec": b.to("cuda:1")}): its values', by key.
            names = [f"[{k!r}]" for k in recv.items]
            return ParamsOf(_container_module(tuple(recv.items.values()), names), _PARAMETER_VIEWS[meth])
        if isinstance(recv, ParamsOf) and recv.shape == "mapping" and meth in ("items", "values"):
            return ParamsOf(recv.mod, "named" if meth == "items" else "params")
        if isinstance(recv, Obj) and recv.kind == "generator":
            return recv if meth in ("manual_seed", "seed") else UNK  # `torch.Generator().manual_seed(s)`: itself
        if isinstance(recv, Obj):
            if recv.cls is not None and recv.attrs is not None:
                m = recv.cls.method(meth)
                if m is not None and not st.in_init and places_parts(m):
                    # model.place(...): the parts placed as its body says, on a copy (placing.py)
                    placed, returns_self = placed_view(self.interp, recv, m, args, kwargs, st)
                    self.interp.moves.rebind(
                        node.func.value if isinstance(node.func, cst.Attribute) else None, placed, st
                    )
                    return placed if returns_self else Const(None)
                if m is not None:
                    return self.call_function(m, recv, args, kwargs, st, node, helper=meth != "forward")
                if meth in ("register_buffer", "register_parameter") and len(args) >= 2 and isinstance(args[0], Const):
                    v = args[1]
                    if isinstance(v, Obj):
                        v = v.with_(
                            kind="buffer" if meth == "register_buffer" else "param",
                            invariant=True,
                            label=f"self.{args[0].value}",
                        )
                    name = str(args[0].value)
                    if st.in_init and recv is st.self_obj:
                        recv.attrs[name] = v
                    elif isinstance(v, Obj) and v.devs is not None:
                        # Registered after construction (a calibration step's statistics): the module holds it
                        # from then on, where it was made, on every path that reads it (one that reads it
                        # first fails). Registered on two devices by two paths: unknown.
                        had = recv.attrs.get(name)
                        if had is None or (isinstance(had, Obj) and had.devs == v.devs):
                            where = "on the CPU" if v.devs == one("cpu") else "where it was"
                            origin = f"registered {where} by register_buffer() after the module was built"
                            recv.attrs[name] = v.with_(origin=origin, at=node)
                        elif isinstance(had, Obj):
                            recv.attrs[name] = had.with_(devs=None)
                    return Const(None)
                if meth in T.DTYPE_METHODS or meth in T.MODULE_SELF_METHODS:
                    return recv
                return UNK
            extra = recv.extra or {}
            if (
                recv.cls is None
                and extra.get("summarized")
                and extra.get("module")
                and meth != "forward"
                and not extra.get("moved")
                and not any(k.startswith(f"{id(recv)}.") for k in st.env)  # not changed since it was built
            ):
                # A method of a class of another file (`trainer.train_epoch(loader, devices[0])`): callers.py
                func = f"{extra['summarized']}.{meth}"
                note_call(self.interp, extra["module"], func, args, kwargs, node, recv)
            if recv.kind in ("module",):
                if meth == "forward":
                    return self.module_call(recv, args, kwargs, st, node)
                if meth in T.DTYPE_METHODS or meth in T.MODULE_SELF_METHODS:
                    return recv
                return UNK
            if recv.kind == "any" and meth in T.MODULE_SELF_METHODS:
                return recv  # a module of unknown class, as it was
            if meth == "numpy" and not args and not kwargs and recv.devs == one("cpu"):
                return recv  # the same host memory as an array: no work (torch.from_numpy gives it back)
            if meth in T.SELF_RETURNING_TENSOR_METHODS and recv.kind in ("tensor", "param", "buffer"):
                used(recv, *args)
                return recv
            if meth == "backward" and recv.kind in ("tensor", "param", "buffer"):
                self._check_gradient(node, recv, args[0] if args else kwargs.get("gradient"), st)
            if meth in T.NON_TENSOR_METHODS:
                return UNK
            if meth in T.DTYPE_METHODS:
                return recv
            shape_only = meth in T.SHAPE_ONLY_METHODS and not any(isinstance(a, Obj) for a in (*args, *kwargs.values()))
            if not shape_only:
                used(recv, *args)
            if meth.startswith("new_"):
                devs = as_device(kwargs["device"]) if "device" in kwargs else recv.devs
                return Obj(
                    "tensor", devs, origin=f"created by .{meth}() on {recv.label or 'a tensor'}'s device", at=node
                )
            if meth in T.SAME_DEVICE_METHODS or (recv.kind == "distribution" and meth in T.DISTRIBUTION_VALUE_METHODS):
                exprs = self.interp.arg_nodes
                reported = False
                for i, a in enumerate(list(args) + list(kwargs.values())):
                    reported |= self.interp.exprs.check_operand(
                        node,
                        a,
                        recv.devs,
                        st,
                        what=recv.label or ("the distribution" if recv.kind == "distribution" else "the tensor"),
                        arg_index=i,
                        op=f".{meth}()",
                        expr=exprs[i] if i < len(exprs) else None,
                        other=recv,
                    )
                if reported and made_on_cpu_by_default(recv):
                    # The tensor itself is off its device (MP001 says so): what is computed from it is this
                    # finding's. An argument off the tensor's device leaves the result where it belongs.
                    return FAILED
            inv = recv.invariant and (
                # constants, or tensors that never change either (`centers.expand_as(wh)`, both made
                # from constants): the result is the same data on every call
                all(isinstance(a, (Const, DtypeV)) or (isinstance(a, Obj) and a.invariant) for a in args)
                or (meth in T.LAYOUT_METHODS and not any(isinstance(a, Obj) for a in (*args, *kwargs.values())))
            )
            lineage = OFF_CHAIN if T.leaves_chain(meth, len(args), kwargs) else recv.lineage
            worked = recv.worked if shape_only else True
            hop = recv.hop
            for a in (*args, *kwargs.values()):
                if isinstance(a, Obj) and a.kind != "module":
                    self.interp.moves.merge(recv, a, node)  # `out.index_add_(0, rows, y)`
                    if lineage is None and a.lineage not in (None, OFF_CHAIN):
                        # A buffer of no lineage (`out = torch.zeros_like(x)`) gathering an activation's
                        # rows carries that activation on, as `out + y` does: the residual `x + out` after
                        # experts on other GPUs then meets what came back (a branch, Moves.merge).
                        lineage, hop = a.lineage, a.hop
                    hop = max(hop, a.hop) if a.lineage == lineage else hop
            full_reduction = meth in T.FULL_REDUCTIONS and not (args or kwargs)
            if (
                full_reduction
                and recv.reducible_move is not None
                and recv.lineage != OFF_CHAIN
                and self._reduced_alone(recv.reducible_move[0], node)
            ):
                # A tensor moved and then only reduced to one value (`g.to(d).isfinite().all()`, or through a
                # helper: `entropy(w.to(d))`, a weight's `p.data.to(d).max()`). Not a mask, a metric or a loss
                # (`(pred == y).cpu().sum()`: a few bytes); a constant moved and reduced on every call is MP011's
                # (it knows its size), which MP016's rule leaves to it.
                moved, src, made_at = recv.reducible_move
                self.interp.recorder.record(
                    OversizedMove(node=moved, mode=st.mode, src=src, dst=recv.devs, reduction=node, made_at=made_at),
                    key=(src, recv.devs),
                )
            # Computed from that move's data alone (constants beside it): a full reduction later could come first.
            reducible = (
                recv.reducible_move
                if not full_reduction
                and all(
                    isinstance(a, (Const, DtypeV)) or (isinstance(a, Obj) and a.reducible_move is recv.reducible_move)
                    for a in (*args, *kwargs.values())
                )
                else None
            )
            # (kept through a cast: `F.one_hot(ids, n).float()` is no smaller than the one-hot rows it casts)
            keeps_size = meth in T.LAYOUT_METHODS or meth in T.DTYPE_METHODS
            enlarged = node if meth in T.ENLARGING_METHODS else recv.enlarged_at if keeps_size else None
            # ids or a mask laid out again or repeated are still ids or a mask; other results are data of their own
            ints = meth in T.INDEX_METHODS or (
                recv.index_like and (meth in T.LAYOUT_METHODS or meth in T.ENLARGING_METHODS)
            )
            zero_dim = (
                recv.kind == "scalar"
                and meth in T.ZERO_DIM_KEEPING_METHODS
                and not any(isinstance(a, Obj) for a in (*args, *kwargs.values()))
            ) or (
                # one value of a host tensor (`sd = e[:n].std()`, a target's statistics): a 0-dim CPU tensor, which
                # mixes with tensors on any GPU (`pred * sd + mu`)
                recv.devs == one("cpu") and full_reduction and recv.kind in ("tensor", "scalar")
            )
            out = recv.with_(
                label="",
                kind="scalar" if zero_dim else "tensor",
                worked=worked,
                invariant=inv,
                lineage=lineage,
                hop=hop,
                enlarged_at=enlarged,
                index_like=ints,
                reducible_move=reducible,
                made_from_move=reducible is not None,
                may_be_0d=recv.may_be_0d or T.may_give_0d(meth, len(args), kwargs),
                row_statistic=T.reduces_along_a_dim(meth, bool(args) and _an_int(args[0]), kwargs)
                or (recv.row_statistic and not any(isinstance(a, Obj) and not a.row_statistic for a in args)),
            )
            if T.gives_values_and_indices(meth, bool(args) and _an_int(args[0]), kwargs):
                # `gate, choice = probs.max(-1)`: the indices are ids where the values are, no activation
                # (computed from what `out` was computed from: `reducible_move`)
                ids = out.with_(
                    index_like=True, lineage=OFF_CHAIN, reducible_move=reducible, made_from_move=reducible is not None
                )
                return SeqV((out, ids), kind="tuple")
            return out
        if isinstance(recv, SeqV):
            if meth == "append" and args:
                self.grow(recv, (args[0],), UNK)
                return Const(None)
            if meth == "extend" and args and isinstance(args[0], SeqV):
                self.grow(recv, args[0].items, args[0].elem)
                return Const(None)
            if meth == "pop" and recv.kind == "list" and not kwargs:
                return self.pop(recv, args[0] if args else Const(-1))
            if meth in ("to", "cuda"):
                return self.interp.moves.move(recv, meth, args, kwargs, node, st)
            if recv.module and meth in T.MODULE_SELF_METHODS:
                return recv  # nn.Sequential(...).eval()
            if meth in ("index", "count") and len(args) == 1 and not kwargs:
                return _position_or_count(recv, meth, args[0])  # `ROLES.index(role)`: a stage's GPU by its role
            return UNK
        if isinstance(recv, DictV):
            if recv.module and meth in T.MODULE_SELF_METHODS:
                return recv  # nn.ModuleDict(...).eval()
            if recv.ini and (read := ini_text.method(recv, meth, args)) is not None:
                return read  # `cp.read_string(INI)`, `cp.get("placement", "encoder")`, `section.getint("gpus")`
            if meth in ("values", "items", "keys"):
                map_lookups.note_read_whole(self.interp, recv, node, st)
            if meth == "values":
                return SeqV(tuple(recv.items.values()))
            if meth == "items":
                return SeqV(tuple(SeqV((Const(k), v), kind="tuple") for k, v in recv.items.items()))
            if meth == "keys":
                return SeqV(tuple(Const(k) for k in recv.items))
            if meth == "get" and args:
                default = args[1] if len(args) > 1 else Const(None)
                map_lookups.note(self.interp, recv, args[0], node, st, default)
                if isinstance(args[0], Const):
                    return recv.items.get(args[0].value, default)
            return UNK
        if isinstance(recv, ParserV):
            return command_line.method(recv, meth, args, kwargs, node, self._lambda_of_one(st))
        if isinstance(recv, SubparsersV):
            return add_command(recv, args, kwargs) if meth == "add_parser" else UNK
        if isinstance(recv, SuperV):
            # super().__init__(...) / super().forward(...) of a base class defined in this file.
            here = self.interp.stack[-1].cls if self.interp.stack else None
            if here is not None and st.self_obj is not None:
                for base in here.local_bases:
                    m = base.method(meth)
                    if m is not None:
                        return self.call_function(m, st.self_obj, args, kwargs, st, node)
                if meth == "__init__" and optimizers.is_optimizer_class(here, self.interp.exprs.qname):
                    optimizers.init_param_groups(st.self_obj, args, kwargs)
            return Const(None) if meth == "__init__" else UNK
        if isinstance(recv, Const) and isinstance(recv.value, str):
            return _string_method(recv.value, meth, args, kwargs)
        if isinstance(recv, NamePrefix) and meth == "startswith" and len(args) == 1 and not kwargs:
            return recv.startswith(args[0])
        return UNK


def _an_int(v: Val) -> bool:
    return isinstance(v, Const) and type(v.value) is int


def _assigns(kwargs: dict[str, Val]) -> bool:
    """load_state_dict(..., assign=True)."""
    a = kwargs.get("assign")
    return isinstance(a, Const) and a.value is True


def _moves_between_its_parts(fwd: FuncInfo) -> bool:
    """Does the forward pass a value it moves straight to a call beside other arguments (`self.margin(emb.to(
    self.dev1), labels)`, `length_regulate(h.to(dec_dev), durations)`)? Then it hops what that call needs."""
    for n in walk(fwd.node):
        if isinstance(n, cst.Call) and len(n.args) > 1 and any(plain_device_move(a.value) for a in n.args):
            return True
    return False


def _drops_a_move_of_its_input(fwd: FuncInfo) -> bool:
    """Does the forward move its first argument in a statement that drops the result (`x.to(self.device)`
    alone on its line)? Then its input is left where it came, and the finding belongs to that line
    (MP001's DiscardedMove, recorded as the forward runs), not to the call of the module."""
    params = [p.name.value for p in fwd.node.params.params]
    first = params[1] if len(params) > 1 and params[0] == "self" else params[0] if params else None
    if first is None:
        return False
    for n in walk(fwd.node.body):
        if isinstance(n, cst.Expr) and isinstance(n.value, cst.Call) and isinstance(n.value.func, cst.Attribute):
            call = n.value
            assert isinstance(call.func, cst.Attribute)
            receiver = call.func.value
            if call.func.attr.value in ("to", "cuda") and isinstance(receiver, cst.Name) and receiver.value == first:
                return True
    return False


# str methods whose result is computed here when every argument is a known constant:
# `args.devices.split(",")` (a command line's default), `name.strip()`, `dev.startswith("cuda")`,
# `os.environ.get("MP_SPLIT", "cuda:0>cuda:1").partition(">")`, `"cuda:{}".format(i)`.
_STRING_METHODS = frozenset(
    {
        "split",
        "rsplit",
        "partition",
        "rpartition",
        "strip",
        "lstrip",
        "rstrip",
        "removeprefix",
        "removesuffix",
        "lower",
        "upper",
        "replace",
        "startswith",
        "endswith",
        "join",
        "format",
        "splitlines",
        "casefold",
    }
)
# Keyword arguments these take as Python does (`line.split(":", maxsplit=1)`); `format` takes any.
_STRING_KEYWORDS = frozenset({"sep", "maxsplit", "keepends", "count"})
# A text cut into more pieces than this is data, not settings: not followed.
_MAX_PIECES = 256


def _string_method(text: str, meth: str, args: list[Val], kwargs: dict[str, Val]) -> Val:
    if meth not in _STRING_METHODS or (meth != "format" and not set(kwargs) <= _STRING_KEYWORDS):
        return UNK
    if meth == "join":
        items = args[0].items if len(args) == 1 and isinstance(args[0], SeqV) else None
        if items is None or not all(isinstance(i, Const) and isinstance(i.value, str) for i in items):
            return UNK
        return Const(text.join(cast(Const, i).value for i in items))
    given = [*args, *kwargs.values()]
    if not all(isinstance(a, Const) and isinstance(a.value, (str, int, type(None))) for a in given):
        return UNK
    try:
        out = getattr(text, meth)(
            *(cast(Const, a).value for a in args), **{k: cast(Const, v).value for k, v in kwargs.items()}
        )
    except (TypeError, ValueError, IndexError, KeyError):
        return UNK
    if isinstance(out, (list, tuple)):
        return SeqV(tuple(Const(x) for x in out)) if len(out) <= _MAX_PIECES else UNK
    return Const(out)


_PROBE_SERIALS = itertools.count()  # a probe run's own memo key (ids of freed dicts come back)


def _instances_given(info: FuncInfo, env: dict[str, Val], args: list[Val]) -> dict[str, int]:
    """The parameters bound to an instance of a class of this file passed positionally (by index):
    a helper may replace its parts (`model.fc2 = LoRALinear(model.fc2, dev)`), in place."""
    held = {}
    for name, _ in params_of(info.node):
        v = env.get(name)
        if isinstance(v, Obj) and v.cls is not None and v.attrs is not None:
            i = next((i for i, a in enumerate(args) if a is v), None)
            if i is not None:
                held[name] = i
    if held:  # (the walk of the body only where some instance was passed: most calls pass none)
        rebound = _rebound_names(info.node)
        held = {name: i for name, i in held.items() if name not in rebound}
    return held


_REBOUND = memo.node_table()


def _rebound_names(fn: cst.FunctionDef) -> frozenset[str]:
    """Names a function's body binds anew (`model = Net()`), not counting `model = model.to(d)` and the
    like (a method of the name itself: Module.to() returns the module it moved in place)."""
    got: frozenset[str] | None = memo.recall(_REBOUND, fn)
    if got is not None:
        return got
    names = set()
    for n in walk(fn.body):
        value = getattr(n, "value", None)
        for t in assigned(n):
            own = (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute)
                and isinstance(value.func.value, cst.Name)
                and isinstance(t, cst.Name)
                and value.func.value.value == t.value
            )
            if isinstance(t, cst.Name) and not own:
                names.add(t.value)
        if isinstance(n, (cst.For, cst.CompFor)) and isinstance(n.target, cst.Name):
            names.add(n.target.value)
    return memo.keep(_REBOUND, fn, frozenset(names))


def _changed_instances(held: dict[str, int], ends: list[dict[str, Val]]) -> tuple[tuple[int, Obj], ...]:
    """The instances a helper changed in place, as every path of its body left them: (argument index,
    the instance now). Where the paths disagree (`if cfg.lora: model.fc2 = ...`), it is left as given."""
    out = []
    for name, i in held.items():
        finals = {id(e.get(name)): e.get(name) for e in ends}
        if len(finals) != 1:
            continue
        (now,) = finals.values()
        if isinstance(now, Obj) and now.cls is not None:
            out.append((i, now))
    return tuple(out)


_SELF = -1  # the receiver, in a call's changed instances (memo_changed): `ema.load_state_dict(...)` set its attributes


def _keeps_what_it_sets(info: FuncInfo, self_val: Val | None, st: State) -> bool:
    """A method of a plain class of the file (no module: an EMA, an accumulator, a cache) called outside an
    __init__: what it assigns to `self` stays on the object for the caller's later calls."""
    return (
        isinstance(self_val, Obj)
        and self_val.cls is not None
        and self_val.attrs is not None
        and all(b in ("object", "builtins.object") for c in self_val.cls.lineage() for b in c.bases)
        and not st.in_init
        and info.name != "__init__"
    )


def _self_after(self_val: Val | None, ends: list[dict[str, Val]]) -> Obj | None:
    """The receiver as a method's every path left it: the attributes it assigned (`self.shadow = ...`, kept by
    the body as `<id>.shadow`), where all paths agree; None when it assigned none."""
    if not isinstance(self_val, Obj) or self_val.attrs is None or not ends:
        return None
    prefix = f"{id(self_val)}."
    names = {k for e in ends for k in e if k.startswith(prefix)}
    set_now: dict[str, Val] = {}
    for k in names:
        finals = {id(e.get(k)): e.get(k) for e in ends}
        (v, *rest) = finals.values()
        if rest or v is None:
            continue  # set on some paths only, or differently: left as it was
        set_now[k[len(prefix) :]] = v
    return self_val.with_(attrs={**self_val.attrs, **set_now}) if set_now else None


def _current_after(callee: State, caller: State) -> tuple[str | None, Any] | None:
    """The current device a call leaves its caller on, `(cur, setdev)`, when its body called set_device (or a
    helper that did): the one every path ended on, or, where its paths disagree, not known (`(None, node)`); None
    when it left the caller's as it found it."""
    ends = set(callee.exit_currents)
    if not ends or ends == {(caller.cur, caller.setdev)}:
        return None
    if len(ends) == 1:
        return next(iter(ends))
    return (None, next((s for _, s in ends if s is not None), caller.setdev))


def _leave_current(st: State, current: tuple[str | None, Any] | None) -> None:
    if current is not None:
        st.cur, st.setdev = current


def _rebind_changed(given: Val | None, now: Obj, st: State) -> None:
    """The caller's names for an instance its callee changed in place (Python passes the object, not a
    copy) hold it as it is now (its parameter was not bound anew there: _rebound_names)."""
    if now is given or not isinstance(given, Obj) or given.cls is not now.cls:
        return
    for name, v in st.env.items():
        if v is given:
            st.env[name] = now


def _at_top(st: State, globals_: dict[str, Val]) -> State:
    """A state that reads the module's names, as a decorator's expression does (it runs where the function is
    defined, at the top level or in a class body)."""
    return State(dict(globals_), st.cur, st.setdev, st.mode, None, False, st.scope)


def _is_static(fn: cst.FunctionDef) -> bool:
    """Is `fn` decorated `@staticmethod` (it takes no `self`)?"""
    return any(dotted(d.decorator) in ("staticmethod", "builtins.staticmethod") for d in fn.decorators)


_MOVING = frozenset({"to", "cuda", "cpu", "_apply", "apply", "to_empty", "copy_", "share_memory"})


def _moves_only_its_tensors(fn: FuncInfo, inst: Obj) -> bool:
    """Does a module class's own `to()` / `cuda()` / `cpu()` leave its weights alone? Only where it holds
    weights, and its body calls nothing of Module's (no `super()`, no `nn.Module.to(self, ...)`), assigns no
    `.data`, and every move in it is of a plain tensor the instance holds (`self.cos.to(...)`, `self.cos` a
    tensor it made, no parameter, buffer or module). Anything else may move the weights: Module.to's meaning
    is kept then."""
    attrs = inst.attrs or {}
    if inst.cls is None or module_tree.is_instance(inst, "Module") is not True:
        return False  # a batch or a container class's own `to()`: not a module's, nothing of Module.to's to keep
    if not any(
        isinstance(a, Obj) and a.kind in ("module", "param") or isinstance(a, (SeqV, DictV)) and a.module
        for a in attrs.values()
    ):
        return False  # no weights to leave behind: what its body moves is all it holds (a rotary cache module)
    for n in walk(fn.node.body):
        if type(n) is cst.Call:
            func = n.func
            if type(func) is cst.Name and func.value == "super":
                return False
            if type(func) is not cst.Attribute or func.attr.value not in _MOVING:
                continue
            owner = func.value
            held = (
                attrs.get(owner.attr.value)
                if type(owner) is cst.Attribute and type(owner.value) is cst.Name and owner.value.value == "self"
                else None
            )
            if not (isinstance(held, Obj) and held.kind == "tensor"):
                return False  # `nn.Module.to(self, ...)`, `self.apply(...)`, a part or an argument moved
        elif any(type(t) is cst.Attribute and t.attr.value == "data" for t in assigned(n)):
            return False
    return True


def _recursion_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A call's memo key with the names of its symbolic arguments (value_key's ("s", name)) left out:
    `get(source.base)` inside `get(source)`, both unknown, is the same call a level deeper. Only whether
    a name says dtype is kept: that is what the model reads of one (`.to(self.dtype)` is a cast)."""

    def plain(k: Any) -> Any:
        if isinstance(k, tuple) and len(k) == 2 and k[0] == "s":
            return ("s", "dtype" in k[1].rsplit(".", 1)[-1].lower())
        return k

    fn, self_key, args, kwargs, *rest = key
    return (fn, self_key, tuple(plain(a) for a in args), tuple((k, plain(v)) for k, v in kwargs), *rest)


def _self_key(v: Val | None) -> Any:
    """What of `self` a method's run depends on: constructions of one class with the same
    arguments share their attributes (Instances.instantiate) and so one run."""
    if isinstance(v, Obj) and v.attrs is not None:
        return (id(v.attrs), v.devs, v.split)
    return id(v)


def _leaves_on_one_device(seq: SeqV) -> bool:
    """An nn.Sequential of known items, each a torch.nn layer (or one such nn.Sequential), whose layers
    with weights all sit on one known device."""
    devs: set[str] = set()

    def leaves(v: Val, d: int) -> bool:
        if isinstance(v, SeqV):
            return v.module and v.items is not None and d <= 3 and all(leaves(i, d + 1) for i in v.items)
        if not isinstance(v, Obj) or v.cls is not None or v.attrs is not None:
            return False
        if v.kind == "passthrough":
            return True
        there = single(v.devs) if v.kind in ("module", "any") and not v.split else None
        if there is None:
            return False
        devs.add(there)
        return True

    return leaves(seq, 0) and len(devs) == 1


def _left_on_host(mod: Obj, need: Devs) -> bool:
    """The first thing a module's forward meets its input with is on the CPU, while the module was
    moved whole to a GPU (moves.moved_instance): a plain tensor attribute that `Module.to()` left
    behind. The fault is that tensor, not the input: the forward runs on the input as it is and
    reports where they meet."""
    there = single(mod.devs)
    moved = bool((mod.extra or {}).get("moved_whole"))
    return moved and single(need) == "cpu" and there is not None and there != "cpu"


def _nth(exprs: ArgExprs, i: int) -> cst.BaseExpression | None:
    return exprs[i] if exprs is not None and i < len(exprs) else None


def _container_module(items: tuple[Val, ...], names: list[str] | None = None) -> Obj:
    """An nn.Sequential / ModuleList / ModuleDict of known items as one module whose attributes are its
    items (`[0]`, `[1]`, ... or `['enc']`), split over their devices when they sit on several: what
    ParamsOf needs to walk it."""
    keys = names if names is not None else [f"[{i}]" for i in range(len(items))]
    attrs: dict[str, Val] = dict(zip(keys, items))
    placed = [(key, single(item.devs)) for key, item in zip(keys, items) if isinstance(item, Obj)]
    known = [(attr, dev) for attr, dev in placed if dev is not None]
    devs = {dev for _, dev in known}
    split = tuple(known) if len(devs) >= 2 else None
    joined = next(iter(devs)) if len(devs) == 1 and len(known) == len(items) else None
    return Obj("module", one(joined) if joined else None, attrs=attrs, split=split, origin="an nn.Sequential")


# A module's methods that walk its parameters, and how they give them (values.ParamsOf.shape).
_MODULE_WALKS = frozenset({"modules", "named_modules", "children", "named_children"})
_PARAMETER_VIEWS = {"parameters": "params", "named_parameters": "named", "state_dict": "mapping"}


def _object_setattr(node: cst.Call) -> tuple[str, cst.BaseExpression] | None:
    """(name, value expression) for `object.__setattr__(self, "name", value)`, else None."""
    f = node.func
    if not (
        isinstance(f, cst.Attribute)
        and f.attr.value == "__setattr__"
        and isinstance(f.value, cst.Name)
        and f.value.value == "object"
        and len(node.args) == 3
        and isinstance(node.args[0].value, cst.Name)
        and node.args[0].value.value == "self"
        and isinstance(node.args[1].value, cst.SimpleString)
    ):
        return None
    name = node.args[1].value.evaluated_value
    return (name, node.args[2].value) if isinstance(name, str) else None


def _unlinked(v: Val) -> Val:
    """`v` without its lineage (Obj.lineage), for a probe run: its crossings there open lineages that are not reported."""
    if isinstance(v, Obj) and v.lineage not in (None, OFF_CHAIN):
        return v.with_(lineage=None, hop=0)
    return v


def _built_anew(interp: Any, v: Val, built: tuple[int, int], fresh: dict[int, int], depth: int = 0) -> Val:
    """`v` with every module object the memoised call built (an ident in `built`) made a new one, the same new
    one wherever the old one was held (`fresh`: old ident -> new). Objects it was given or found are kept."""
    if depth > 6:
        return v
    if isinstance(v, Obj):
        ident = v.ident
        if ident is not None and built[0] <= ident < built[1]:
            if ident not in fresh:
                fresh[ident] = interp.new_ident(interp.ident_names.get(ident, "module"))
            ident = fresh[ident]
        attrs = {k: _built_anew(interp, a, built, fresh, depth + 1) for k, a in v.attrs.items()} if v.attrs else None
        if ident == v.ident and (attrs is None or all(attrs[k] is a for k, a in v.attrs.items())):  # type: ignore[union-attr]
            return v
        return v.with_(ident=ident, attrs=attrs if attrs is not None else v.attrs)
    if isinstance(v, SeqV) and v.items is not None:
        items = tuple(_built_anew(interp, i, built, fresh, depth + 1) for i in v.items)
        if all(a is b for a, b in zip(items, v.items)):
            return v
        return SeqV(items, elem=v.elem, kind=v.kind, module=v.module, spans=v.spans, spans_by=v.spans_by, hooks=v.hooks)
    if isinstance(v, DictV):
        held = {k: _built_anew(interp, a, built, fresh, depth + 1) for k, a in v.items.items()}
        if all(held[k] is a for k, a in v.items.items()):
            return v
        return DictV(held, module=v.module, namespace=v.namespace)
    return v


def _relinked(result: Val, first: tuple[tuple[int | None, ...], bool], args: list[Val]) -> Val:
    """A memoised result given to a later call with arguments of the same devices: the lineage it
    carries (Obj.lineage) is the one of the first call's argument it came from; it now continues
    the same argument of this call, or none (MP006 must not chain two activations). `first`: the
    first call's arguments' lineages, and whether its body took steps of them (crossings, a merge
    with the encoder's memory): those are not replayed here, so then the result starts afresh."""
    lineages, stepped = first
    if not isinstance(result, Obj) or result.lineage in (None, OFF_CHAIN):
        return result
    lead = args[0] if args else None
    if lineages[:1] == (result.lineage,) and isinstance(lead, Obj):
        # It came from the first argument, the activation (another argument's, a cross-attention
        # block's memory, may have met it inside: then it is no longer known whose it goes on with).
        if lead.lineage == result.lineage:
            return result.with_(hop=max(result.hop, lead.hop))
        if not stepped and lead.lineage != OFF_CHAIN:
            return result.with_(lineage=lead.lineage, hop=lead.hop)
    return result.with_(lineage=None, hop=0)


_FORWARD_HOOKS = frozenset({"register_forward_pre_hook", "register_forward_hook"})


def _same_layers(seq: SeqV, st: State) -> list[SeqV]:
    """The other nn.Sequential values, held by the instances the path's names hold (three levels deep at
    most), whose layers are `seq`'s own objects: copies of one container."""
    found: list[SeqV] = []
    if not seq.items:
        return found

    def visit(v: Val, depth: int) -> None:
        if depth > 3:
            return
        if isinstance(v, SeqV):
            if v is not seq and v.module and v.items is not None and len(v.items) == len(seq.items or ()):
                if all(a is b for a, b in zip(v.items, seq.items or ())):
                    found.append(v)
                    return
            for item in v.items or ():
                visit(item, depth + 1)
        elif isinstance(v, DictV) and v.module:
            for item in v.items.values():
                visit(item, depth + 1)
        elif isinstance(v, Obj) and v.attrs is not None:
            for item in v.attrs.values():
                visit(item, depth + 1)

    for holder in list(st.env.values()):
        if isinstance(holder, Obj) and holder.attrs is not None:
            visit(holder, 0)
    return found


def _somewhere(v: Val) -> Val:
    """A tensor argument or result a hook may have moved: of unknown device."""
    if isinstance(v, Obj) and v.kind not in ("module", "scalar") and v.devs is not None:
        return v.with_(devs=None, origin="", at=None)
    return v


def _rnn_output(nn_class: str | None, out: Obj) -> Val:
    """What torch.nn's recurrent modules return, all on the module's device: an RNN's `(output, h_n)`,
    an LSTM's `(output, (h_n, c_n))`, an LSTM cell's `(h, c)`; a GRU or RNN cell's tensor. As tuples,
    so that the state handed back (`out, state = rnn(x, state)`) is one (`isinstance(state, tuple)`)."""
    state = {
        "LSTM": SeqV((out, out), kind="tuple"),
        "GRU": out,
        "RNN": out,
    }
    if nn_class in state:
        return SeqV((out, state[nn_class]), kind="tuple")
    if nn_class == "LSTMCell":
        return SeqV((out, out), kind="tuple")
    return out


def _plain_list_holder(owner: Obj, mod: Obj) -> cst.BaseExpression | None:
    """The value its class assigns to the attribute of `owner` that holds `mod` in a plain list (`[Block(c) for _
    in range(depth)]` of `self.blocks = ...`), else None."""
    attr = next(
        (
            a
            for a, v in (owner.attrs or {}).items()
            if isinstance(v, SeqV) and not v.module and v.items and any(one_object(i, mod) for i in v.items)
        ),
        None,
    )
    if attr is None or owner.cls is None:
        return None
    for n in walk(owner.cls.node):
        if isinstance(n, cst.Assign) and any(
            isinstance(t.target, cst.Attribute)
            and isinstance(t.target.value, cst.Name)
            and t.target.value.value == "self"
            and t.target.attr.value == attr
            for t in n.targets
        ):
            return n.value
    return None
