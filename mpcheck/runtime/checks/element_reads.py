"""MP020 at run time: Python reading a GPU tensor's elements on the host one at a time.

Two shapes, each seen where it costs (rules/MP020-host-sync-per-element.md has the measurements):
- Reads of single elements of one GPU tensor (`[v.item() for v in t]`, `int(t[i])` in a loop over `i`),
  or of its small rows (`[row.tolist() for row in topk]`): each element or row Python iterates or
  indexes is a view of `t`, so the reads are counted by the tensor they view, and `ELEMENTS` of them in
  one pass of the model (`passes.py`: a loss, a backward, or the model called again ends one) are a loop
  over its elements. A read of a tensor of its own (a loss's `.item()` each step) is no element of
  anything and is never counted. A view of more than `ROW_BYTES` is a chunk whose copy costs more than
  the wait: not counted.
- Reads of one-value tensors of their own by `.item()` (or `.tolist()`) from one line, `ELEMENTS` of them in
  one pass (a grad norm's `.item()` per parameter): counted by the line (a loss's `.item()` each step is one
  read a pass).
- Values computed from an element an index picked (`if usage[k] == 0:` over the codes `k`), each read on
  the host: counted as reads of that tensor's elements (provenance.py follows the element, `element_of`).
- Reads of one-value tensors by `.item()` from one line of a module hook, `HOOK_READS` of them in one pass (an
  activation monitor on every ReLU), in two passes close together: each stops the forward pass between layers.
- A number read from a one-value GPU tensor by `.item()` (or `float()`) inside a module's call and handed straight back
  to arithmetic on that GPU (`alpha = w.abs().mean().item()`, then `out * alpha`), from one line `HOOK_READS` times in
  one pass (a scale read in every layer), in two passes close together: each read stops the forward pass for a number
  a 0-dim tensor gives the same arithmetic without a wait. The float is matched by identity: `.item()` makes a new
  float object each time, held here (a number, no tensor) until the pass ends, so its id is not reused meanwhile.
- A test of a one-value GPU tensor (`bool()`) inside a module's call that only guards a clamp (`if x.abs().amax() >
  c: x = x.clamp(-c, c)`, `x.clamp(...) if cond else x`, `if torch.isnan(x).any(): x = torch.nan_to_num(x)`), from
  one line `HOOK_READS` times in one pass, in two passes close together: a clamp changes nothing where the test
  is false, so the unconditional clamp gives the same values without the wait (read off the source, once).
- `torch.tensor(items)` of two or more tensors on one GPU: it reads each one's value on the host. Reported
  the first time inside a module's forward (which runs every step), elsewhere the second time its line
  does it, as MP019 is: once is a summary at the end of a run, every step is the cost.

Only host reads are looked at (the mode passes every other call through untouched), and each is a wait
for the GPU already, so the count costs nothing that matters. Nothing here holds a tensor: the counts
are by `id()` of the viewed tensor, forgotten at the end of each pass.

Python's `max(t)` and `sorted(t)` read comparisons of the elements Python iterates, tensors of their own: the
run-time faces leave them to the linter.
"""

from __future__ import annotations

import functools
import os
import sys
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.sites import count_at_line

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker
    from mpcheck.runtime.checks.sites import Site

# Single-element reads of one tensor in one pass that make a per-element loop: the measured cost at 8
# elements is already 4-15x one read, and fewer reads than this are rarely a loop over a whole tensor.
ELEMENTS = 16

# A view read whole by `.tolist()` counts as one of a loop's reads up to this size: below it one read costs
# about one wait for the GPU whatever its size (rules/MP020-host-sync-per-element.md: a D2H copy's fixed
# cost is some 10 us; 64 KiB more at ~20 GB/s is ~3 us), so a loop of such reads costs one wait each.
ROW_BYTES = 64 * 1024

# Reads of one-value tensors from one line of a module hook (an activation monitor's `.item()` on every layer)
# in one pass: each stops the forward pass between two layers, and a hook on this many modules is one on every
# layer of a kind, not a check made once.
HOOK_READS = 4

# ...in two forward passes this close (counted by outermost module calls: a training step calls a criterion
# too, or a second model).
HOOK_PASSES_APART = 8

_MODULE_PY = os.path.join("torch", "nn", "modules", "module.py")


