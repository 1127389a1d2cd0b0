"""Answers worked out once per libcst node (a loop's assigned names, a module's attribute
assignments, whether a method places parts) and shared by every question about that node
while one file is analysed.

A table keys a node by its id and holds the node itself, so that an id reused by a later
object never answers for it. Holding the node keeps its whole subtree alive, so every table
is emptied when a file's analysis or summary ends (analysis.py: forget_trees): a worker that
kept the trees of the files before would hold hundreds of thousands of objects per file, all
scanned again by each garbage collection (linting torch, a tenth of the CPU). The same goes for
the interpreter's objects that point at each other (a class and its methods): they are released
then too, and the tree goes by reference counting, not at the next collection.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

A = TypeVar("A")

_TABLES: list[dict[int, tuple[Any, Any]]] = []


def node_table() -> dict[int, tuple[Any, Any]]:
    """A new table: id(node) -> (node, answer), emptied by forget_trees."""
    table: dict[int, tuple[Any, Any]] = {}
    _TABLES.append(table)
    return table


def recall(table: dict[int, tuple[Any, Any]], node: object) -> Any | None:
    """The answer kept for `node`, or None."""
    got = table.get(id(node))
    return got[1] if got is not None and got[0] is node else None


def keep(table: dict[int, tuple[Any, Any]], node: object, answer: A) -> A:
    table[id(node)] = (node, answer)
    return answer


class Releasable(Protocol):
    def release(self) -> None: ...


# Objects made during this file's analysis that point at each other and at its nodes (a class's methods
# point back at their class): released when the file is done, so that no cycle keeps its tree alive.
_MADE: list[Releasable] = []


def made(obj: Releasable) -> None:
    """`obj.release()` when the file is done (forget_trees)."""
    _MADE.append(obj)


def forget_trees() -> None:
    """Empty every table, release what was made for the file (a file is done)."""
    for table in _TABLES:
        table.clear()
    for obj in _MADE:
        obj.release()
    _MADE.clear()
