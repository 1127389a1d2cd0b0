"""Work the host did on a copy of GPU data, sent back to that GPU (MP005's third kind, with host_work_of).

    x = batch.cpu().float()                 # the copy away
    mean = x.mean(dim=-1, keepdim=True)     # torch ops on the copy alone, and numbers
    out = (x - mean) / (x.std(dim=-1, keepdim=True) + eps)
    return out.to(batch.device)             # <- back to the GPU it came from

The GPU runs these ops as well: the two copies (and the host's pass over the data, and the wait for the
first copy) are the whole cost of the detour. The device model tells where the moved value and the copy
are; this module checks, in the source of the one function that holds both, that what goes back is
computed from the copy and numbers only, by ops the GPU runs as they are: elementwise arithmetic,
reductions, casts and views (`_CHEAP`). Anything else between (another tensor, a numpy call, `.item()`,
a linear-algebra routine that is quicker on the host for a small matrix, a loop) leaves the move alone."""

from __future__ import annotations

import libcst as cst

from mpcheck.devices import torchapi as T
from mpcheck.devices.events import Transfer
from mpcheck.devices.values import single
from mpcheck.devices.walk import walk
from mpcheck.rules.context import FileContext

# Of the ops below, the ones that compute nothing: casts and layouts (`.float()`, `.to(torch.float64)`, `.view()`).
# Not `.type()`, which may move (`x.type(torch.cuda.FloatTensor)`), nor `.repeat()`, which enlarges.
_CASTS_AND_VIEWS = (T.DTYPE_METHODS | T.SHAPE_ONLY_METHODS | {"to", "clone", "expand"}) - {"type"}
# Methods and torch functions that run on a GPU as they run on the host, with nothing to gain on either:
# those casts and views, elementwise steps (torchapi's tables of them), full or per-dim reductions, arithmetic.
_CHEAP = (
    _CASTS_AND_VIEWS
    | T.ZERO_DIM_KEEPING_METHODS
    | (T.FULL_REDUCTIONS - {"count_nonzero", "all", "any"})
    | {"add", "sub", "mul", "div", "logsumexp", "cumsum", "clamp_min", "clamp_max", "relu", "softmax", "log_softmax"}
    | {"round", "floor", "ceil", "where", "nan_to_num"}
)


def copy_worked_on(ctx: FileContext, ev: Transfer, aways: list[Transfer]) -> cst.Call | None:
    """The `.cpu()` (or `.to("cpu")`) of `aways` (the file's copies of GPU data to the host) whose copy alone the
    host computed what `ev` now moves back to that same GPU from, by the ops of _CHEAP, in one function of this
    file; None otherwise."""
    dst = single(ev.devs)
    if single(ev.value.devs) != "cpu" or not dst or not dst.startswith("cuda:") or not isinstance(ev.node, cst.Call):
        return None
    func = ev.node.func
    if not isinstance(func, cst.Attribute) or not ctx.owns(ev.node):
        return None
    here = ctx.function_name(ev.node)
    candidates = [
        away.node
        for away in aways
        if isinstance(away.node, cst.Call)
        and single(away.value.devs) == dst
        and ctx.owns(away.node)
        and ctx.function_name(away.node) == here
        and ctx.line(away.node) <= ctx.line(ev.node)
    ]
    fn = _function_holding(ctx.module, ev.node) if candidates else None
    if fn is None:
        return None
    bound, numbers = _single_bindings(fn), _number_params(fn)
    for call in candidates:
        work: list[cst.CSTNode] = []
        seen: set[str] = set()
        if (
            _from_copy_alone(func.value, call, bound, numbers, seen, work)
            and work  # (the copy itself sent back is MP005's plain round trip)
            and _read_only_on_the_way(fn, seen, bound)
        ):
            return call
    return None


def _read_only_on_the_way(fn: cst.FunctionDef, names: set[str], bound: dict[str, cst.BaseExpression]) -> bool:
    """Is every read of `names` (the host copy and what the chain computed from it) a step towards a move
    back: in the value bound to another of them, or in what a `.to()` / `.cuda()` moves? A copy the host also
    logs, saves or hands to numpy was wanted there: only its result's trip back would be saved, another fix."""
    steps = [bound[n] for n in names]
    movers = [
        n.func.value
        for n in walk(fn.body)
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in ("to", "cuda")
    ]
    allowed = {id(n) for e in (*steps, *movers) for n in walk(e)}
    allowed |= {id(t.target) for t in walk(fn.body) if isinstance(t, cst.AssignTarget)}  # bindings, not reads
    return all(id(n) in allowed for n in walk(fn.body) if isinstance(n, cst.Name) and n.value in names)


