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

Only `ast` is used (about 7x faster than a libcst parse). None where the cut
would be unsafe or useless: the text does not parse (the caller parses it
whole and fails the same way), or everything is needed anyway.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

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
    in their order, each whole; None when `text` is better summarised whole."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body = tree.body
    has_global = "global" in text  # else no function can bind a module name (a cheap pre-check)
    binders: dict[str, list[int]] = {}
    for i, stmt in enumerate(body):
        for name in _binds(stmt, has_global):
            binders.setdefault(name, []).append(i)
    keep: set[int] = set()
    needed: set[str] = set()
    todo: list[str] = []

    def take(i: int) -> None:
        keep.add(i)
        new = _mentions(body[i]) - needed
        needed.update(new)
        todo.extend(new)

    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.ImportFrom) and (stmt.module == "__future__" or any(a.name == "*" for a in stmt.names)):
            take(i)
    new = set(names) - needed
    needed.update(new)
    todo.extend(new)
    while todo:
        for i in binders.get(todo.pop(), ()):
            if i not in keep:
                take(i)
    if len(keep) == len(body):
        return None
    lines = _LINE.findall(text)
    # Two statements on one line (`a = 1; b = 2`) both kept: the line once.
    out: list[str] = []
    last_first = -1
    for i in sorted(keep):
        stmt = body[i]
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", ())])
        last = stmt.end_lineno or stmt.lineno
        if first <= last_first:
            first = last_first + 1
        out.extend(lines[first - 1 : last])
        last_first = max(last_first, last)
    text_out = "".join(out)
    return text_out if text_out.endswith(("\n", "\r")) or not text_out else text_out + "\n"


def _binds(stmt: ast.stmt, has_global: bool) -> set[str]:
    """Every name `stmt` may bind in the module's namespace (`has_global`: whether a
    function may declare a name `global`)."""
    out: set[str] = set()
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            # `global X` in a function (or a method) binds X here when it runs.
            if has_global:
                out.update(n for g in ast.walk(node) if isinstance(g, ast.Global) for n in g.names)
            todo.extend(getattr(node, "decorator_list", ()))
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.add(node.rest)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _mentions(stmt: ast.stmt) -> set[str]:
    """Every identifier in `stmt`, nested scopes included (a method's body reads module names)."""
    out: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            out.update(node.names)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name.split(".")[0])
    return out
