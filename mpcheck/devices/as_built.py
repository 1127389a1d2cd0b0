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
  passed to a call, stored, returned, aliased, given an attribute, or moved (`.to()`);
- each module or list the constructor got (`Trainer(model, ...)`) is, likewise, a name
  bound in the scope whose other uses are its forward (`model(x)`), attribute reads and
  methods that read it (`model.parameters()`), or an expression built at the call.

Anything else is "may have changed": the method is not followed (no context, no finding).
"""

from __future__ import annotations

import libcst as cst

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


class _Uses(cst.CSTVisitor):
    """Judges every use of `name` in a scope (see the module's docstring)."""

    def __init__(self, name: str, build: cst.Call | None, strict: bool) -> None:
        self.name = name
        self.build = build  # the constructor call: `name` as one of its arguments is the use that built it
        self.strict = strict  # an argument of the constructor: its method calls must be reads
        self.stack: list[cst.CSTNode] = []
        self.kept = True
        self.assigned = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.kept and isinstance(node, cst.Name) and node.value == self.name:
            self._judge(node)
        self.stack.append(node)
        return self.kept

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()

    def _judge(self, node: cst.Name) -> None:
        parent = self.stack[-1] if self.stack else None
        if (isinstance(parent, cst.Attribute) and parent.attr is node) or (
            isinstance(parent, cst.Arg) and parent.keyword is node
        ):
            return  # `x.name`, `f(name=...)`: another name
        if isinstance(parent, cst.Param):
            return  # a parameter of a nested function: another variable (its uses are judged as ours)
        if isinstance(parent, cst.AssignTarget) and parent.target is node:
            self.assigned = True
            return
        if isinstance(parent, cst.Arg) and len(self.stack) >= 2 and self.stack[-2] is self.build:
            return  # what the instance was built with
        top, attrs, i = self._chain(node)
        above = self.stack[i] if i >= 0 else None
        if any(a in _MOVERS for a in attrs):
            self.kept = False
        elif top is not node and (
            (isinstance(above, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)) and above.target is top)
            or isinstance(above, cst.Del)
        ):
            self.kept = False  # `trainer.device = ...`, `model.stage2 = ...`
        elif isinstance(above, cst.Call) and above.func is top:
            if self.strict and top is not node and attrs[-1] not in _READS:
                self.kept = False  # `model.parallelize()`: may place its parts anew
        elif top is node:
            self.kept = False  # passed, stored, returned, aliased
        # else: an attribute read (`model.devices[0]`)

    def _chain(self, node: cst.Name) -> tuple[cst.CSTNode, list[str], int]:
        """The outermost `node.a[k].b` expression around `node`, its attribute names, and the index
        in the stack of what holds it."""
        top: cst.CSTNode = node
        attrs: list[str] = []
        i = len(self.stack) - 1
        while i >= 0:
            p = self.stack[i]
            if isinstance(p, cst.Attribute) and p.value is top:
                attrs.append(p.attr.value)
            elif not (isinstance(p, cst.Subscript) and p.value is top):
                break
            top = p
            i -= 1
        return top, attrs, i


def as_built(scope: cst.CSTNode, name: str, build: cst.Call | None = None, strict: bool = False) -> bool:
    """Is `name` bound in `scope` (a function, or a module) and never used there in a way that
    may change it (see the module's docstring)? `build`: the constructor call it is an argument
    of, `strict` then (a module the instance holds)."""
    uses = _Uses(name, build, strict)
    body = scope.body if isinstance(scope, cst.FunctionDef) else scope
    body.visit(uses)
    return uses.kept and uses.assigned