class ElementReads:
    """Per pass: how many single elements of each viewed GPU tensor were read on the host (by its id)."""

    __slots__ = (
        "by_line",
        "counts",
        "fed_lines",
        "fed_reads",
        "hook_lines",
        "pass_id",
        "reported",
        "scalars",
        "test_lines",
        "tests",
    )

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.by_line: dict[tuple[str, int], int] = {}  # reads of one-value tensors of their own, by line
        self.pass_id = -1
        self.reported: set[tuple[str, int]] = set()
        # A module hook's line -> the forward pass (tls.forwards) in which it last read HOOK_READS values.
        self.hook_lines: dict[tuple[str, int], int] = {}
        # Floats read from a GPU inside a module's call, not yet seen fed back: id -> (the float, its site, device).
        self.scalars: dict[int, tuple[float, Site, str]] = {}
        self.fed_reads: dict[tuple[str, int], int] = {}  # per pass: a read line -> its floats fed back to the GPU
        self.fed_lines: dict[tuple[str, int], int] = {}  # a read line -> the forward pass it last reached HOOK_READS
        self.tests: dict[tuple[str, int], int] = {}  # per pass: a line -> its `bool()` tests in modules' calls
        self.test_lines: dict[tuple[str, int], int] = {}  # a test's line -> the forward pass it last reached HOOK_READS

    def new_pass(self, pass_id: int) -> None:
        self.pass_id = pass_id
        self.counts.clear()
        self.by_line.clear()
        self.scalars.clear()
        self.fed_reads.clear()
        self.tests.clear()


def on_host_read(self: Checker, t: Any, how: str) -> None:
    """`t`'s value is about to be read on the host by `how` ("item", "__bool__", ...)."""
    if not self.wants("MP020"):
        return
    base = getattr(t, "_base", None)
    try:
        numel = t.numel()
        if numel != 1 and (base is None or how != "tolist" or numel * t.element_size() > ROW_BYTES):
            return  # `.tolist()` of a whole tensor, or of a large chunk: the fix, not the bug
    except Exception:
        return
    dev = self.devices.device_of(base if base is not None else t)
    if not dev.startswith("cuda"):
        return
    reads = self.element_reads
    if reads.pass_id != self._tls.passes_ended:
        reads.new_pass(self._tls.passes_ended)
    of = None
    if base is None:
        of = self.provenance.element_of(t)  # a value computed from an indexed element: `usage[k] == 0`
        if of is None:
            if how in _VALUE_READS:  # (any other comparison's `bool()` is a loop's test: left alone)
                _own_value_read(self, reads, dev, how)
            elif how == "__bool__" and self._tls.stack:
                _module_test(self, reads, dev)
            return
    source, shape, picked = of if of is not None else (id(base), tuple(getattr(base, "shape", ())), "")
    n = reads.counts.get(source, 0) + 1
    reads.counts[source] = n
    if n != ELEMENTS:
        return
    site = self.sites()
    if site is None or (site.path, site.line) in reads.reported:
        return
    reads.reported.add((site.path, site.line))
    read = _READ_WORDS.get(how, f"`{how}`")
    if of is not None:
        unit, part = "one", f"a value computed from {picked}"
    else:
        unit, part = ("one", "a single element") if numel == 1 else ("one part", f"{numel} elements")
    _report(
        self,
        site,
        dev,
        f"Python reads the elements of a tensor on {dev} ({'x'.join(map(str, shape))}) on the host {unit} at a time "
        f"({read} of {part}, "
        f"{ELEMENTS} times in this pass and counting): each read waits for the GPU. Read them all with one "
        f"copy (`t.tolist()`, or `t.cpu()`) and loop over that, or keep the work on the GPU.",
        "read the whole tensor once with `.tolist()` and loop over the list",
    )


