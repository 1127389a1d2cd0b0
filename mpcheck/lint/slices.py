"""The part of a module that the summaries of some of its names need.

A file that imports two names from a 400 kB module needs the summaries of those
two names only (the device model looks a summary up for nothing else), and a
summary of a class or function reads only the module-level names its code
mentions: the classes, functions, imports and constants they are bound to. So
the module is cut, before libcst ever sees it, down to the top-level
statements that bind a wanted name, then those binding a name that a kept
statement mentions, and so on; the rest (usually most of the module) is
neither parsed by libcst nor interpreted. Linting torch's `_inductor/ir.py`
summarised 2.6 MB of imported modules to use a few dozen of their names.

A statement is kept whole and in its place among the others (the order of
definitions matters: a base class before its subclasses, a constant before
the next one that uses it). "Mentions" is every identifier in the statement,
function bodies included, and "binds" every name it may bind at module level
(in an `if` or `try` too, and through `global` in a function): more than the
summary needs, never less. `from m import *` is always kept (it may bind
anything), as is `from __future__ import ...` (it may change the grammar).

A kept class is cut too: a class summary runs `__init__` and `forward`, and a
method runs only when code calls or reads it by name (`self.encode(x)`,
`self.device` of a property, `super().setup()`). So a method is kept when its
name is mentioned by kept code (an attribute, a name or a string of it), and
always when it is `forward` or a dunder (called without its name written).
The device model also reads two facts off a whole class: whether a method
moves the instance itself (`self.to(...)`, devices/unmoved.py: such a method
is kept) and which attributes methods other than `__init__` assign
(devices/moves.py): a method left out is replaced by a one-line stub that
assigns those same `self.` attributes, so both facts, and the methods' names
and order, stay those of the whole class.

Only `ast` is used (about 7x faster than a libcst parse), and only on the
statements the cut reads: the text is first split at its top-level statements
without a parse (_split), each `def` and `class` is known by its name until the
cut takes it, and only the other statements (imports, assignments, `if`
blocks: what binds names in ways a line cannot say) are parsed up front. The
modules `_inductor/ir.py` imports are 2.8 MB, of which the cut keeps 0.35 MB:
`ast` parsed all of it before. None where the cut would be unsafe or useless:
the text does not parse where the cut reads it (the caller parses it whole and
fails the same way), or everything is needed anyway. A syntax error inside a
`def` or `class` the cut leaves out goes unseen here: the names looked up are
summarised from the statements that parse.
"""

from __future__ import annotations

import ast
import bisect
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from typing import Any

from mpcheck.devices.torchapi import DEFAULT_DEVICE_CHANGERS

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def summary_source(text: str, names: Iterable[str]) -> str:
    """What to summarise of a module's `text` when other files look up only `names` in it."""
    # A default-device change met while summarising one name changes the summaries of the
    # names after it (Interp.default_device_changed): such a module is summarised whole.
    if any(w in text for w in DEFAULT_DEVICE_CHANGERS):
        return text
    sliced = needed_source(text, names)
    return text if sliced is None else sliced


def needed_source(text: str, names: Iterable[str]) -> str | None:
    """The top-level statements of `text` that the summaries of `names` can depend on,
    in their order (a class with only the methods they can reach, the others stubbed);
    None when `text` is better summarised whole."""
    cut = _cut(text, names)
    return None if cut is None else cut.source()


def summary_tree(module: Any, text: str, names: Iterable[str]) -> Any:
    """What `parse(summary_source(text, names))` gives, made from `module` (the libcst
    tree of the whole `text`, parsed already to lint it) instead of parsing the cut
    text: the kept statements are the tree's own nodes, a dropped method is replaced
    by the same one-line stub. None when the tree cannot be cut the same way (the
    caller parses the cut text then). A file that is linted and also imported by
    others was parsed twice, once whole and once cut (382 of the 495 modules
    summarised when linting torch's site-packages)."""
    import libcst as cst

    if any(w in text for w in DEFAULT_DEVICE_CHANGERS):
        return module
    cut = _cut(text, names, whole=True)
    if cut is None:
        return module
    body = _aligned(module.body, cut.body)  # type: ignore[arg-type]  # whole: every statement parsed
    if body is None:
        return None
    kept: list[Any] = []
    for node, stmts in body:
        if not any(j in cut.keep for j in stmts):
            continue
        dropped = cut.dropped.get(stmts[0]) if len(stmts) == 1 else None
        if not dropped:
            kept.append(node)
            continue
        cls = cut.body[stmts[0]]
        assert isinstance(cls, ast.ClassDef)
        inner = _aligned(node.body.body, cls.body)
        if inner is None or not isinstance(node.body, cst.IndentedBlock):
            return None
        members: list[Any] = []
        for member, js in inner:
            s = cls.body[js[0]]
            if len(js) > 1 or id(s) not in dropped:  # `a = 1; b = 2`: never a method
                members.append(member)
                continue
            assert isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            stub = _stub_body(s) if "self" in cut.segment(s) else "pass"
            members.append(cst.parse_statement(f"def {s.name}(self): {stub}\n"))
        kept.append(node.with_changes(body=node.body.with_changes(body=members)))
    return module.with_changes(body=kept)


