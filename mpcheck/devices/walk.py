"""A fast walk over a libcst tree's code, for the model's whole-tree questions.

libcst's `node.children` rebuilds the node to collect them (its visitor
protocol replaces children as it goes), and a `CSTVisitor` does the same for
every node: walking ir.py's 174,000 nodes that way took a second, more than
its parse. Here the children are read off the node's fields directly, and the
fields that can only hold layout (whitespace, comments, commas, brackets,
operator tokens: two nodes in three) are never followed; what is left are the
names, expressions and statements every walk of the model looks for.

The fields to follow are derived once per node type from libcst's own type
annotations, so a new libcst node type is handled without a list to keep up.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from typing import Any

import libcst as cst

from mpcheck.devices import memo

# Nodes that hold layout only: none of them has a name, an expression or a statement inside.
LAYOUT: tuple[type[cst.CSTNode], ...] = (
    cst.BaseParenthesizableWhitespace,
    cst.EmptyLine,
    cst.TrailingWhitespace,
    cst.Newline,
    cst.Comment,
    cst.Comma,
    cst.Dot,
    cst.Colon,
    cst.Semicolon,
    cst.AssignEqual,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseAugOp,
    cst.BaseUnaryOp,
    cst.ImportStar,
)

_FIELDS: dict[type, tuple[str, ...]] = {}

# type -> is it a libcst node? libcst's node classes are ABCs: `isinstance(v, cst.CSTNode)` runs
# ABCMeta.__instancecheck__, a Python frame per test (3% of linting torch, most of it here).
_IS_NODE: dict[type, bool] = {}


def _is_node(value: object) -> bool:
    t = type(value)
    got = _IS_NODE.get(t)
    if got is None:
        got = _IS_NODE[t] = issubclass(t, cst.CSTNode)
    return got


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node.children` without the layout nodes (the same nodes, not copies), in no set order."""
    names = _FIELDS.get(type(node))
    if names is None:
        names = _FIELDS[type(node)] = code_fields(type(node))
    out: list[cst.CSTNode] = []
    for name in names:
        value = getattr(node, name)
        if _is_node(value):
            out.append(value)
        elif type(value) in (list, tuple):
            out.extend(v for v in value if _is_node(v))
    return out


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every node inside it but the layout, each once, in no set order."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        todo.extend(children(n))


