"""MP025: a device choice tests a string read from the environment or the command line against a number.

`os.environ.get("MODEL_PARALLEL", "1") == 1` is never true: the environment holds strings, and a string never
equals an int in Python (no error, no warning). A split guarded by such a test never happens: every part stays
on the first device, or on the host. Plain syntax: the comparison, what the compared name is bound to in the
file, and whether the `if` it decides places anything on a device.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.names import dotted
from mpcheck.devices.walk import name_bindings, walk
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS

# Calls and subscripts whose value is a string whenever the program runs (with a string default or none).
_STRING_READS = frozenset({"os.environ.get", "os.getenv", "environ.get", "getenv", "input"})
_STRING_TABLES = frozenset({"os.environ", "environ", "sys.argv", "argv"})
# What marks a branch as one that places or moves something on a device.
_DEVICE_WORDS = ("cuda", "device", "gpu", "dev")


class StringComparedWithNumber(Rule):
    code = "MP025"
    needs = FLOW_WORDS  # (a split names a second device: words.py)

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        strings = _names_always_strings(ctx.module)
        for test, decided in _device_tests(ctx.module):
            flag = _falsy_looking_flag(test, strings)
            if flag is not None:
                text, default = flag
                where = _origin(text, strings, ctx)
                yield self.finding(
                    ctx,
                    text,
                    f"`{ctx.code(text)}`{where.replace(', bound', ' (bound', 1) + ')' if where else ''} is a string, read "
                    f"here as a flag: its default "
                    f"{ctx.code(default)} is a non-empty string, which is true, so the test is true whenever the "
                    f"variable is unset (or set to {ctx.code(default)}), and the branch it guards (line "
                    f"{ctx.line(decided)}) runs on every run. Compare it with what switches it on: "
                    f'`{ctx.code(text)} == "1"`.',
                    suggestion=f'test `{ctx.code(text)} == "1"` (or `.lower() in ("1", "true")`)',
                )
                continue
            for cmp in walk(test):
                if not isinstance(cmp, cst.Comparison) or len(cmp.comparisons) != 1:
                    continue
                op = cmp.comparisons[0].operator
                if not isinstance(op, (cst.Equal, cst.NotEqual)):
                    continue
                left, right = cmp.left, cmp.comparisons[0].comparator
                pair = (left, right) if _number(right) is not None else (right, left)
                text, number = pair
                if _number(number) is None or not _always_a_string(text, strings):
                    continue
                always = "False" if isinstance(op, cst.Equal) else "True"
                where = _origin(text, strings, ctx)
                yield self.finding(
                    ctx,
                    cmp,
                    f"`{ctx.code(cmp)}` compares a string (`{ctx.code(text)}`{where}) with the number "
                    f"{ctx.code(number)}: a string never equals a number in Python, so the test is always {always}, "
                    f"and the branch it guards (line {ctx.line(decided)}) decides the devices the same way on every "
                    f"run. Convert the string first: `int({ctx.code(text)})`, or compare with "
                    f'"{ctx.code(number)}".',
                    suggestion=f"compare `int({ctx.code(text)})` with {ctx.code(number)}",
                )


# Defaults that read as "off" but are non-empty strings, so true (`os.environ.get("PROFILE", "0")`).
_FALSY_LOOKING = frozenset({"0", "false", "no", "off", "n", "f", "none", "disable", "disabled"})


def _falsy_looking_flag(
    test: cst.BaseExpression, strings: dict[str, cst.CSTNode]
) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(the string, its default) where `test` reads for its truth a string from the environment whose default
    looks false but is a non-empty string: `if PROFILE:`, `if not os.getenv("FAST", "0"):`, `A and B`."""
    todo = [test]
    while todo:
        e = todo.pop()
        if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
            todo.append(e.expression)
        elif isinstance(e, cst.BooleanOperation):
            todo += [e.left, e.right]
        else:
            read = strings.get(e.value) if isinstance(e, cst.Name) else e
            default = _string_default(read) if read is not None else None
            if default is not None:
                return e, default
    return None


