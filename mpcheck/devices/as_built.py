"""Is an instance of another file's class still as it was built when its method is called?

A method of another file's class runs, in that file, on an instance rebuilt from the
arguments the caller built it with (devices/callers.py). That is its state at the call
only when nothing between changed it: `configure(trainer)` may set `trainer.device`,
`prepare(model)` may move the model the trainer holds, a loop may change an attribute
after the call on its first pass. The interpreter follows values in the order it runs
them; this asks the question of the source instead, over the whole function (or file)
that makes the call, whatever the order and the paths:

- the receiver (`trainer` of `trainer.fit(...)`) is a name bound in that scope by plain
  assignment only, and every other use of it is a read, a method call or an attribute read
  (its class's own methods are judged where they are defined: callers._callee); never
  passed to a call, stored, aliased, given an attribute, or moved (`.to()`) (returned is
  fine: nothing of the scope runs after that);
- each module or list the constructor got (`Trainer(model, ...)`) is, likewise, a name
  bound in the scope whose other uses are its forward (`model(x)`), attribute reads and
  methods that read it (`model.parameters()`), or an expression built at the call.

Anything else is "may have changed": the method is not followed (no context, no finding).
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from mpcheck.devices import memo
from mpcheck.devices.program import params_of
from mpcheck.devices.walk import children

# Per function of a file: parameter name -> is it only read there (Uses._read_by_a_helper).
_READ_ONLY = memo.node_table()

# Methods whose call moves a module (or a tensor's storage) in place.
_MOVERS = frozenset(("to", "cuda", "cpu", "xpu", "apply", "_apply", "to_empty", "load_state_dict", "share_memory"))
# Methods of a module that leave where its parts are alone.
_READS = frozenset(
    (
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "modules",
        "named_modules",
        "children",
        "named_children",
        "state_dict",
        "eval",
        "train",
        "zero_grad",
        "forward",
        "requires_grad_",
    )
)


class Uses:
    """The names of a scope and what holds each node, made once per scope and asked per name."""

    def __init__(self, scope: cst.CSTNode, helpers: Mapping[str, cst.FunctionDef] | None = None) -> None:
        # The file's own functions by name: an instance passed to one that only reads its parameter
        # (`get_batch(cfg)` reading `cfg.vocab_size`) is left as built (`_read_by_a_helper`).
        self.helpers = helpers or {}
        self.parent: dict[int, cst.CSTNode] = {}
        self.names: dict[str, list[cst.Name]] = {}
        todo = [scope.body if isinstance(scope, cst.FunctionDef) else scope]
        while todo:
            node = todo.pop()
            if isinstance(node, cst.Name):
                self.names.setdefault(node.value, []).append(node)
            for child in children(node):
                self.parent[id(child)] = node
                todo.append(child)

    def as_built(
        self, name: str, build: cst.Call | None = None, strict: bool = False, call: cst.Call | None = None
    ) -> bool:
        """Is `name` bound in the scope and never used there in a way that may change it (see the
        module's docstring)? `build`: the constructor call it is an argument of, `strict` then (a
        module the instance holds); `call`: the method call being followed, which may be given it too
        (`ema.update(model)`: its run in the callee's file sees what it does to it)."""
        assigned = False
        for node in self.names.get(name, ()):
            verdict = self._judge(node, build, strict, call)
            if verdict is False:
                return False
            assigned = assigned or verdict == "bound"
        return assigned

    def _judge(self, node: cst.Name, build: cst.Call | None, strict: bool, call: cst.Call | None = None) -> bool | str:
        parent = self.parent.get(id(node))
        if (isinstance(parent, cst.Attribute) and parent.attr is node) or (
            isinstance(parent, cst.Arg) and parent.keyword is node
        ):
            return True  # `x.name`, `f(name=...)`: another name
        if isinstance(parent, cst.ImportFrom) and parent.module is node:
            return True  # `from model import SplitGPT`: a module's name, not the variable `model`
        if isinstance(parent, cst.Param):
            return True  # a parameter of a nested function: another variable (its uses are judged as ours)
        if isinstance(parent, cst.Return) and parent.value is node:
            return True  # `return trainer`: nothing of the scope runs after it to change it
        if isinstance(parent, cst.AssignTarget) and parent.target is node:
            return "bound"
        if isinstance(parent, cst.Arg) and build is not None and self.parent.get(id(parent)) in (build, call):
            return True  # what the instance was built with, or given again by the call followed
        top: cst.CSTNode = node
        attrs: list[str] = []
        above = parent
        while above is not None:  # the outermost `node.a[k].b` around `node`
            if isinstance(above, cst.Attribute) and above.value is top:
                attrs.append(above.attr.value)
            elif not (isinstance(above, cst.Subscript) and above.value is top):
                break
            top, above = above, self.parent.get(id(above))
        if any(a in _MOVERS for a in attrs):
            return False
        if top is not node and (
            (isinstance(above, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)) and above.target is top)
            or isinstance(above, cst.Del)
        ):
            return False  # `trainer.device = ...`, `model.stage2 = ...`
        if isinstance(above, cst.Call) and above.func is top:
            # `model.parallelize()` may place its parts anew; the receiver's own methods are judged in its class
            return not (strict and top is not node and attrs[-1] not in _READS)
        if top is node and isinstance(parent, cst.Arg) and self._read_by_a_helper(parent):
            return True
        return top is not node  # an attribute read (`model.devices[0]`); a bare name passed, stored, returned

    def _read_by_a_helper(self, arg: cst.Arg) -> bool:
        """Is `arg` given to a function of this file (`get_batch(cfg)`) whose parameter for it is only
        read there, neither passed on, stored, moved nor given an attribute?"""
        call = self.parent.get(id(arg))
        if arg.star or not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name):
            return False
        fn = self.helpers.get(call.func.value)
        if fn is None:
            return False
        names = [n for n, _ in params_of(fn)]
        if arg.keyword is not None:
            param = arg.keyword.value if arg.keyword.value in names else None
        else:
            i = call.args.index(arg)
            param = names[i] if i < len(names) and not any(a.keyword or a.star for a in call.args[:i]) else None
        if param is None:
            return False
        known: dict[str, bool] | None = memo.recall(_READ_ONLY, fn)
        if known is None:
            known = memo.keep(_READ_ONLY, fn, {})
        if param not in known:
            inside = Uses(fn)  # no helpers of its own: a parameter it passes on is not followed further
            known[param] = all(
                inside._judge(n, None, True) is not False
                for n in inside.names.get(param, ())
                if not isinstance(inside.parent.get(id(n)), cst.Param)
            )
        return known[param]

    def attribute_as_built(self, attr: str) -> bool:
        """Is the module held as `self.<attr>` (`self.pe = SinusoidalPE(d).to("cuda:0")`) assigned once in
        the scope (a class's file) and otherwise only called (`self.pe(h)`) or read (`self.pe.weight`,
        `self.pe.parameters()`)? Anything else, on any receiver of that attribute name (`model.pe.table =
        ...`, `self.pe.cuda()`, `helper(self.pe)`), may have changed it."""
        assigned = 0
        for name in self.names.get(attr, ()):
            held = self.parent.get(id(name))
            if not (isinstance(held, cst.Attribute) and held.attr is name):
                continue  # a local variable of that name: another thing
            above = self.parent.get(id(held))
            if isinstance(above, cst.AssignTarget) and above.target is held:
                assigned += 1
                continue
            if (isinstance(above, cst.Call) and above.func is held) or (
                isinstance(above, cst.For) and above.iter is held
            ):
                continue  # its forward; its items, in a loop (`for block in self.blocks:`)
            if not (isinstance(above, (cst.Attribute, cst.Subscript)) and above.value is held) or not self._read_only(
                held
            ):
                return False  # moved, given an attribute, passed, stored, returned
        return assigned == 1

    def iterated_part(self, name: str) -> str | None:
        """The part of `self` whose items the loop variable `name` takes (`for block in self.blocks:`), when
        that is its only binding and it is otherwise only called or read (`block(h)`,
        `next(block.parameters())`); else None."""
        part = None
        for node in self.names.get(name, ()):
            parent = self.parent.get(id(node))
            if isinstance(parent, cst.For) and parent.target is node:
                it = parent.iter
                if not (isinstance(it, cst.Attribute) and isinstance(it.value, cst.Name) and it.value.value == "self"):
                    return None
                if part not in (None, it.attr.value):
                    return None
                part = it.attr.value
                continue
            verdict = self._judge(node, None, True)
            if verdict is False or verdict == "bound":
                return None
        return part

    def _read_only(self, held: cst.Attribute) -> bool:
        """Is `self.pe.<...>` around `held` an attribute read or a reading method's call?"""
        top: cst.CSTNode = held
        attrs: list[str] = []
        above = self.parent.get(id(held))
        while isinstance(above, (cst.Attribute, cst.Subscript)) and above.value is top:
            if isinstance(above, cst.Attribute):
                attrs.append(above.attr.value)
            top, above = above, self.parent.get(id(above))
        if any(a in _MOVERS for a in attrs):
            return False
        if (isinstance(above, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)) and above.target is top) or isinstance(
            above, cst.Del
        ):
            return False
        if isinstance(above, cst.Call) and above.func is top:
            return not attrs or attrs[-1] in _READS  # an item's forward (`self.blocks[0](h)`), a reading method
        return True