def _aligned(nodes: Sequence[Any], stmts: list[ast.stmt]) -> list[tuple[Any, tuple[int, ...]]] | None:
    """Each libcst statement of a block with the indices of its `ast` statements (`a = 1; b = 2`
    is one libcst line, two `ast` statements); None where they do not line up, or where a line
    of several statements spans several lines (the cut text may keep only part of it)."""
    import libcst as cst

    out: list[tuple[Any, tuple[int, ...]]] = []
    at = 0
    for node in nodes:
        count = len(node.body) if isinstance(node, cst.SimpleStatementLine) else 1
        if at + count > len(stmts):
            return None
        if count > 1 and len({n for s in stmts[at : at + count] for n in (s.lineno, s.end_lineno)}) != 1:
            return None
        out.append((node, tuple(range(at, at + count))))
        at += count
    return out if at == len(stmts) else None


def _cut(text: str, names: Iterable[str], whole: bool = False) -> _Cut | None:
    """The cut of `text` for `names`; None when `text` is better summarised whole.
    `whole`: parse every statement (summary_tree lines the cut up with the whole tree)."""
    lines = _LINE.findall(text)
    starts = [0]  # offset of each line's start, and of the end
    for line in lines:
        starts.append(starts[-1] + len(line))
    try:
        split = None if whole else _split(text, starts)
        body: list[ast.stmt | _Unparsed] = list(_parse(text).body) if split is None else split
        cut = _Cut(body, text, lines, starts)
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.ImportFrom) and (
                stmt.module == "__future__" or any(a.name == "*" for a in stmt.names)
            ):
                cut.take(i)
        cut.need(set(names))
        cut.run()
    except (SyntaxError, ValueError, RecursionError, MemoryError, _NotAsSplit):
        return None if whole else _cut(text, names, whole=True)
    if len(cut.keep) == len(body) and not any(cut.dropped.values()):
        return None
    return cut


def _parse(text: str) -> ast.Module:
    with warnings.catch_warnings():  # `"\d"` and the like: the user's file is not ours to warn about
        warnings.simplefilter("ignore")
        return ast.parse(text)


class _NotAsSplit(Exception):
    """A statement _split set apart is not one `def` or `class` of that name: parse it all."""


class _Unparsed:
    """A top-level `def` or `class` not parsed yet (_split): its lines, the name it binds and,
    for a class, the names of the functions it defines (those of its methods and more)."""

    __slots__ = ("first", "last", "name", "is_class", "inner")

    def __init__(self, first: int, last: int, name: str, is_class: bool, inner: list[str]) -> None:
        self.first, self.last, self.name, self.is_class, self.inner = first, last, name, is_class, inner


# A line of code (strings and comments blanked) that starts a top-level statement: anything at
# column 0 but white space, a comment or a closing bracket (those continue a statement).
_STATEMENT_START = re.compile(r"^[^ \t\r\n#)\]}]", re.M)
_CLAUSE = re.compile(r"(?:else|elif|except|finally)(?!\w)")
_DEFINITION = re.compile(r"(?:async[ \t]+)?def[ \t]+(\w+)|class[ \t]+(\w+)")
_INNER_DEF = re.compile(r"^[ \t]+(?:async[ \t]+)?def[ \t]+(\w+)", re.M)
_HEADER_MARK = re.compile(r"[()\[\]{}:]")
_GLOBAL = re.compile(r"(?<![\w.])global(?!\w)")
_CONTINUED = re.compile(r"\\(?:\r\n|\r|\n)")