def _from_copy_alone(
    expr: cst.BaseExpression,
    away: cst.Call,
    bound: dict[str, cst.BaseExpression],
    numbers: set[str],
    seen: set[str],
    work: list[cst.CSTNode],
) -> bool:
    """Is `expr` computed from the copy `away` makes and numbers only, by cheap ops, through names bound once in
    the function? Each op that computes something (not a cast or a view) goes into `work`."""
    if expr is away or _holds_only(expr, away):
        return True
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.Name):
        if expr.value in numbers:
            return True
        value = bound.get(expr.value)
        if value is None:
            return False
        if expr.value in seen:
            return True
        seen.add(expr.value)
        return _from_copy_alone(value, away, bound, numbers, seen, work)
    if isinstance(expr, cst.BinaryOperation):
        work.append(expr)
        return _from_copy_alone(expr.left, away, bound, numbers, seen, work) and _from_copy_alone(
            expr.right, away, bound, numbers, seen, work
        )
    if isinstance(expr, cst.UnaryOperation):
        return _from_copy_alone(expr.expression, away, bound, numbers, seen, work)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        name = expr.func.attr.value
        if name not in _CHEAP or any(a.star for a in expr.args):
            return False
        args_ok = all(_a_setting(a.value) for a in expr.args)
        if name not in _CASTS_AND_VIEWS:
            work.append(expr)
        receiver = expr.func.value
        if isinstance(receiver, cst.Name) and receiver.value == "torch":
            # `torch.sqrt(var)`: the first argument is the data, the rest settings
            return (
                bool(expr.args)
                and _from_copy_alone(expr.args[0].value, away, bound, numbers, seen, work)
                and all(_a_setting(a.value) for a in expr.args[1:])
            )
        return args_ok and _from_copy_alone(receiver, away, bound, numbers, seen, work)
    return False


def _a_setting(expr: cst.BaseExpression) -> bool:
    """A call's setting: a number, a string, True/False/None, a tuple of numbers (`dim=(1, 2)`), a dtype."""
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(expr, cst.UnaryOperation):
        return _a_setting(expr.expression)
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None")
    if isinstance(expr, cst.Tuple):
        return all(_a_setting(e.value) for e in expr.elements)
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
        return expr.value.value == "torch"  # torch.float32
    return False


def _holds_only(expr: cst.BaseExpression, away: cst.Call) -> bool:
    """`batch.cpu().float()`: the copy with casts and views only."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr is not away:
        if expr.func.attr.value not in _CASTS_AND_VIEWS or expr.args:
            return False
        expr = expr.func.value
    return expr is away


def _function_holding(module: cst.Module, node: cst.CSTNode) -> cst.FunctionDef | None:
    """The innermost function of `module` around `node`."""
    found = None
    for fn in walk(module):
        if isinstance(fn, cst.FunctionDef) and any(n is node for n in walk(fn)):
            found = fn
    return found


def _single_bindings(fn: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
    """The names bound exactly once in the function by a plain `name = value` (not in a loop, not augmented)."""
    counts: dict[str, int] = {}
    values: dict[str, cst.BaseExpression] = {}
    for node in walk(fn.body):
        if isinstance(node, (cst.For, cst.While)):
            for inner in walk(node):
                if isinstance(inner, cst.AssignTarget) and isinstance(inner.target, cst.Name):
                    counts[inner.target.value] = 2  # a new value on each pass
        if isinstance(node, cst.Assign):
            for t in node.targets:
                if isinstance(t.target, cst.Name):
                    counts[t.target.value] = counts.get(t.target.value, 0) + 1
                    values[t.target.value] = node.value
                else:
                    for n in walk(t.target):
                        if isinstance(n, cst.Name):
                            counts[n.value] = 2  # unpacked: which part is which is not read here
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            counts[node.target.value] = 2
    return {k: v for k, v in values.items() if counts.get(k) == 1}


def _number_params(fn: cst.FunctionDef) -> set[str]:
    """Parameters whose default is a number (`eps=1e-5`): settings, not data."""
    params = [*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params]
    return {p.name.value for p in params if isinstance(p.default, (cst.Integer, cst.Float))}