def _string_default(read: cst.CSTNode) -> cst.BaseExpression | None:
    """The default of `os.environ.get(key, "0")` / `os.getenv(key, "false")` when it looks false, else None."""
    if not (isinstance(read, cst.Call) and dotted(read.func) in _STRING_READS and len(read.args) == 2):
        return None
    default = read.args[1].value
    if isinstance(default, cst.SimpleString) and str(default.evaluated_value).strip().lower() in _FALSY_LOOKING:
        return default
    return None


def _number(e: cst.BaseExpression) -> int | float | None:
    """An int or float literal (`1`, `-1`, `2.0`), not True/False."""
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Minus):
        inner = _number(e.expression)
        return -inner if inner is not None else None
    if isinstance(e, (cst.Integer, cst.Float)):
        return e.evaluated_value
    return None


def _read_as_string(e: cst.BaseExpression) -> bool:
    """`os.environ.get("K")`, `os.getenv("K", "1")`, `os.environ["K"]`, `sys.argv[1]`, `input()`: a string on
    every run. Not with a default of another type (`os.environ.get("K", 1)` is 1 while unset)."""
    if isinstance(e, cst.Call) and dotted(e.func) in _STRING_READS:
        default = e.args[1].value if len(e.args) > 1 else None
        return default is None or isinstance(default, (cst.SimpleString, cst.ConcatenatedString))
    if isinstance(e, cst.Subscript) and dotted(e.value) in _STRING_TABLES:
        index = e.slice[0].slice if len(e.slice) == 1 else None
        return isinstance(index, cst.Index)  # one item, not a slice (`sys.argv[1:]` is a list)
    if isinstance(e, cst.Call) and isinstance(e.func, cst.Attribute) and e.func.attr.value in ("strip", "lower"):
        return _read_as_string(e.func.value)  # `os.environ.get("K", "0").strip()`
    return False


def _names_always_strings(module: cst.Module) -> dict[str, cst.CSTNode]:
    """Names every binding of which in the file is a read of the environment or the command line (or a string
    literal, one of them being such a read): name -> that read. A name bound any other way anywhere (a parameter,
    a loop target, an import, another value) is left out."""
    bindings = name_bindings(module)
    out: dict[str, cst.CSTNode] = {}
    for name, values in bindings.items():
        reads = [v for v in values if v is not None and _read_as_string(v)]
        literal = all(v is not None and (_read_as_string(v) or isinstance(v, cst.SimpleString)) for v in values)
        if reads and literal:
            out[name] = reads[0]
    return out


def _always_a_string(e: cst.BaseExpression, strings: dict[str, cst.CSTNode]) -> bool:
    return _read_as_string(e) or (isinstance(e, cst.Name) and e.value in strings)


def _origin(e: cst.BaseExpression, strings: dict[str, cst.CSTNode], ctx: FileContext) -> str:
    """`, read at line 12 by os.environ.get(...)` for a name; '' for the read itself."""
    if isinstance(e, cst.Name) and e.value in strings:
        read = strings[e.value]
        func = read.func if isinstance(read, cst.Call) else read.value if isinstance(read, cst.Subscript) else read
        return f", bound by `{ctx.code(func)}` at line {ctx.line(read)}"
    return ""


def _device_tests(module: cst.Module) -> Iterator[tuple[cst.BaseExpression, cst.CSTNode]]:
    """(the test, its branch) of every `if`, `elif` and conditional expression whose branches name a device."""
    for n in walk(module):
        if isinstance(n, cst.If):
            branches: list[cst.CSTNode] = [n.body] + ([n.orelse] if n.orelse is not None else [])
            if any(_names_a_device(b) for b in branches):
                yield n.test, n.body
        elif isinstance(n, cst.IfExp) and (_names_a_device(n.body) or _names_a_device(n.orelse)):
            yield n.test, n.body


def _names_a_device(node: cst.CSTNode) -> bool:
    for n in walk(node):
        if isinstance(n, cst.Name) and any(w in n.value.lower() for w in _DEVICE_WORDS):
            return True
        if isinstance(n, cst.Attribute) and n.attr.value in ("to", "cuda", "device"):
            return True
        if isinstance(n, cst.SimpleString) and "cuda" in n.value:
            return True
    return False