def _split(text: str, starts: list[int]) -> list[ast.stmt | _Unparsed] | None:
    """The top-level statements of `text` in order, without parsing the `def`s and `class`es
    (_Unparsed); None where the text is not split this way (it is parsed whole).

    A top-level statement starts at column 0 of a line that is outside every string, bracket
    and backslash continuation (Python's tokenizer gives such a line indent 0), and runs to
    the next such line, unless that one goes on the statement (`else:`, `except`) or the
    statement is a decorator (the `def` or `class` it decorates follows). Strings and comments
    are found by the pre-filter's lexer (lint/livetext.py, checked against `tokenize`) and
    blanked, so that their brackets and lines are not code; a stretch whose brackets do not
    balance runs on to the next start until they do. A statement that is not a definition
    is parsed at once (what it binds, `_binds`, takes its tree); a definition only when the
    cut takes it, and it must then be that definition (_NotAsSplit otherwise)."""
    from mpcheck.lint.livetext import _LEXEME

    if "\f" in text or ("\r" in text and text.count("\r") != text.count("\r\n")):
        return None  # a form feed indents nothing; a line ended by "\r" alone: `^` does not see it

    def blank(m: re.Match[str]) -> str:
        # A string keeps a non-space first character: one at column 0 starts a statement.
        return " " * len(m[0]) if m.group(1) is not None else "_" * len(m[0])

    code = _LEXEME.sub(blank, text)
    heads = [m.start() for m in _STATEMENT_START.finditer(code)]
    if code[: heads[0] if heads else len(code)].strip():
        return None  # an indented first line: not Python
    continued = {bisect.bisect_right(starts, m.end()) - 1 for m in _CONTINUED.finditer(code)}
    # Each statement as [first head, end, the head of its `def` or `class` or -1].
    spans: list[list[int]] = []
    depth = 0
    decorating = False  # the last statement is decorators so far
    for k, at in enumerate(heads):
        end = heads[k + 1] if k + 1 < len(heads) else len(code)
        line = bisect.bisect_right(starts, at) - 1
        if (depth or line in continued) and spans:
            spans[-1][1] = end  # inside brackets or after a backslash: the statement goes on
        elif decorating:
            definition = _DEFINITION.match(code, at)
            if definition is None and not code.startswith("@", at):
                return None
            spans[-1][1] = end
            if definition is not None:
                spans[-1][2], decorating = at, False
        elif _CLAUSE.match(code, at):
            if not spans:
                return None
            spans[-1][1] = end
        else:
            decorating = code.startswith("@", at)
            spans.append([at, end, at if _DEFINITION.match(code, at) else -1])
        piece = code[at:end]
        depth += sum(piece.count(c) for c in "([{") - sum(piece.count(c) for c in ")]}")
        if depth < 0:
            return None
    if depth or decorating:
        return None
    body: list[ast.stmt | _Unparsed] = []
    for at, end, definition_at in spans:
        first, last = bisect.bisect_right(starts, at), bisect.bisect_left(starts, end)
        segment = text[starts[first - 1] : starts[last]]
        found = _DEFINITION.match(code, definition_at) if definition_at >= 0 else None
        name = (found[1] or found[2]) if found is not None else None
        # `global X` in a function, or `:=` in a default, a decorator or a base, binds at module
        # level: `_binds` reads the tree (strings and comments are blanked in `code`).
        if (
            name
            and name.isascii()
            and ":=" not in code[at : _header_end(code, definition_at, end)]
            and _GLOBAL.search(code, at, end) is None
        ):
            is_class = found is not None and found[2] is not None
            inner = _INNER_DEF.findall(code, at, end) if is_class else []
            body.append(_Unparsed(first, last, name, is_class, inner))
            continue
        body.extend(_parse("\n" * (first - 1) + segment).body)
    return body


def _header_end(code: str, at: int, end: int) -> int:
    """Where the header of the definition at `at` ends: its `:` outside brackets (else `end`)."""
    depth = 0
    for m in _HEADER_MARK.finditer(code, at, end):
        c = m[0]
        if c == ":" and depth == 0:
            return m.start()
        depth += 1 if c in "([{" else -1 if c in ")]}" else 0
    return end