def scope_nodes(scope: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes of a module's or a function's own scope, in source order: not those inside the functions, lambdas
    and classes it defines (their own scopes, which read their own names), though those nodes themselves are."""
    stack = list(reversed(children(scope)))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            stack.extend(reversed(children(n)))


def assigned(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The targets `node` assigns when it is an assignment (`=`, `+=`, `x: T = ...`), else none."""
    kind = type(node)  # the parser's exact node types: no ABC instance check (see _IS_NODE)
    if kind is cst.Assign:
        return [t.target for t in typing.cast(cst.Assign, node).targets]
    if kind is cst.AnnAssign or kind is cst.AugAssign:
        return [typing.cast("cst.AnnAssign | cst.AugAssign", node).target]
    return []


def target_names(t: cst.BaseExpression) -> Iterator[str]:
    """The plain names an assignment's target binds (`n`, `b, t, _`, `*rest`), not attributes or items."""
    if isinstance(t, cst.Name):
        yield t.value
    elif isinstance(t, (cst.Tuple, cst.List)):
        for e in t.elements:
            yield from target_names(e.value)
    elif isinstance(t, cst.StarredElement):
        yield from target_names(t.value)


def loop_bound_names(loop: cst.For) -> frozenset[str]:
    """Names (re)bound anywhere in a loop's body or target (not inside a function the body defines)."""
    got: frozenset[str] | None = memo.recall(_LOOP_BOUND, loop)
    if got is not None:
        return got
    names: set[str] = set(target_names(loop.target))

    def walk_stmts(stmts: typing.Sequence[cst.CSTNode]) -> None:
        for st in stmts:
            if isinstance(st, cst.SimpleStatementLine):
                for sm in st.body:
                    if isinstance(sm, cst.Assign):
                        for t in sm.targets:
                            names.update(target_names(t.target))
                    elif isinstance(sm, (cst.AugAssign, cst.AnnAssign)):
                        names.update(target_names(sm.target))
            elif isinstance(st, cst.For):
                names.update(target_names(st.target))
                walk_stmts(st.body.body)
            elif isinstance(st, cst.If):
                walk_stmts(st.body.body)
                o = st.orelse
                while o is not None:
                    walk_stmts(o.body.body)
                    o = o.orelse if isinstance(o, cst.If) else None
            elif isinstance(st, (cst.While, cst.With, cst.Try)):
                walk_stmts(st.body.body)
                if isinstance(st, cst.With):
                    for it in st.items:
                        if it.asname is not None:
                            names.update(target_names(it.asname.name))

    walk_stmts(loop.body.body)
    return memo.keep(_LOOP_BOUND, loop, frozenset(names))


_LOOP_BOUND = memo.node_table()


@dataclasses.dataclass(frozen=True)
class AttributeAssignments:
    """What a module assigns as attributes, from one walk of it (attribute_assignments)."""

    on_name: dict[str, frozenset[str]]  # `C.device = ...`: "C" -> {"device"}
    outside: frozenset[str]  # every attribute assigned on something other than `self`, setattr'd or replace()d
    # X of every `<owner>.X.to(...)` / `.cuda(...)` / `.cpu()` / `.to_empty(...)` whose owner is not plain `self`
    # (`block.norm.to(dev)`, `self.block.norm.cuda(1)`): a part placed from outside its class (unmoved.py)
    moved_from_outside: frozenset[str]


_PART_MOVES = frozenset({"to", "cuda", "cpu", "to_empty"})


_ATTRIBUTE_ASSIGNMENTS = memo.node_table()


def attribute_assignments(module: cst.CSTNode) -> AttributeAssignments:
    """The attributes `module` assigns, and the parts it moves from outside their class, walked once per
    module object and shared by every question about it (the device model asks per class and per
    interpreter; a walk of torch's `_inductor/ir.py` costs a sixth of its analysis)."""
    got: AttributeAssignments | None = memo.recall(_ATTRIBUTE_ASSIGNMENTS, module)
    if got is not None:
        return got
    on_name: dict[str, set[str]] = {}
    outside: set[str] = set()
    moved: set[str] = set()
    # Node tests by exact type (see _IS_NODE): this walk meets every node of the module.
    for node in walk(module):
        for t in assigned(node):
            if type(t) is cst.Attribute:
                if type(t.value) is cst.Name:
                    on_name.setdefault(t.value.value, set()).add(t.attr.value)
                    if t.value.value == "self":
                        continue
                outside.add(t.attr.value)
        if type(node) is cst.Call:
            func = node.func
            if type(func) is cst.Attribute and func.attr.value in _PART_MOVES and type(func.value) is cst.Attribute:
                owner = func.value.value
                if not (type(owner) is cst.Name and owner.value == "self"):
                    moved.add(func.value.attr.value)
            called = _called_name(func)
            if called in ("setattr", "replace"):  # setattr(obj, "name", v); dataclasses.replace(obj, name=v)
                outside.update(a.keyword.value for a in node.args if a.keyword is not None)
                if called == "setattr" and len(node.args) >= 2 and isinstance(node.args[1].value, cst.SimpleString):
                    value = node.args[1].value.evaluated_value
                    if isinstance(value, str):
                        outside.add(value)
    out = AttributeAssignments({k: frozenset(v) for k, v in on_name.items()}, frozenset(outside), frozenset(moved))
    return memo.keep(_ATTRIBUTE_ASSIGNMENTS, module, out)


def _called_name(func: Any) -> str:
    """`setattr` for `setattr(...)`, "replace" for `dataclasses.replace(...)`, a plain name's name, else ""."""
    if type(func) is cst.Name:
        return str(func.value)
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "dataclasses":
        return "replace" if func.attr.value == "replace" else ""
    return ""


def code_fields(node_type: type) -> tuple[str, ...]:
    """The fields of a libcst node type that may hold a node other than layout."""
    fields = dataclasses.fields(node_type)
    try:
        hints = typing.get_type_hints(node_type)
    except Exception:  # noqa: BLE001  (an annotation that does not resolve: follow every field)
        return tuple(f.name for f in fields)
    return tuple(f.name for f in fields if f.name not in hints or _may_hold_code(hints[f.name]))


def _may_hold_code(annotation: object) -> bool:
    args = typing.get_args(annotation)
    if args:  # Optional[...], Sequence[...], Union[...], Literal[...]
        return any(_may_hold_code(a) for a in args)
    if not isinstance(annotation, type):
        return annotation is typing.Any  # a literal value or None: no node
    return issubclass(annotation, cst.CSTNode) and not issubclass(annotation, LAYOUT)


_TURNS_OFF_GRAD = memo.node_table()


def turns_off_grad(module: cst.CSTNode) -> bool:
    """Could the module leave some parameter without `requires_grad`? It assigns `.requires_grad` on
    something, calls `requires_grad_(...)` other than with a literal True, or passes `requires_grad=`
    other than True (`nn.Parameter(t, requires_grad=False)`). Where it does none of these, every
    parameter requires grad (torch's default), so `if p.requires_grad` keeps them all."""
    got: bool | None = memo.recall(_TURNS_OFF_GRAD, module)
    if got is not None:
        return got

    def turns_off(arg: cst.Arg) -> bool:
        return not (type(arg.value) is cst.Name and arg.value.value == "True")

    found = False
    for node in walk(module):
        if any(type(t) is cst.Attribute and t.attr.value == "requires_grad" for t in assigned(node)):
            found = True
        elif type(node) is cst.Call:
            call = node
            own = type(call.func) is cst.Attribute and call.func.attr.value == "requires_grad_"
            # `requires_grad_()` alone keeps the default, True; `requires_grad_(flag)` or `requires_grad=flag` may not.
            found = any(
                turns_off(a)
                for a in call.args
                if (a.keyword is None and own) or (a.keyword is not None and a.keyword.value == "requires_grad")
            )
        if found:
            break
    return memo.keep(_TURNS_OFF_GRAD, module, found)


def is_periodic_test(test: cst.BaseExpression) -> bool:
    """A test with a modulo of a number (`step % 10 == 0`, `not (i + 1) % every`), not a string's `%` format: what
    it guards runs once every so many passes (MP028's reads, MP020's per-parameter logs)."""
    for n in walk(test):
        if (
            isinstance(n, cst.BinaryOperation)
            and isinstance(n.operator, cst.Modulo)
            and not isinstance(n.left, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString))
        ):
            return True
    return False