def _own_value_read(self: Checker, reads: ElementReads, dev: str, how: str) -> None:
    """A one-value tensor of its own read on the host (a grad norm's `.item()`): one line reading `ELEMENTS` of
    them in one pass is a loop over values that could be stacked and read with one copy (a loss's `.item()`
    each step is one read a pass)."""
    site = self.sites()
    if site is None:
        return
    key = (site.path, site.line)
    n = count_at_line(reads.by_line, site)
    if key in reads.reported or n not in (HOOK_READS, ELEMENTS):
        return
    read = _READ_WORDS.get(how, f"`{how}`")
    if n == HOOK_READS:
        if not _in_module_hook(sys._getframe(1)):
            return
        # Reported when a pass close to the last one did the same: a hook that reads its values every N steps
        # (`if step % 100 == 0:`) costs nothing that matters.
        if not _pass_close_before(self, reads.hook_lines, key):
            return
        message = (
            f"a module hook reads a value on {dev} on the host at each call of the modules it hooks ({read}, "
            f"{HOOK_READS} times in this pass and counting): each read stops the forward pass between two layers "
            "until the GPU has run all it was given. Keep the values on the GPU (detached) and read them all at once "
            "after the step (`torch.stack(values).tolist()`)."
        )
        fix = "keep the hook's values on the GPU and read them once after the step"
    else:
        message = (
            f"this line reads one-value tensors on {dev} on the host one at a time ({read}, {ELEMENTS} times in "
            "this pass and counting): each read waits for the GPU. Stack the values of each device and read them "
            "with one copy (`torch.stack(values).tolist()`), or keep the work on the GPU."
        )
        fix = "stack the values (per device) and read them once with `.tolist()`"
    reads.reported.add(key)
    _report(self, site, dev, message, fix)


def _in_every_layer(
    self: Checker, reads: ElementReads, key: tuple[str, int], per_pass: dict[tuple[str, int], int], last: dict[Any, int]
) -> bool:
    """One more wait at the line `key` inside modules' calls, counted in `per_pass`: True (and the line taken as
    reported) the time it reaches `HOOK_READS` in this pass, when it did in a pass close before (`last`: the forward
    pass it last did). One pass alone, or passes far apart, is a check made now and then, not a cost of every step."""
    n = per_pass.get(key, 0) + 1
    per_pass[key] = n
    if n != HOOK_READS or key in reads.reported or not _pass_close_before(self, last, key):
        return False
    reads.reported.add(key)
    return True


def _pass_close_before(self: Checker, last: dict[tuple[str, int], int], key: tuple[str, int]) -> bool:
    """Did the line `key` reach its count in a forward pass close before this one (`last` holds the pass it last
    did, now this one)?"""
    forwards = self._tls.forwards
    before = last.get(key)
    last[key] = forwards
    return before is not None and forwards - before <= HOOK_PASSES_APART


def _module_test(self: Checker, reads: ElementReads, dev: str) -> None:
    """`bool()` of a one-value tensor on `dev` inside a module's call: reported when one line tests `HOOK_READS` of
    them in a pass, in two passes close together, and the test only guards a clamp (`_guards_only_a_clamp`)."""
    site = self.sites()
    if site is None:
        return
    key = (site.path, site.line)
    if not _in_every_layer(self, reads, key, reads.tests, reads.test_lines):
        return
    clamp = _guards_only_a_clamp(site)
    if clamp is None:
        return  # a branch that does work of its own (an early exit, a skipped layer): the host needs the answer
    _report(
        self,
        site,
        dev,
        f"this line tests a value on {dev} on the host at every call ({HOOK_READS} times in this pass and counting), "
        f"only to decide whether to run `{clamp}`: each test stops the forward pass until the GPU has run all it was "
        "given, and the clamp changes nothing where the test is false. Clamp unconditionally: the same values, no "
        "wait.",
        f"drop the test: always run `{clamp}`",
    )


def _source_tree(site: Site) -> Any:
    """The `ast` tree of the file at `site`, read once per finding (None where it cannot be read or parsed)."""
    import ast
    import linecache

    linecache.checkcache(site.path)  # (a file rewritten since it was cached, as in one process running scripts)
    try:
        return ast.parse("".join(linecache.getlines(site.path)))
    except (SyntaxError, ValueError):
        return None