class _Cut:
    """The statements kept so far, and the names and identifiers they mention."""

    def __init__(self, body: list[ast.stmt | _Unparsed], text: str, lines: list[str], starts: list[int]) -> None:
        self.body = body
        self.text = text
        self.lines = lines
        self.starts = starts  # offset of each line's start, and of the end
        self.binders: dict[str, list[int]] = {}
        for i, stmt in enumerate(body):
            names = {stmt.name} if isinstance(stmt, _Unparsed) else _binds(stmt, self.segment(stmt))
            for name in names:
                self.binders.setdefault(name, []).append(i)
        # The names of every method of a top-level class: an identifier reaches one (take). Of a
        # class not parsed yet, every function it defines: more names only make _mentions walk more.
        self.methods = {
            name for stmt in body if isinstance(stmt, _Unparsed) and stmt.is_class for name in stmt.inner
        } | {
            s.name
            for stmt in body
            if isinstance(stmt, ast.ClassDef)
            for s in stmt.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.keep: set[int] = set()
        self.needed: set[str] = set()  # module-level names kept code reads
        self.idents: set[str] = set()  # every identifier kept code writes: a method may be reached by it
        self.pending: dict[str, list[tuple[int, ast.stmt]]] = {}  # method name -> (class, method) not kept yet
        self.dropped: dict[int, set[int]] = {}  # class -> ids of its methods not kept (so far)
        self._names: list[str] = []
        self._nodes: list[ast.AST] = []

    def need(self, names: set[str]) -> None:
        new = names - self.needed
        self.needed |= new
        self._names.extend(new)

    def take(self, i: int) -> None:
        self.keep.add(i)
        stmt = self.body[i]
        if isinstance(stmt, _Unparsed):
            stmt = self.body[i] = self._parsed(stmt)
        if not _cuttable(stmt):
            self._nodes.append(stmt)
            return
        assert isinstance(stmt, ast.ClassDef)
        self._nodes.extend([*stmt.decorator_list, *stmt.bases, *stmt.keywords])
        self.dropped[i] = set()
        for s in stmt.body:
            if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._nodes.append(s)
            elif s.name == "forward" or (s.name.startswith("__") and s.name.endswith("__")) or self._moves_itself(s):
                self._nodes.append(s)
            elif s.name in self.idents or _short_property(s):
                self._nodes.append(s)
            else:
                self.dropped[i].add(id(s))
                self.pending.setdefault(s.name, []).append((i, s))

    def _parsed(self, unparsed: _Unparsed) -> ast.stmt:
        """The tree of a definition _split set apart, which must be that one definition."""
        segment = self.text[self.starts[unparsed.first - 1] : self.starts[unparsed.last]]
        tree = _parse("\n" * (unparsed.first - 1) + segment).body
        kinds = (ast.ClassDef,) if unparsed.is_class else (ast.FunctionDef, ast.AsyncFunctionDef)
        if len(tree) != 1 or not isinstance(tree[0], kinds) or tree[0].name != unparsed.name:
            raise _NotAsSplit(unparsed.name)
        return tree[0]

    def run(self) -> None:
        while self._names or self._nodes:
            if self._nodes:
                names, idents = self._mentions(self._nodes.pop())
                self.need(names)
                for ident in idents - self.idents:
                    self.idents.add(ident)
                    for i, method in self.pending.pop(ident, ()):
                        self.dropped[i].discard(id(method))
                        self._nodes.append(method)
                continue
            for i in self.binders.get(self._names.pop(), ()):
                if i not in self.keep:
                    self.take(i)

    def segment(self, stmt: ast.stmt) -> str:
        """The text of the lines `stmt` spans (its decorators included)."""
        return self.text[self.starts[_first_line(stmt) - 1] : self.starts[stmt.end_lineno or stmt.lineno]]

    def lines_of(self, node: ast.AST) -> str:
        """The text of the whole lines `node` spans (more than `node` where a line holds more)."""
        first = _first_line(node) if isinstance(node, ast.stmt) else node.lineno  # type: ignore[attr-defined]
        last = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
        return self.text[self.starts[first - 1] : self.starts[last]]

    def _mentions(self, node: ast.AST) -> tuple[set[str], set[str]]:
        """_mentions(node), or nothing when nothing it mentions can change the cut.

        Walking the node's `ast` was most of the cut's time after the parse (ir.py's 28
        modules), and what a node mentions changes the cut only through two kinds of word:
        a name some statement binds and that is not needed yet, or the name of a method of
        some class not yet reached. Every name and identifier `_mentions` finds is a word of
        the node's lines (_WORD), but for a string whose value is not its text (an escape
        that makes letters, `"\\x65ncode"`, or literals joined, `"enc" "ode"`) and for
        non-ASCII text (an identifier is read NFKC-normalised). So when those lines hold
        no such word (most nodes: their words are needed already, or bound nowhere), the
        node is not walked. The words only choose whether to walk: the cut is the same,
        where keeping every word's binder would have kept half as much text again (words
        of docstrings and of generated code in strings)."""
        text = self.lines_of(node)
        if text.isascii() and not _NOT_AS_SPELLED.search(text):
            # A definition mentions its own name (a method's reaches the same-named methods of
            # classes taken later): that word is given as the walk would, not a reason to walk.
            own = {node.name} if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else set()
            words = set(_WORD.findall(text)) - own
            if (words & self.binders.keys()) <= self.needed and (words & self.methods) <= self.idents:
                return own, set(own)
        return _mentions(node)

    def _moves_itself(self, method: ast.stmt) -> bool:
        seg = self.segment(method)
        if not seg.isascii():
            return "self" in seg and _move_words().search(seg) is not None and _moves_itself(method)
        # `self.to(...)` is spelled `self`, maybe `)`, `.`, the name (spaces, line breaks and comments
        # aside): a method whose text has no such run cannot call it (most methods: no walk).
        return _self_move_calls().search(seg) is not None and _moves_itself(method)

    def source(self) -> str:
        lines = self.lines
        out: list[str] = []
        done = 0  # lines 1..done are out (two statements on one line, `a = 1; b = 2`: the line once)

        def emit(first: int, last: int) -> None:
            nonlocal done
            out.extend(lines[max(first, done + 1) - 1 : last])
            done = max(done, last)

        for i in sorted(self.keep):
            stmt = self.body[i]
            assert not isinstance(stmt, _Unparsed)  # taken, so parsed
            if not self.dropped.get(i):
                emit(_first_line(stmt), stmt.end_lineno or stmt.lineno)
                continue
            assert isinstance(stmt, ast.ClassDef)
            emit(_first_line(stmt), _first_line(stmt.body[0]) - 1)
            for s in stmt.body:
                if id(s) not in self.dropped[i]:
                    emit(_first_line(s), s.end_lineno or s.lineno)
                    continue
                first = _first_line(s)
                indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
                assert isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                body = _stub_body(s) if "self" in self.segment(s) else "pass"
                out.append(f"{indent}def {s.name}(self): {body}\n")
                done = max(done, s.end_lineno or s.lineno)
        text_out = "".join(out)
        return text_out if text_out.endswith(("\n", "\r")) or not text_out else text_out + "\n"


def _first_line(stmt: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(stmt, "decorator_list", [])
    return min([stmt.lineno] + [d.lineno for d in decorators])


def _cuttable(stmt: ast.stmt) -> bool:
    """A class whose methods can be cut: its body starts on a line of its own."""
    return isinstance(stmt, ast.ClassDef) and _first_line(stmt.body[0]) > stmt.lineno


# A word as `ast` reads an ASCII identifier.
_WORD = re.compile(r"[^\W\d]\w*")
# (Each way through the gaps between two literals, or after `self`, is the only one: a comment runs to its
# line's end, a backslash takes its line break whole. A comment that could end anywhere made a banner line of
# `#`s after a string cost 2**n steps to fail: a hang on `_functorch/compilers.py`.)
# Where a string's value may differ from its text in a way that makes a new identifier: an escape
# that gives a letter or a digit (`\x65`, `\u0065`, `\N{...}`, `\145`) or a line break inside the
# string, and two adjacent literals of word characters, joined (`"enc" "ode"`, `'a''b'`).
_NOT_AS_SPELLED = re.compile(
    r"""\\[\r\nxuUN0-7]|["']\w*["'](?:\s|\\\r\n|\\\r(?!\n)|\\\n|#[^\r\n]*(?![^\r\n]))*[rRbBuUfF]{0,2}["']\w*["']"""
)
# Between `self` and `.`: closing brackets; around the `.`: spaces, line breaks, continuations, comments.
_GAP = r"(?:[\s()\\]|#[^\r\n]*(?![^\r\n]))*"


@lru_cache(maxsize=1)
def _self_move_calls() -> re.Pattern[str]:
    """What the text of `self.to(...)`, `(self).cuda(...)`... must contain: a cheap pre-check for
    _moves_itself that the words `self` and `to` (in most methods' text) do not pass."""
    from mpcheck.devices.unmoved import _SELF_MOVES as SELF_MOVES

    words = "|".join(map(re.escape, sorted(SELF_MOVES)))
    return re.compile(rf"\bself\b{_GAP}\.{_GAP}(?:{words})\b")


@lru_cache(maxsize=1)
def _move_words() -> re.Pattern[str]:
    """A cheap pre-check for _moves_itself: one of the method names, as a word."""
    from mpcheck.devices.unmoved import _SELF_MOVES as SELF_MOVES

    return re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(SELF_MOVES))) + r")\b")