def name_bindings(module: cst.CSTNode) -> dict[str, list[cst.BaseExpression | None]]:
    """Every binding of each name anywhere in `module`: the value of a plain `name = value` (or `name: T = value`),
    None for any other way (a tuple target, `+=`, `:=`, a loop target, a parameter, an import, `global`). A name
    bound once to a value the caller recognises is that value everywhere (MP011's stand-in batches, MP025's
    strings read from the environment)."""
    bindings: dict[str, list[cst.BaseExpression | None]] = {}
    for n in walk(module):
        if isinstance(n, cst.Assign):
            for t in n.targets:
                if isinstance(t.target, cst.Name):
                    bindings.setdefault(t.target.value, []).append(n.value)
                else:
                    for x in walk(t.target):
                        if isinstance(x, cst.Name):
                            bindings.setdefault(x.value, []).append(None)
        elif isinstance(n, cst.AnnAssign) and isinstance(n.target, cst.Name):
            bindings.setdefault(n.target.value, []).append(n.value)
        elif isinstance(n, (cst.AugAssign, cst.NamedExpr)) and isinstance(n.target, cst.Name):
            bindings.setdefault(n.target.value, []).append(None)
        elif isinstance(n, (cst.For, cst.CompFor)):
            for x in walk(n.target):
                if isinstance(x, cst.Name):
                    bindings.setdefault(x.value, []).append(None)
        elif isinstance(n, cst.Param):
            bindings.setdefault(n.name.value, []).append(None)
        elif isinstance(n, cst.AsName) and isinstance(n.name, cst.Name):
            bindings.setdefault(n.name.value, []).append(None)
        elif isinstance(n, cst.Global):
            for g in n.names:
                bindings.setdefault(g.name.value, []).append(None)
    return bindings