def _guards_only_a_clamp(site: Site) -> str | None:
    """The clamp (`h.clamp(-c, c)`, `torch.nan_to_num(x)`) that the test at `site` alone guards: an `if` whose body
    only assigns or runs clamps, with no `else`, or `x.clamp(...) if test else x`. None otherwise."""
    import ast

    tree = _source_tree(site)
    if tree is None:
        return None
    for n in ast.walk(tree):
        if isinstance(n, (ast.If, ast.IfExp)) and n.test.lineno <= site.line <= (n.test.end_lineno or n.test.lineno):
            if isinstance(n, ast.IfExp):
                kept = n.orelse
                if _is_clamp(n.body) and isinstance(kept, ast.Name) and _clamped_name(n.body) == kept.id:
                    return ast.unparse(n.body) if _tests_the_range(n.test, n.body) else None
                return None
            if n.orelse or not n.body:
                return None
            calls = [stmt.value for stmt in n.body if isinstance(stmt, (ast.Assign, ast.Expr))]
            if len(calls) == len(n.body) and all(map(_is_clamp, calls)):
                return ast.unparse(calls[0]) if all(_tests_the_range(n.test, c) for c in calls) else None
            return None
    return None


# Reductions that find whether any value is out of a range: a test built on them is false only when all are in it.
_RANGE_TESTS = frozenset(
    {"max", "amax", "min", "amin", "any", "all", "isnan", "isinf", "isfinite", "isneginf", "isposinf"}
)


def _tests_the_range(test: Any, clamp: Any) -> bool:
    """Is `test` false only when `clamp` changes nothing? It reduces the clamped tensor with a max, a min, any/all
    or a NaN/Inf test, and compares with every bound the clamp uses (`h.abs().amax() > c` for `h.clamp(-c, c)`);
    a NaN/Inf test guards a `nan_to_num` or a clamp. (`h.mean() > 0` guarding `h.clamp(min=0)` is no such test.)"""
    import ast

    name = _clamped_name(clamp)
    nodes = list(ast.walk(test))
    if name is None or not any(isinstance(x, ast.Name) and x.id == name for x in nodes):
        return False
    called = {
        x.func.attr if isinstance(x.func, ast.Attribute) else getattr(x.func, "id", "")
        for x in nodes
        if isinstance(x, ast.Call)
    }
    if not called & _RANGE_TESTS:
        return False
    if called & {"isnan", "isinf", "isfinite", "isneginf", "isposinf"}:
        return True
    bounds = [a for a in clamp.args if not (isinstance(a, ast.Name) and a.id == name)] + [
        k.value for k in clamp.keywords
    ]
    seen = {ast.dump(x) for x in nodes}
    real = [b.operand if isinstance(b, ast.UnaryOp) and isinstance(b.op, ast.USub) else b for b in bounds]
    real = [b for b in real if not (isinstance(b, ast.Constant) and b.value is None)]
    return bool(real) and all(ast.dump(b) in seen for b in real)


# Calls that leave a value inside their range (or without NaNs) as it is: run when nothing needs them, they change
# nothing.
_CLAMPS = frozenset({"clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_max", "nan_to_num", "nan_to_num_"})


def _is_clamp(call: Any) -> bool:
    import ast

    if not isinstance(call, ast.Call):
        return False
    func = call.func
    return isinstance(func, ast.Attribute) and func.attr in _CLAMPS


def _clamped_name(call: Any) -> str | None:
    """The name a clamp call clamps: `h` of `h.clamp(...)` or of `torch.clamp(h, ...)`."""
    import ast

    func = call.func
    target = func.value if not (isinstance(func.value, ast.Name) and func.value.id in ("torch", "F")) else None
    if target is None and call.args:
        target = call.args[0]
    return target.id if isinstance(target, ast.Name) else None


# A pass's floats held for their identity at most: a module reading more without feeding any back is not this shape.
_MAX_SCALARS = 64


def on_scalar_read(self: Checker, t: Any, value: float) -> None:
    """`value = t.item()` (or `float(t)`) just ran inside a module's call: remember the float, to see whether it goes
    straight back to arithmetic on `t`'s GPU (`on_scalar_fed`)."""
    if not self.wants("MP020"):
        return
    reads = self.element_reads
    if reads.pass_id != self._tls.passes_ended or len(reads.scalars) >= _MAX_SCALARS:
        return  # (on_host_read, just before, started the pass)
    try:
        if t.numel() != 1:
            return
    except Exception:
        return
    dev = self.devices.device_of(t)
    if not dev.startswith("cuda"):
        return
    site = self.sites()
    if site is not None:
        reads.scalars[id(value)] = (value, site, dev)