def _moves_itself(method: ast.AST) -> bool:
    """Whether the method calls `self.to(...)`, `self.cuda(...)`... (devices/unmoved.py's question)."""
    from mpcheck.devices.unmoved import _SELF_MOVES as SELF_MOVES

    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "self"
        and n.func.attr in SELF_MOVES
        for n in ast.walk(method)
    )


def _short_property(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A `@property` named for a device (`device`, `first_device`), of three statements at most: the
    class summary asks it which device it gives (devices/summary.py, _device_properties), for
    `model.device` in an importer."""
    return (
        "device" in method.name
        and len(method.body) <= 3
        and any(isinstance(d, ast.Name) and d.id == "property" for d in method.decorator_list)
    )


def _stub_body(method: ast.AST) -> str:
    """A body assigning the `self.x` (or `self.x[...]`) that `method` assigns, as devices/moves.py
    reads them off every method but `__init__`: a target that is such an attribute, not unpacked."""
    attrs: list[str] = []
    for n in _statements(method):
        targets: list[ast.expr] = []
        if isinstance(n, ast.Assign):
            targets = n.targets
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
            targets = [n.target]
        for t in targets:
            while isinstance(t, ast.Subscript):
                t = t.value
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                attrs.append(t.attr)
    return " = ".join(f"self.{a}" for a in dict.fromkeys(attrs)) + " = None" if attrs else "pass"


def _statements(node: ast.AST) -> Iterator[ast.AST]:
    """`node` and every statement inside it, nested functions and classes included (an
    assignment is a statement: no need to walk the expressions, most of the nodes)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(n, name, None)
            if isinstance(children, list):
                todo.extend(
                    reversed([c for c in children if isinstance(c, (ast.stmt, ast.excepthandler, ast.match_case))])
                )


def _binds(stmt: ast.stmt, segment: str) -> set[str]:
    """Every name `stmt` (whose text is `segment`) may bind in the module's namespace.
    Names are bound by statements, and by `:=` anywhere: only the statements and their
    targets are walked, the expressions (most of the nodes) only where `:=` is written."""
    out: set[str] = set()
    for node in _module_level(stmt):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            # `global X` in a function (or a method) binds X here when it runs.
            if "global" in segment:
                out.update(n for g in _statements(node) if isinstance(g, ast.Global) for n in g.names)
        elif isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.match_case):
            for p in ast.walk(node.pattern):
                if isinstance(p, (ast.MatchAs, ast.MatchStar)) and p.name:
                    out.add(p.name)
                elif isinstance(p, ast.MatchMapping) and p.rest:
                    out.add(p.rest)
        out.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    if ":=" in segment:
        out.update(_walrus_targets(stmt))
    return out


