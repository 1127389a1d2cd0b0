"""Statements: paths through a block, each carrying its own `program.State`.

An `if` on `self.training` (or grad mode) keeps the eval and training paths
apart; other branches are joined. Loops over a few known items are unrolled;
others run twice, so that values that change per iteration settle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import libcst as cst

from mpcheck.devices import command_line, data_moves, device_loops, element_reads, shared_caches, torchapi, ways
from mpcheck.devices.events import (
    BuffersLeftBehind,
    DiscardedMove,
    DroppedTensorMove,
    LazyMove,
    PartReplacedOnHost,
    StatisticsReplaced,
    UnenteredDeviceContext,
)
from mpcheck.devices.gpucount import is_test_on_count
from mpcheck.devices.moves import forget_copies
from mpcheck.devices.names import dotted, import_bindings
from mpcheck.devices.not_a_device import DeviceContextV
from mpcheck.devices.program import (
    MAX_UNROLL,
    MAX_WORLDS,
    FuncInfo,
    Part,
    State,
    body_of,
    join_states,
    params_of,
)
from mpcheck.devices.unmoved import on_cpu, parts_moved_from_outside, reaches_parts_by_name
from mpcheck.devices.values import (
    OFF_CHAIN,
    TIED_WEIGHT,
    UNK,
    UNPLACED,
    WEIGHT_REPLACED,
    Const,
    Devs,
    DictV,
    FuncRef,
    Obj,
    SeqV,
    SymV,
    Val,
    as_device,
    both_cuda,
    decided,
    is_module,
    is_probe,
    iter_elem,
    iter_items,
    join_all,
    known_tensor,
    one,
    single,
    spans_of,
    with_part_replaced,
)
from mpcheck.devices.walk import children, loop_bound_names, walk

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.interp import Interp


class Statements(Part):
    def __init__(self, interp: Interp) -> None:
        super().__init__(interp)
        self._bindings: dict[int, dict[str, int]] = {}  # scope node (by id) -> _binding_counts
        self._env_placement: dict[str, int | str] | None = None  # command_line.environment_placement
        self.open_tests: list[cst.BaseExpression] = []  # the undecided `if` tests around the statement run now
        # The `if` tests around it that the model decided (`step % 10 == 0` in an unrolled loop): one path was taken,
        # but in the program the test still picks some passes only (element_reads' periodic logs).
        self.decided_tests: list[cst.BaseExpression] = []

    def under_split_test(self, st: State) -> bool:
        """Does the statement run now sit under an undecided `if` that asks whether the model is split
        (or after one whose body returns)? Then the author keeps split models out of a wrapper or a
        whole-model move (as transformers' Trainer does), even where the linter cannot tell which branch
        a split model takes: MP002 and MP007 say nothing there."""
        return any(asks_if_split(test, st.scope.bound_to) for test in self.open_tests)

    def run_body(self, info: FuncInfo, st: State) -> list[dict[str, Val]]:
        """Runs a function's body on one path, with the function on the call stack; a recursion too
        deep for Python ends the path. Returns the environments the body ends with (every path's,
        returned or fallen off its end; none after a recursion too deep)."""
        self.interp.stack.append(info)
        try:
            ends = self.exec_block(body_of(info.node), [st])
        except RecursionError:
            return []
        finally:
            self.interp.stack.pop()
        st.exit_currents.extend((s.cur, s.setdev) for s in ends)
        return [*st.exits, *(s.env for s in ends)]

    def exec_block(self, stmts: Iterable[cst.CSTNode], states: list[State]) -> list[State]:
        opened = len(self.open_tests)
        try:
            for stmt in stmts:
                if not states:
                    break
                states = self.exec_stmt(stmt, states)
                if isinstance(stmt, cst.If) and stmt.orelse is None and _leaves(stmt.body.body):
                    # `if model_parallel: return DDP(model)`: what follows runs where the test was false
                    self.open_tests.append(stmt.test)
        finally:
            del self.open_tests[opened:]
        return states

    def exec_stmt(self, stmt: cst.CSTNode, states: list[State]) -> list[State]:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                nxt = []
                for st in states:
                    if self.exec_small(small, st):
                        nxt.append(st)
                states = nxt
            return states
        if isinstance(stmt, cst.If):
            return self.exec_if(stmt, states)
        if isinstance(stmt, cst.For):
            return [self.exec_for(stmt, st) for st in states]
        if isinstance(stmt, cst.While):
            out = []
            for st in states:
                body = self.exec_block(stmt.body.body, [st.copy()])
                self.interp.second_pass += 1
                try:
                    body = self.exec_block(stmt.body.body, body) if body else body
                finally:
                    self.interp.second_pass -= 1
                out.append(join_states([st] + body) if body else st)
            return out
        if isinstance(stmt, cst.With):
            return [s for st in states for s in self.exec_with(stmt, st)]
        if isinstance(stmt, cst.Match):
            return [s for st in states for s in self.exec_match(stmt, st)]
        if isinstance(stmt, cst.Try):
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
                j = join_states(branches)
                if stmt.finalbody is not None:
                    out.extend(self.exec_block(stmt.finalbody.body.body, [j]))
                else:
                    out.append(j)
            return out
        if isinstance(stmt, cst.FunctionDef):
            for st in states:
                # A `def` inside a function sees that function's names (`def run(x): return blk(x)` in a loop
                # over blocks, handed to `checkpoint(run, h)`); at a module's top level they are the globals.
                closure = st.env if self.interp.stack else None
                defaults = (
                    {
                        name: self.interp.calls.default_param_value(name, default, closure)
                        for name, default in params_of(stmt)
                        if default is not None
                    }
                    if closure is not None
                    else None
                )
                info = FuncInfo(stmt, stmt.name.value, stmt.name.value, closure=closure, defaults=defaults)
                self.interp.nested_defs.append(info)
                st.env[stmt.name.value] = FuncRef(info)
            return states
        if isinstance(stmt, cst.ClassDef):
            return states
        return states

    def exec_small(self, s: cst.BaseSmallStatement, st: State) -> bool:
        """Returns False when the path ends (return/raise)."""
        if isinstance(s, cst.Assign):
            v = self.interp.exprs.ev(s.value, st)
            for tgt in s.targets:
                self.assign(tgt.target, v, st, s.value)
                if isinstance(tgt.target, cst.Name):
                    st.scope.bound_to[tgt.target.value] = s.value
            return True
        if isinstance(s, cst.Expr):
            lazy = self._lazy_moves(s.value, st)
            if lazy is not None:
                # `map(lambda m, d: m.to(d), stages, devices)` as a statement: Python 3's map is lazy, and its
                # result is dropped, so nothing runs and nothing moves (the model keeps it so).
                self.interp.recorder.record(LazyMove(node=s.value, mode=st.mode, how=lazy))
                return True
            kept = self._move_receiver(s.value, st)
            out = self.interp.exprs.ev(s.value, st)
            if isinstance(out, DeviceContextV) and out.node is s.value:
                # `torch.cuda.device(1)` alone: never entered, it selects nothing
                self.interp.recorder.record(UnenteredDeviceContext(node=s.value, mode=st.mode))
            if kept is not None:
                self.interp.recorder.record(
                    DiscardedMove(
                        node=s.value,
                        mode=st.mode,
                        value=kept,
                        name=dotted(s.value.func.value) or "",  # type: ignore[attr-defined]
                        target=out.devs if isinstance(out, Obj) else None,
                    )
                )
            return True
        if isinstance(s, cst.AnnAssign):
            if s.value is not None:
                self.assign(s.target, self.interp.exprs.ev(s.value, st), st, s.value)
                if isinstance(s.target, cst.Name):
                    st.scope.bound_to[s.target.value] = s.value
            return True
        if isinstance(s, cst.AugAssign):
            left = self.interp.exprs.ev(s.target, st)
            right = self.interp.exprs.ev(s.value, st)
            if (
                isinstance(left, SeqV)
                and left.kind == "list"
                and isinstance(right, SeqV)
                and isinstance(s.operator, cst.AddAssign)
            ):
                # `layers += [conv, relu]`: a list grows in place, as extend() does
                self.interp.calls.grow(left, right.items, right.elem)
                return True
            self.interp.exprs.binop(s, left, right, st)
            return True
        if isinstance(s, cst.Return):
            st.returns.append(self.interp.exprs.ev(s.value, st) if s.value is not None else Const(None))
            st.exits.append(st.env)
            st.exit_currents.append((st.cur, st.setdev))
            return False
        if isinstance(s, cst.Raise):
            return False
        if isinstance(s, cst.Assert) and is_test_on_count(s.test):
            return self.interp.gpus.on_assert(s, self.interp.exprs.ev(s.test, st))
        if isinstance(s, (cst.Import, cst.ImportFrom)):
            for local, target in import_bindings(s, self.interp.modname):
                st.env[local] = self.interp.imported(target)
            return True
        return True

    def _lazy_moves(self, value: cst.BaseExpression, st: State) -> str | None:
        """'map' / 'filter' / 'a generator expression' when `value`, a statement of its own, is one of those
        lazy iterables whose items would move something (`.to(`, `.cuda(`, `.cpu(` in its function or its
        element); else None."""
        if isinstance(value, cst.GeneratorExp):
            how, body = "a generator expression", value.elt
        elif isinstance(value, cst.Call) and self.interp.exprs.qname(value.func) in ("map", "filter") and value.args:
            how, body = f"`{self.interp.exprs.qname(value.func)}()`", value.args[0].value
            if isinstance(body, cst.Lambda):
                body = body.body
            elif not (isinstance(body, cst.Attribute) and body.attr.value in _TENSOR_MOVES):
                return None  # a named function: what it does is not read here
        else:
            return None
        if isinstance(body, cst.Attribute):
            return how  # map(nn.Module.cuda, stages)
        moves = any(
            isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in _TENSOR_MOVES
            for n in walk(body)
        )
        return how if moves else None

    def _move_receiver(self, value: cst.BaseExpression, st: State) -> Obj | None:
        """The tensor `value` moves when it is `x.to(...)` / `x.cuda()` / `x.cpu()` of a name or an
        attribute (`self.mask`) certainly holding a tensor (not a module, whose .to() works in place, nor
        a batch object of unknown type, whose .to() may too); else None."""
        if not (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in _TENSOR_MOVES
            and isinstance(value.func.value, (cst.Name, cst.Attribute))
            and dotted(value.func.value) is not None
        ):
            return None
        v = self.interp.exprs.ev(value.func.value, st)
        if isinstance(v, Obj) and not v.opaque and v.kind in ("tensor", "param", "buffer") and not is_probe(v.devs):
            return v
        return None

    def exec_match(self, stmt: cst.Match, st: State) -> list[State]:
        """`match role:` with `case "encoder" | "embedding":` arms: a subject the model knows, against literal
        patterns, runs the one arm it matches; otherwise every arm may run (joined, with the way past them all
        when no arm is a catch-all)."""
        subject = self.interp.exprs.ev(stmt.subject, st)
        arms: list[State] = []
        for case in stmt.cases:
            hit = _matches(case.pattern, subject, lambda e: self.interp.exprs.ev(e, st))
            if hit is False:
                continue
            arm = st.copy() if hit is None or case.guard is not None else st
            name = _captured(case.pattern)
            if name is not None:
                arm.env[name] = subject
            arms.extend(self.exec_block(case.body.body, [arm]))
            if hit is True and case.guard is None:
                return [join_states(arms)] if len(arms) > 1 else arms
        arms.append(st)  # no arm is sure to match: the statement may do nothing
        return [join_states(arms)] if len(arms) > 1 else arms

    def exec_if(self, stmt: cst.If, states: list[State]) -> list[State]:
        out: list[State] = []
        plain_mode = _mode_test(stmt.test)
        for st in states:
            mode = plain_mode or self._mode_test_with_true(stmt.test, st)
            t = self.interp.exprs.ev(stmt.test, st)
            if decided(t) and not mode:
                # A test the model can decide (i == 4 in an unrolled loop, `if device:` with device=None): one path.
                truth = bool(cast(Const, t).value)
                self.interp.gpus.on_decided_if(stmt, truth)
                self.interp.gpus.on_decided(stmt.test, truth)
                self.decided_tests.append(stmt.test)
                try:
                    if truth:
                        out.extend(self.exec_block(stmt.body.body, [st]))
                    elif stmt.orelse is None:
                        out.append(st)
                    elif isinstance(stmt.orelse, cst.If):
                        out.extend(self.exec_if(stmt.orelse, [st]))
                    else:
                        out.extend(self.exec_block(stmt.orelse.body.body, [st]))
                finally:
                    self.decided_tests.pop()
                continue
            outer = frozenset(id(t) for t in self.open_tests)
            self.open_tests.append(stmt.test)
            try:
                # A test the model cannot decide may guard an index (not the script's `__name__` test).
                with self.interp.gpus.guarded(not mode and not _script_test(stmt.test)):
                    then = self.exec_block(stmt.body.body, [self._with_mode(st.copy(), mode, True)])
                    if stmt.orelse is None:
                        other = [self._with_mode(st.copy(), mode, False)]
                    elif isinstance(stmt.orelse, cst.If):
                        other = self.exec_if(stmt.orelse, [self._with_mode(st.copy(), mode, False)])
                    else:
                        other = self.exec_block(stmt.orelse.body.body, [self._with_mode(st.copy(), mode, False)])
            finally:
                self.open_tests.pop()
            branches = then + other
            if not branches:
                continue
            if mode:
                out.extend(branches)  # eval and training paths are kept apart
            else:
                joined = join_states(branches)
                if then and other:
                    ways.note_ways(joined, then, other, stmt.test, outer, st.env)
                out.append(joined)
        if len(out) > MAX_WORLDS:
            out = [join_states(out)]
        return out

    def _mode_test_with_true(self, test: cst.BaseExpression, st: State) -> tuple[str, str] | None:
        """`self.training and self.time_mask > 0` where the other side is certainly true here (a setting of the
        instance): the paths split as for `self.training` alone."""
        if not (isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And)):
            return None
        for mode_side, other in ((test.left, test.right), (test.right, test.left)):
            mode = _mode_test(mode_side)
            if mode is not None:
                t = self.interp.exprs.ev(other, st)
                return mode if decided(t) and bool(cast(Const, t).value) else None
        return None

    @staticmethod
    def _with_mode(st: State, mode: tuple[str, str] | None, taken: bool) -> State:
        if mode:
            st.mode = mode[0] if taken else mode[1]
        return st

    def exec_for(self, stmt: cst.For, st: State) -> State:
        outer = {id(v) for v in st.env.values() if isinstance(v, Obj)}
        if isinstance(st.self_obj, Obj) and st.self_obj.attrs:
            outer |= {id(v) for v in st.self_obj.attrs.values()}
        # The iterable is evaluated once, before the first pass (`for q in queries.to(dev):` copies once).
        it = self.interp.exprs.ev(stmt.iter, st)
        self.interp.loop_outer.append((outer, loop_bound_names(stmt), len(self.interp.stack)))
        try:
            end = self._exec_for(stmt, st, it)
        finally:
            self.interp.loop_outer.pop()
        loop = data_moves.data_move_loop(stmt)
        if loop is not None:
            self._moved_by_data(loop, end)
        for call in data_moves.dropped_moves(stmt):  # MP018: `p.data.to(d)` alone moves nothing
            var = dotted(call.func.value) or ""  # type: ignore[attr-defined]
            self.interp.recorder.record(DroppedTensorMove(node=call, mode=st.mode, loop_var=var.split(".")[0]))
        device_loops.note_device_appends(self.interp, stmt)  # MP017's list of one device
        device_loops.note_late_bound_hooks(self.interp, stmt)  # MP017's hooks that all read the last device
        return end

    def _moved_by_data(self, loop: data_moves.DataMoveLoop, end: State) -> None:
        """`for p in model.parameters(): p.data = p.data.to(d)` moved `model` (devices/data_moves.py)."""
        owner = self.interp.exprs.ev(loop.owner, end)
        if not is_module(owner):
            return
        meth = loop.move.func.attr.value if isinstance(loop.move.func, cst.Attribute) else "to"
        args = [self.interp.exprs.ev(a.value, end) for a in loop.move.args if a.keyword is None]
        kwargs = {a.keyword.value: self.interp.exprs.ev(a.value, end) for a in loop.move.args if a.keyword}
        if "buffers" not in loop.kinds and data_moves.holds_buffers(owner) is not False:
            # Its parameters move, its buffers may stay: where the module is is not known, and a BatchNorm's
            # statistics certainly stay (MP001).
            devs, is_device = self.interp.moves.move_target(meth, args, kwargs, loop.move, end)
            part = data_moves.buffered_part(owner)
            if part is not None and is_device:
                self._note_buffers_left(loop, part, devs, end)
            meth, args, kwargs = "to", [UNK], {}
        self.interp.moves.move(owner, meth, args, kwargs, loop.move, end, recv_expr=loop.owner)

    def _note_buffers_left(self, loop: data_moves.DataMoveLoop, part: Obj, devs: Devs, st: State) -> None:
        """The loop moved the parameters of a module to `devs`, not the buffers of its BatchNorm `part`."""
        # A module built without a device (and not placed since) has its buffers on the CPU.
        left = part.devs if part.devs is not None else one("cpu") if part.origin == UNPLACED else None
        if single(devs) is not None and single(left) is not None and devs != left:
            self.interp.recorder.record(
                BuffersLeftBehind(node=loop.move, mode=st.mode, module=part, owner=loop.owner, devs=devs, left=left)
            )

    def _note_statistics_replaced(self, target: cst.Attribute, base: Val, v: Val, st: State) -> None:
        """`bn.running_mean = torch.zeros(n)`: a BatchNorm on a GPU given running statistics on another device."""
        if not (isinstance(base, Obj) and base.kind == "module" and base.nn_class in data_moves.BUFFERED_NN):
            return
        there, given = single(base.devs), single(v.devs) if isinstance(v, Obj) and v.kind == "tensor" else None
        if there is None or given is None or not there.startswith("cuda:") or given == there:
            return
        if given.startswith("sym:") or there.startswith("sym:"):
            return
        assert isinstance(v, Obj)
        self.interp.recorder.record(StatisticsReplaced(node=target, mode=st.mode, module=base, value=v))

    def _exec_for(self, stmt: cst.For, st: State, it: Val) -> State:
        # MP020: `for p in model.parameters():` reading each on the host (before the unroll over a split's devices)
        per_parameter = element_reads.note_per_parameter(self.interp, stmt.target, stmt.iter, stmt.body, stmt, st)
        items = iter_items(it)
        spans = spans_of(it) if items is None else None
        if spans is not None:
            # Over the parameters of a split model: the body runs for a parameter on each device.
            items = spans[0]
        if items is not None and MAX_UNROLL < len(items) <= _MAX_FILTERED:
            kept = self._passing_filter(stmt, items, st)
            items = list(kept) if kept is not None else None
        if items is not None and len(items) <= MAX_UNROLL:
            spread = _spread_modules(items) - self.interp.spread_modules
            self.interp.spread_modules |= spread
            ignored = device_loops.over_devices(stmt, items, st)
            built_from = len(self.interp.ident_names) + 1
            try:
                return self._unroll(stmt, items, st)
            finally:
                self.interp.spread_modules -= spread
                if ignored is not None:
                    device_loops.note(self.interp, stmt, ignored, built_from, st)
        elem = iter_elem(it, stmt.target.value if isinstance(stmt.target, cst.Name) else None, stmt.iter)
        if not per_parameter:
            element_reads.note_loop(self.interp, stmt.target, it, stmt.iter, stmt.body, stmt, st)  # MP020
        before = st.copy()
        body = st.copy()
        self.assign(stmt.target, elem, body, None)
        self.interp.in_unknown_loop += 1
        joined = len(self.interp.loop_outer) - 1
        self.interp.joined_loops.add(joined)
        rows = element_reads.indexed_rows(stmt.target, stmt.iter) or element_reads.enumerated_rows(stmt)
        if rows is not None:
            self.interp.row_loops.append(rows)
        try:
            first = self.exec_block(stmt.body.body, [body])
            if first:
                again = join_states(first)
                self.assign(stmt.target, elem, again, None)
                # The second pass only lets values that change per iteration settle; it
                # records no transfer lineage (MP006 counts each crossing once).
                self.interp.second_pass += 1
                try:
                    second = self.exec_block(stmt.body.body, [again])
                finally:
                    self.interp.second_pass -= 1
                return join_states([before] + first + second)
        finally:
            self.interp.in_unknown_loop -= 1
            self.interp.joined_loops.discard(joined)
            if rows is not None:
                self.interp.row_loops.pop()
        return before

    def _passing_filter(self, stmt: cst.For, items: Sequence[Val], st: State) -> Sequence[Val] | None:
        """The items a loop whose whole body is one `if` (no `else`) does anything for: `for name, m in
        model.named_modules(): if name in device_map:` over a model of more modules than a loop unrolls. Items
        whose test is certainly false are left out (their pass does nothing); None when the body is not such
        a filter or its test may do more than read."""
        body = stmt.body.body
        if stmt.orelse is not None or len(body) != 1 or not isinstance(body[0], cst.If) or body[0].orelse:
            return None
        test = body[0].test
        if not _reads_only(test):
            return None
        kept = []
        for item in items:
            trial = st.copy()
            self.assign(stmt.target, item, trial, None)
            verdict = self.interp.exprs.ev(test, trial)
            if not (isinstance(verdict, Const) and verdict.value is False):
                kept.append(item)
        return kept

    def _unroll(self, stmt: cst.For, items: Sequence[Val], st: State) -> State:
        """Runs the body once per known item, in order."""
        cur = [st]
        watch = device_loops.pick_watch(stmt.body, stmt.target, loop_bound_names(stmt))
        for item in items:
            nxt = []
            for s in cur:
                self.assign(stmt.target, item, s, None)
                nxt.extend(self.exec_block(stmt.body.body, [s]))
            if watch is not None:
                watch.after_pass(self.interp, nxt[0] if len(nxt) == 1 else None)
            cur = nxt if nxt else cur
            if len(cur) > MAX_WORLDS:
                cur = [join_states(cur)]
        end = join_states(cur) if len(cur) > 1 else cur[0]
        if watch is not None:
            watch.finish(self.interp, stmt)  # MP017: `devices[i // n]`, one device for every `i`
        if stmt.orelse is not None:
            end = join_states(self.exec_block(stmt.orelse.body.body, [end]) or [end])
        return end

    def exec_with(self, stmt: cst.With, st: State) -> list[State]:
        inner = st.copy()
        interp = self.interp
        default = (interp.default_device, interp.default_device_changed)  # restored on leaving the block
        for item in stmt.items:
            call = item.item
            q = self.interp.exprs.qname(call.func) if isinstance(call, cst.Call) else None
            if q in torchapi.NO_GRAD:
                inner.mode = "no_grad"
            elif q == "torch.device" and isinstance(call, cst.Call):
                # `with torch.device(x.device):` makes that device the default for factories without device=
                # while the block runs (a mode: in what it calls too). Not known: factories there are unknown.
                devs = as_device(self.interp.exprs.ev(call, st))
                dev = single(devs) if devs else None
                if dev is not None and not dev.startswith("sym:"):
                    interp.default_device = dev
                else:
                    interp.default_device_changed = True
                continue
            elif q in torchapi.DEVICE_CONTEXT and isinstance(call, cst.Call) and call.args:
                dv = self.interp.exprs.ev(call.args[0].value, st)
                devs = as_device(dv)
                inner.cur = single(devs) if devs else None
                inner.setdev = call
                self.interp.with_devices.add(id(call))
                v = dv
            elif q in torchapi.DEVICE_OF_CONTEXT and isinstance(call, cst.Call) and call.args:
                held = self.interp.exprs.ev(call.args[0].value, st)
                dev = single(held.devs) if isinstance(held, Obj) and held.devs else None
                if dev != "cpu":  # on the host it selects nothing
                    inner.cur = dev if dev is not None and dev.startswith("cuda:") else None
                    inner.setdev = call
                    self.interp.with_devices.add(id(call))
                v = held
            else:
                v = self.interp.exprs.ev(call, inner)
                if item.asname is not None:
                    self.assign(item.asname.name, UNK if not isinstance(v, Obj) else v, inner, None)
        try:
            after = self.exec_block(stmt.body.body, [inner])
        finally:
            interp.default_device, interp.default_device_changed = default
        out = []
        for a in after:
            # Leaving `with torch.cuda.device(...)` / `no_grad` restores the outer state.
            a.cur, a.setdev, a.mode = st.cur, st.setdev, st.mode
            out.append(a)
        return out

    # ------------------------------------------------------------ assignment

    def assign_attr(self, base: Val, name: str, v: Val, st: State, label: str | None) -> None:
        """`base.name = v`, or `setattr(base, "name", v)` with a known name."""
        if isinstance(v, Obj) and not v.label and v.kind not in ("module", "any", "loss", "passthrough"):
            v = v.with_(label=(label or name), paths=v.paths)
        if isinstance(base, Obj) and base.attrs is not None:
            if st.in_init and base is st.self_obj:
                base.attrs[name] = v
            else:
                st.env[f"{id(base)}.{name}"] = self._swapped_in(base, name, v)
        elif isinstance(base, Obj) and (base.extra or {}).get("summarized"):
            # An instance of a class of another file changed after it was built: its methods' runs with
            # the arguments it was built with (callers.py) would not be its state; Calls.method_call asks.
            st.env[f"{id(base)}.{name}"] = v

    def replace_part(self, holder: cst.BaseExpression, base: Val, name: str, v: Val, st: State) -> bool:
        """`holder.name = v` (or `setattr(holder, "name", v)`) outside the class of `base`, the value `holder`
        reads: the instance holds that part from now on, and its forward runs with it. `model.proj =
        LoRALinear(model.proj)` (an adapter added by a helper) rebinds the name; `model.embed.pos = ...` rebinds
        the holders up to the name (Moves.rebind); a part reached another way (`for m in model.modules():
        setattr(m, name, LoRALinear(child))`) is replaced where the instances the function's names hold hold it
        (Moves.rebind_holders). False where `base` is not an instance whose parts are known."""
        if base is st.self_obj or (
            isinstance(holder, (cst.Attribute, cst.Subscript)) and _rooted_at(holder, st.self_obj or UNK, st)
        ):
            return False  # a part of self, set by one of its own methods: the overlay of assign_attr
        replaced = with_part_replaced(base, name, self._swapped_in(base, name, v))
        if replaced is None:
            return False
        if isinstance(holder, cst.Name):
            st.env[holder.value] = replaced
        elif isinstance(holder, cst.Attribute):
            self.interp.moves.rebind(holder, replaced, st)
        if not isinstance(holder, cst.Attribute):
            self.interp.moves.rebind_holders(base, replaced, st)
        return True

    def _note_part_replaced_on_host(
        self, target: cst.Attribute, base: Val, v: Val, st: State, value_node: cst.BaseExpression | None
    ) -> None:
        """MP030: a part of a split model, on a GPU, replaced after the split by a module built without a device
        (a new classifier head): _swapped_in leaves it on the CPU."""
        if (st.in_init and base is st.self_obj) or not (isinstance(base, Obj) and base.split):
            return
        if not (isinstance(v, Obj) and v.kind == "module"):
            return
        new = self._swapped_in(base, target.attr.value, v)
        if new is v or not (isinstance(new, Obj) and new.devs == one("cpu")):
            return
        old = self.interp.exprs.ev(target, st)
        old_dev = single(old.devs) if isinstance(old, Obj) and old.kind == "module" else None
        if old_dev is not None and old_dev.startswith("cuda:"):
            self.interp.recorder.record(
                PartReplacedOnHost(node=target, mode=st.mode, attr=target.attr.value, old=old_dev, value=value_node)
            )

    def _swapped_in(self, base: Val, name: str, v: Val) -> Val:
        """`v`, set as part `name` of `base` after `base` was built. Into a model split by hand (a new
        classifier head set by a fine-tuning helper) a module left unplaced stays on the CPU, as one left
        so by __init__ does (Instances), unless the file moves `<owner>.<name>` somewhere."""
        if not (isinstance(base, Obj) and base.split) or (base.cls is not None and reaches_parts_by_name(base.cls)):
            return v
        return v if name in parts_moved_from_outside(self.interp) else on_cpu(v)

    def environment_placement(self) -> dict[str, int | str]:
        """command_line.environment_placement of the file, computed once."""
        if self._env_placement is None:
            self._env_placement = command_line.environment_placement(self.interp.module)
        return self._env_placement

    def _bound_once(self, name: str) -> bool:
        """Is `name` bound exactly once in the function (or file) being interpreted?"""
        return self.bindings_here(name) == 1

    def bindings_here(self, name: str) -> int:
        """How many times `name` is bound in the function (or file) being interpreted."""
        scope: cst.CSTNode = self.interp.stack[-1].node if self.interp.stack else self.interp.module
        counts = self._bindings.get(id(scope))
        if counts is None:
            counts = self._bindings[id(scope)] = _binding_counts(scope)
        return counts.get(name, 0)

    def assign(self, target: cst.BaseExpression, v: Val, st: State, value_node: cst.BaseExpression | None) -> None:
        if isinstance(target, cst.Name):
            if v is UNK and _int_call(value_node) and self._bound_once(target.value):
                # `local_rank = int(os.environ["LOCAL_RANK"])`: one fixed integer, by its name, so
                # that `2 * local_rank` and `2 * local_rank + 1` are two GPUs (values.affine).
                v = SymV(target.value)
            if isinstance(v, Obj) and not v.label and v.kind not in ("module", "any", "loss", "passthrough"):
                # A module keeps its identity (in-place .to()). A value computed on a GPU from one move alone stays
                # one (`gram = w @ w.T`, then `(gram - eye).pow(2).sum()`: MP016 asks what else reads the move);
                # not on the host, where MP005 would take it for idle host work without following the name's reads.
                on_gpu = v.devs is not None and v.devs != one("cpu")
                rm = v.reducible_move if on_gpu else None
                v = v.with_(
                    label=target.value,
                    reducible_move=rm,
                    made_from_move=rm is not None and v.made_from_move,
                    paths=v.paths,  # (named, not changed: `inp = a if c else b` keeps its ways)
                )
            forget_copies(target.value, st)
            st.env[target.value] = v
        elif isinstance(target, cst.Attribute):
            base = self.interp.exprs.ev(target.value, st)
            if target.attr.value in data_moves.RUNNING_STATS:
                self._note_statistics_replaced(target, base, v, st)
            if target.attr.value in _REPLACEABLE_METHODS and isinstance(target.value, cst.Name):
                # `enc.to = lambda *a, **k: None` (a quantized model that refuses .to()), `m.forward = ...`:
                # what its moves and calls do from here on is the new function's, not known here.
                st.env[target.value.value] = UNK
                return
            if (
                target.attr.value == "data"
                and isinstance(target.value, (cst.Attribute, cst.Name))
                and isinstance(base, Obj)
                and base.kind in ("param", "buffer", "tensor")
            ):
                # `self.cls.data = self.cls.data.to(dev)`: the same Parameter, its storage now on the
                # value's device (how a parameter is placed by hand, without nn.Parameter again).
                moved = base.with_(devs=v.devs, origin=v.origin) if isinstance(v, Obj) and v.devs else UNK
                self.assign(target.value, moved, st, None)
                if isinstance(target.value, cst.Name) and st.in_init and isinstance(st.self_obj, Obj):
                    # `for p in (self.w, self.b): p.data = p.data.to(dev)`: the same Parameter self holds
                    attrs = st.self_obj.attrs or {}
                    for attr, held in list(attrs.items()):
                        if held is base:
                            attrs[attr] = moved
                return
            if _ties_weight(target.attr.value, base, v) and isinstance(target.value, (cst.Name, cst.Attribute)):
                # `self.lm_head.weight = self.embed.weight`: the layer computes with that Parameter, where it
                # is (tied weights: one tensor, on one device), whatever `.to()` placed the layer on before.
                assert isinstance(base, Obj) and isinstance(v, Obj)
                # A weight not placed yet (both layers built on the CPU, the model placed after) goes wherever
                # its owner goes: the tied layer follows a later `.to()` of the other one, which is not
                # followed here, so its device is not known from this point.
                fresh = _fresh_parameter(value_node, base)
                devs = v.devs if not _unplaced_weight(v) or fresh else None
                origin = WEIGHT_REPLACED if fresh else TIED_WEIGHT
                if st.in_init and base.attrs is None:
                    # In place, as Module.to() works there: the layer held by a container of self (`for lin in
                    # self.layers: lin.weight = nn.Parameter(...)`) is the one changed.
                    base.devs, base.origin = devs, origin
                self.interp.moves.rebind(target.value, base.with_(devs=devs, origin=origin), st)
                return
            self._note_part_replaced_on_host(target, base, v, st, value_node)
            if self.replace_part(target.value, base, target.attr.value, v, st):
                return
            self.assign_attr(base, target.attr.value, v, st, dotted(target))
        elif isinstance(target, (cst.Tuple, cst.List)):
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
        elif isinstance(target, cst.Subscript) and (key := _dunder_dict_key(target)) is not None:
            self.hold_reference(key, v, st)  # self.__dict__["base"] = base
        elif isinstance(target, cst.Subscript):
            shared_caches.note_write(self.interp, target, v, st)
            base = self.interp.exprs.ev(target.value, st)
            if isinstance(base, DictV) and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index):
                k = self.interp.exprs.ev(target.slice[0].slice.value, st)
                if isinstance(k, Const):
                    base.items[k.value] = v
            elif isinstance(base, SeqV) and base.kind == "list" and not base.module:
                index = target.slice[0].slice if len(target.slice) == 1 else None
                _set_item(base, v, self.interp.exprs.ev(index.value, st) if isinstance(index, cst.Index) else UNK)
            elif isinstance(base, Obj) and known_tensor(base):
                exprs = [e.slice.value for e in target.slice if isinstance(e.slice, cst.Index)]
                indices = [self.interp.exprs.ev(e, st) for e in exprs]  # once: a move in an index is one move
                if self.interp.exprs.check_index_tensors(target, base, indices, st):
                    return  # `scores[:, eos_ids] = -inf` with the ids on another GPU
                if isinstance(v, Obj) and both_cuda(v.devs, base.devs):
                    self._check_index_put(target, base, v, indices, st, value_node)

    def _check_index_put(
        self,
        target: cst.Subscript,
        base: Obj,
        v: Obj,
        indices: list[Val],
        st: State,
        value_node: cst.BaseExpression | None,
    ) -> None:
        """`buf[idx] = v` with a tensor index (advanced indexing: index_put_, which wants the values on
        the buffer's device) and the values a tensor on another GPU. A slice or an int index copies
        (`buf[:n] = v` crosses devices as copy_ does), a CPU value may be a scalar, and so may a reduction,
        a loss or a metric (`prio[idx] = td.max()`: index_put_ moves a 0-dim value itself): not judged."""
        if v.lineage == OFF_CHAIN:
            return
        if not any(isinstance(i, Obj) and i.kind == "tensor" for i in indices):
            return
        self.interp.exprs.check_operand(
            target, v, base.devs, st, what=dotted(target.value) or "the tensor", op="op", expr=value_node, other=base
        )

    def hold_reference(self, name: str, v: Val, st: State) -> None:
        """__init__ stores `v` on self without registering it as a child (an adapter that keeps
        the layer it adapts by reference): readable as `self.<name>`, not moved with the instance."""
        so = st.self_obj
        if st.in_init and isinstance(so, Obj) and so.attrs is not None and so.cls is not None:
            so.attrs[name] = v
            so.cls.refs.add(name)

    # ------------------------------------------------------------ expressions


_TENSOR_MOVES = frozenset({"to", "cuda", "cpu"})


# Methods a program may replace on one object by assignment, which the model then no longer knows.
_REPLACEABLE_METHODS = frozenset({"to", "cuda", "cpu", "forward", "__call__", "half", "float"})


# The most items a loop whose body is one filter is scanned for (statements._passing_filter).
_MAX_FILTERED = 256
# Calls a filter's test may make and still only read (`isinstance(m, nn.Linear)`, `name.startswith("h.")`).
_READING_CALLS = frozenset({"isinstance", "hasattr", "len", "type", "issubclass", "startswith", "endswith"})


def _reads_only(test: cst.BaseExpression) -> bool:
    """Does a loop filter's test only read names, attributes, items and constants, and make no call but
    the reading ones?"""
    for n in walk(test):
        if isinstance(n, cst.Call):
            f = n.func
            name = f.value if isinstance(f, cst.Name) else f.attr.value if isinstance(f, cst.Attribute) else None
            if name not in _READING_CALLS:
                return False
        elif isinstance(n, (cst.NamedExpr, cst.Lambda, cst.Await, cst.Yield)):
            return False
    return True


def _rooted_at(expr: cst.BaseExpression, obj: Val, st: State) -> bool:
    """Is `expr` (`self.embed`) an attribute chain whose root name holds `obj`?"""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return isinstance(expr, cst.Name) and (expr.value == "self" or st.env.get(expr.value) is obj)


def _set_item(seq: SeqV, v: Val, key: Val) -> None:
    """`feats[i] = f.to(dev)`: a Python list changes in place, for every name that holds it. An item by a
    known index is replaced; by any other index (or a slice), what the list holds is no longer known item by
    item (any item may be the new value)."""
    if seq.items is not None and isinstance(key, Const) and type(key.value) is int:
        k = key.value
        if -len(seq.items) <= k < len(seq.items):
            k %= len(seq.items)
            seq.items = (*seq.items[:k], v, *seq.items[k + 1 :])
            return
    seq.elem = join_all([*(seq.items if seq.items is not None else (seq.elem,)), v])
    seq.items = None


def _ties_weight(attr: str, base: Val, v: Val) -> bool:
    """`layer.weight = other.weight` on a torch.nn layer of one known device, with a parameter of one
    other known device (the layer's weight is now there), or on a layer not placed yet with a parameter not
    placed yet either."""
    if not (
        attr == "weight"
        and isinstance(base, Obj)
        and base.kind == "module"
        and base.cls is None
        and isinstance(v, Obj)
        and v.kind == "param"
    ):
        return False
    if _unplaced_weight(v) and (base.origin == UNPLACED or _unplaced_weight(base)):
        return True  # both built on the CPU, the model placed later: the layer goes where the weight's owner goes
    return (
        single(base.devs) is not None
        and single(v.devs) is not None
        and not single(v.devs).startswith("sym:")  # type: ignore[union-attr]
        and v.devs != base.devs
    )


def _spread_modules(items: Sequence[Val]) -> set[int]:
    """Ids of the modules a loop walks, one per item (the item, or one element of it as in
    `enumerate(blocks)`), when each is on one known device and those devices differ (blocks dealt
    over GPUs): the loop runs a split on purpose."""
    mods = [_module_of(v) for v in items]
    devs = {single(m.devs) for m in mods if m is not None}
    if None in mods or None in devs or len(devs) < 2:
        return set()
    return {id(m) for m in mods if m is not None}


_CALLABLE = ("module", "any")


def _module_of(item: Val) -> Obj | None:
    """The module an item of a loop is, or holds as the only module of a tuple; else None.
    A value of unknown kind counts (a library block, `GPT2Model(cfg).h[i]`): only a call of it
    uses the answer (Calls.module_call)."""
    if isinstance(item, Obj):
        return item if item.kind in _CALLABLE else None
    if isinstance(item, SeqV) and item.items is not None:
        found = [v for v in item.items if isinstance(v, Obj) and v.kind in _CALLABLE]
        return found[0] if len(found) == 1 else None
    return None


def _mode_test(test: cst.BaseExpression) -> tuple[str, str] | None:
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


# Words of a test that asks whether the model is split (`if n_gpu > 1 and not is_model_parallel:`,
# `getattr(model, "hf_device_map", None)`, `model.is_parallelizable`), and the calls of one that looks
# where its parameters are (`len({p.device for p in model.parameters()}) == 1`). Not "parallel" alone:
# `if args.data_parallel:` asks for the wrap, it guards nothing; nor `x.device` alone: `if args.device ==
# "cuda": model.to(args.device)` asks about a setting, not about where the model is.
_SPLIT_TEST_WORDS = ("model_parallel", "parallelizable", "device_map", "is_parallel", "is_split")
_PLACEMENT_CALLS = frozenset({"parameters", "named_parameters", "buffers", "named_buffers"})


def asks_if_split(test: cst.BaseExpression, bound_to: dict[str, cst.BaseExpression] | None = None) -> bool:
    """Does an `if` test ask whether a model is split? Then its branches are the program's own answer
    (wrap it in DataParallel only if not, move it whole only if not), and a test the device model
    cannot decide must not be read as taking both. A GPU count alone (`if n_gpu > 1:`) asks nothing
    about the model. A name in the test counts by what it was bound to (`bound_to`, one level:
    `if len(devs) == 1:` after `devs = {p.device for p in model.parameters()}`)."""
    for n in walk(test):
        if isinstance(n, cst.Name) and bound_to and n.value in bound_to and asks_if_split(bound_to[n.value]):
            return True
        if isinstance(n, cst.Attribute) and n.attr.value in _PLACEMENT_CALLS:
            return True
        word = (
            n.value
            if isinstance(n, cst.Name)
            else n.attr.value
            if isinstance(n, cst.Attribute)
            else n.evaluated_value
            if isinstance(n, cst.SimpleString)
            else None
        )
        if isinstance(word, str) and any(w in word.lower() for w in _SPLIT_TEST_WORDS):
            return True
    return False


def _fresh_parameter(value: cst.BaseExpression | None, layer: Obj) -> bool:
    """`layer.weight = nn.Parameter(torch.empty(...))` on a layer placed already: a new Parameter that no other
    layer owns, made on the CPU, so the layer computes with a CPU weight until something moves the layer again
    (which is followed, as any move of it)."""
    return (
        isinstance(value, cst.Call)
        and (dotted(value.func) or "").rsplit(".", 1)[-1] == "Parameter"
        and layer.origin != UNPLACED
        and not _unplaced_weight(layer)
    )


def _unplaced_weight(v: Obj) -> bool:
    """A parameter (or a layer) still where it was built without a device: on the CPU, never moved."""
    return v.origin == UNPLACED or (
        v.devs == one("cpu") and not v.origin.startswith(("moved to", "built with", "created by"))
    )


def _dunder_dict_key(target: cst.Subscript) -> str | None:
    """ "base" for the target `self.__dict__["base"]`, else None."""
    t = target.value
    if not (
        isinstance(t, cst.Attribute)
        and t.attr.value == "__dict__"
        and isinstance(t.value, cst.Name)
        and t.value.value == "self"
        and len(target.slice) == 1
        and isinstance(target.slice[0].slice, cst.Index)
    ):
        return None
    key = target.slice[0].slice.value
    return key.evaluated_value if isinstance(key, cst.SimpleString) and isinstance(key.evaluated_value, str) else None


def _int_call(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "int"


_BINDS_TARGET = frozenset({cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr})  # `.target`


def _binding_counts(scope: cst.CSTNode) -> dict[str, int]:
    """How many times each plain name is bound in `scope` (assignments, loop and `with` targets,
    parameters; nested functions and classes included, which only makes a name count as rebound)."""
    counts: dict[str, int] = {}

    # Node tests by exact type, as the parser makes them (an isinstance test against libcst's ABCs runs a
    # Python frame, and this walk meets every node of the scope: devices/walk.py).
    def bind(t: Any) -> None:
        kind = type(t)
        if kind is cst.Name:
            counts[t.value] = counts.get(t.value, 0) + 1
        elif kind is cst.Tuple or kind is cst.List:
            for e in t.elements:
                bind(e.value)
        elif kind is cst.StarredElement:
            bind(t.value)

    def walk(n: Any) -> None:
        kind = type(n)
        if kind is cst.Assign:
            for t in n.targets:
                bind(t.target)
        elif kind in _BINDS_TARGET:
            bind(n.target)
        elif kind is cst.AsName or kind is cst.Param:
            bind(n.name)
        for c in children(n):
            walk(c)

    walk(scope)
    return counts


_LEAVING = (cst.Return, cst.Raise, cst.Continue, cst.Break)


def _leaves(body: Sequence[cst.BaseStatement] | Sequence[cst.BaseSmallStatement]) -> bool:
    """Does the block end by leaving (return, raise, continue, break)? (`if x: return y` on one line
    is a block of small statements.)"""
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    return isinstance(last, _LEAVING)


def _script_test(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"`: whether the file runs as a script, which says nothing of the GPUs."""
    return (
        isinstance(test, cst.Comparison)
        and isinstance(test.left, cst.Name)
        and test.left.value == "__name__"
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].comparator, cst.SimpleString)
    )


def _matches(pattern: cst.MatchPattern, subject: Val, ev: Any) -> bool | None:
    """Does `subject` match `pattern`: True, False, or None when the model cannot tell (an unknown subject, a
    class or sequence pattern)."""
    if isinstance(pattern, cst.MatchAs):
        return True if pattern.pattern is None else _matches(pattern.pattern, subject, ev)
    if isinstance(pattern, cst.MatchOr):
        hits = [_matches(p.pattern, subject, ev) for p in pattern.patterns]
        return True if True in hits else (None if None in hits else False)
    if isinstance(pattern, (cst.MatchValue, cst.MatchSingleton)):
        value = ev(pattern.value)
        if not (decided(subject) and decided(value)):
            return None
        return bool(cast(Const, subject).value == cast(Const, value).value)
    return None


def _captured(pattern: cst.MatchPattern) -> str | None:
    """The name a `case x:` (or `case ... as x:`) binds to the subject."""
    if isinstance(pattern, cst.MatchAs) and pattern.name is not None:
        return pattern.name.value
    return None