def on_scalar_fed(self: Checker, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Arithmetic `func` is about to run: is one of its numbers a float read from a GPU (`on_scalar_read`), and is the
    arithmetic on that GPU? Reported when one read line does it `HOOK_READS` times in a pass, in two passes close."""
    reads = self.element_reads
    scalars = reads.scalars
    tensor_dev = None
    for value in (*args, *kwargs.values()):
        if type(value) is not float:
            continue
        entry = scalars.get(id(value))
        if entry is None or entry[0] is not value:
            continue
        del scalars[id(value)]  # (one read, one use counted)
        if tensor_dev is None:
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, self._tensor)]
            tensor_dev = self.devices.device_of(tensors[0]) if tensors else ""
        _, site, dev = entry
        if tensor_dev == dev:
            _fed_back(self, reads, site, dev, getattr(func, "__name__", ""))


def _fed_back(self: Checker, reads: ElementReads, site: Site, dev: str, op: str) -> None:
    key = (site.path, site.line)
    if not _in_every_layer(self, reads, key, reads.fed_reads, reads.fed_lines):
        return
    if not _read_only_for_arithmetic(site):
        return  # the number is also compared, printed, kept or returned: the host may need it
    module = self.current_module()
    self.emit(
        "MP020",
        site,
        f"this line reads a one-value tensor on {dev} on the host (`.item()`) and the number goes straight back to "
        f"arithmetic on {dev} (`{op}`), at every call ({HOOK_READS} times in this pass and counting): each read "
        "stops the forward pass until the GPU has run all it was given, for a value a 0-dim tensor gives the same "
        "arithmetic with. Keep it a tensor: drop `.item()` (`.detach()` where no gradient should flow through it).",
        devices=(dev, "cpu"),
        modules=(module,) if module else (),
        suggestion="drop `.item()`: keep the value a 0-dim tensor (`.detach()`)",
    )


def _read_only_for_arithmetic(site: Site) -> bool:
    """Is the number read at `site` used only as an operand of arithmetic in its function (`out * alpha`,
    `x.mul_(alpha)`, `torch.clamp(x, max=m)`), never compared, branched on, formatted, kept or returned? Then no
    host code needs it. Read once per finding, from the source (False where it cannot be read)."""
    import ast

    tree = _source_tree(site)
    if tree is None:
        return False
    functions = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= site.line <= (n.end_lineno or 0)
    ]
    if not functions:
        return False
    function = max(functions, key=lambda n: n.lineno)  # the innermost
    parents = {child: node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}
    reads = [
        n
        for n in ast.walk(function)
        if isinstance(n, ast.Call)
        and n.lineno <= site.line <= (n.end_lineno or n.lineno)
        and (
            (isinstance(n.func, ast.Attribute) and n.func.attr == "item" and not n.args)
            or (isinstance(n.func, ast.Name) and n.func.id == "float" and len(n.args) == 1)
        )
    ]
    if len(reads) != 1:
        return False
    read = reads[0]
    up = parents.get(read)
    if _is_operand(read, up, parents):
        return True
    if not (isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(up.targets[0], ast.Name)):
        return False
    name = up.targets[0].id
    uses = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == name and n is not up.targets[0]]
    return bool(uses) and all(isinstance(n.ctx, ast.Load) and _is_operand(n, parents.get(n), parents) for n in uses)


def _is_operand(node: Any, up: Any, parents: dict[Any, Any]) -> bool:
    """Is `node` an operand of arithmetic: of a binary operator whose result is not compared or branched on, an
    augmented assignment's value, or an argument of a method or a module function (`x.mul_(n)`, `torch.clamp`),
    not of a bare name (`print`, `int`, `round`)?"""
    import ast

    if isinstance(up, ast.keyword):
        up = parents.get(up)
    if isinstance(up, ast.Call):
        return node is not up.func and isinstance(up.func, ast.Attribute)
    if isinstance(up, ast.AugAssign):
        return node is up.value
    if isinstance(up, (ast.BinOp, ast.UnaryOp)):
        while isinstance(parents.get(up), (ast.BinOp, ast.UnaryOp)):
            up = parents[up]
        operands = [n for n in ast.walk(up) if not isinstance(n, (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))]
        if all(isinstance(n, ast.Constant) or n is node or _inside(n, node, parents) for n in operands):
            return False  # `alpha * 2`: arithmetic of numbers, on the host
        top = parents.get(up)
        if isinstance(top, ast.Call) and isinstance(top.func, ast.Name):
            return top.func.id not in _HOST_BUILTINS  # `int(alpha * n)` is host arithmetic
        return not isinstance(top, (ast.Compare, ast.If, ast.While, ast.IfExp, ast.FormattedValue))
    return False


def _inside(node: Any, outer: Any, parents: dict[Any, Any]) -> bool:
    while node is not None:
        if node is outer:
            return True
        node = parents.get(node)
    return False


# Builtins that use a number on the host (`int(alpha * n)`, `range(...)`): arithmetic inside them is no GPU's.
_HOST_BUILTINS = frozenset({"int", "float", "round", "str", "print", "bool", "range", "format", "max", "min", "abs"})


def _in_module_hook(frame: FrameType | None) -> bool:
    """Does `frame` run in a forward hook or pre-hook of a module (or in what one calls), run by nn.Module's
    call? The first frame of torch's `Module._call_impl` up the stack called either the module's forward or one
    of its hooks, registered on it or for every module."""
    from torch.nn.modules import module as nn_module  # (loaded already: a module is being called)

    callee = frame
    up = frame.f_back if frame is not None else None
    while callee is not None and up is not None:
        code = up.f_code
        if code.co_name in ("inner", "_call_impl") and code.co_filename.endswith(_MODULE_PY):
            module = up.f_locals.get("self")
            hooks = (
                *getattr(module, "_forward_hooks", {}).values(),
                *getattr(module, "_forward_pre_hooks", {}).values(),
                *nn_module._global_forward_hooks.values(),
                *nn_module._global_forward_pre_hooks.values(),
            )
            return any(_code_of(hook) is callee.f_code for hook in hooks)
        callee, up = up, up.f_back
    return False


def _code_of(hook: Any) -> CodeType | None:
    """The code a hook runs: a function's, a bound method's, a partial's function's, a callable object's `__call__`."""
    while isinstance(hook, functools.partial):
        hook = hook.func
    hook = getattr(hook, "__func__", hook)
    code = getattr(hook, "__code__", None)
    if code is None and callable(hook):
        code = getattr(type(hook).__call__, "__code__", None)
    return code if isinstance(code, CodeType) else None


def on_tensor_of_tensors(self: Checker, items: Any) -> None:
    """`torch.tensor(items)` is about to run: MP020 when two or more of `items` are tensors on one GPU."""
    if not isinstance(items, (list, tuple)) or len(items) < 2 or not self.wants("MP020"):
        return
    tensors = [x for x in items if isinstance(x, self._tensor)]
    devs = {self.devices.device_of(x) for x in tensors}
    if len(devs) != 1 or len(tensors) < 2:
        return
    (dev,) = devs
    if not dev.startswith("cuda"):
        return
    site = self.sites()
    if site is None:
        return
    if count_at_line(self._tensor_of_tensors, site) != (1 if self._tls.stack else 2):
        return
    _report(
        self,
        site,
        dev,
        f"`torch.tensor(...)` of {len(items)} tensors on {dev} reads each one's value on the host, one wait for "
        f"the GPU each, on every pass. `torch.stack(...)` keeps them on the GPU (`.detach()` for a log; `.cpu()` "
        f"after it copies them all at once).",
        "use `torch.stack(...)`",
    )


def _report(self: Checker, site: Site, dev: str, message: str, suggestion: str) -> None:
    """MP020 at `site`: values of a tensor on `dev` read on the host, in the module running now, if any."""
    module = self.current_module()
    self.emit("MP020", site, message, devices=(dev, "cpu"), modules=(module,) if module else (), suggestion=suggestion)


# Reads that take a one-value tensor's number (`int(torch.randint(0, w, (), device=gpu))`, a span drawn on the GPU
# for each utterance): counted per line for MP020's own-value reads.
_VALUE_READS = frozenset({"item", "tolist", "__int__", "__float__", "__index__"})

_READ_WORDS = {
    "item": "`.item()`",
    "tolist": "`.tolist()`",
    "__bool__": "`bool()`",
    "__int__": "`int()`",
    "__float__": "`float()`",
    "__index__": "its use as an index",
}