def _walrus_targets(stmt: ast.stmt) -> set[str]:
    """The targets of the `:=` in `stmt` that bind at module level: not those in the body of a
    function, a lambda or a class (their own scopes: a class's methods were most of the walk),
    whose defaults, decorators and bases are walked (they run at module level)."""
    out: set[str] = set()
    todo: list[ast.AST] = [stmt]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            for name, value in ast.iter_fields(n):
                if name != "body":
                    todo.extend(v for v in (value if isinstance(value, list) else [value]) if isinstance(v, ast.AST))
        else:
            todo.extend(ast.iter_child_nodes(n))
    return out


def _module_level(stmt: ast.stmt) -> Iterator[ast.AST]:
    """`stmt` and the statements inside it that run at module level (not in a function or class body)."""
    todo: list[ast.AST] = [stmt]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(n, name, None)
            if isinstance(children, list):
                todo.extend(c for c in children if isinstance(c, (ast.stmt, ast.excepthandler, ast.match_case)))


def _mentions(node: ast.AST) -> tuple[set[str], set[str]]:
    """(every name `node` reads or writes, nested scopes included: a method's body reads module
    names; every identifier it spells: attributes and identifier-like strings too, by which a
    method may be reached)."""
    names: set[str] = set()
    idents: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            names.update(n.names)
        elif isinstance(n, ast.alias):
            names.add(n.asname or n.name.split(".")[0])
        elif isinstance(n, ast.Attribute):
            idents.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
            idents.add(n.value)
    return names, idents | names
