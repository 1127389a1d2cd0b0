"""libcst's parser, with node constructors fit for parsing: every libcst tree mpcheck reads comes from here.

The parser builds each node by calling its class, a frozen dataclass, and two costs of that
constructor are for trees built by hand, which the parser's grammar makes needless:

- `CSTNode.__post_init__` validates the node (a space after `lambda`, parentheses that match):
  a fifth of every parse (torch's `_inductor/*.py`: 4.2 s -> 3.3 s of CPU). No file that parses
  with it fails without it (none of the 6,965 files of the venv's site-packages either way), and
  libcst's own comment there says validation is better left out of parsing.
- a frozen dataclass stores each field with `object.__setattr__(self, name, value)`, a lookup
  and a generic call per field, where the field's slot descriptor can store it directly.

So while the parser runs, each node class has an `__init__` that takes the same parameters
(same kinds, defaults and default factories as the dataclass's own), stores them through the
class's slots and calls no `__post_init__`: a parse of torch's `_inductor/ir.py`,
`nn/functional.py` and `_inductor/scheduler.py` 2.49 s -> 1.97 s (docs/measurements.md, session 12).
The classes get their own constructors back when the parse ends, even by an exception, so a
node mpcheck builds itself (a fix) is checked as libcst checks it. One thread per process:
mpcheck builds no node while a parse runs. tests/test_parsing.py compares the trees with
`libcst.parse_module`'s over real files.

A node class that is not a slotted dataclass (another libcst release may change its internals)
keeps its own constructor, with validation off as for the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import libcst as cst

# class -> (libcst's __init__, the parse-time one); None until first use, {} when not possible
_CONSTRUCTORS: dict[type, tuple[Any, Any]] | None = None


def parse(source: str) -> cst.Module:
    """`libcst.parse_module(source)`, built with the parse-time constructors."""
    import libcst as cst  # here: a run whose files are all cached never needs libcst

    try:
        from libcst._nodes.base import CSTNode  # libcst's internals: see the module's docstring

        checked = CSTNode.__dict__["__post_init__"]
    except (ImportError, KeyError):
        return cst.parse_module(source)
    constructors = _constructors(CSTNode)
    CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]  # for a class left with its own __init__
    for cls, (_, fast) in constructors.items():
        cls.__init__ = fast  # type: ignore[misc]
    try:
        return cst.parse_module(source)
    finally:
        CSTNode.__post_init__ = checked  # type: ignore[method-assign]
        for cls, (own, _) in constructors.items():
            cls.__init__ = own  # type: ignore[misc]


def parse_or_none(source: str) -> cst.Module | None:
    """The libcst tree of `source`, None when it does not parse."""
    try:
        return parse(source)
    except Exception:  # noqa: BLE001  (any parse failure: the file has no summary)
        return None


def _unchecked(self: object) -> None:
    """CSTNode.__post_init__ while the parser runs, for a class whose own __init__ calls it."""


def _constructors(base: type) -> dict[type, tuple[Any, Any]]:
    """Each node class's own __init__ and its parse-time one (a class that cannot have one is left out)."""
    global _CONSTRUCTORS
    if _CONSTRUCTORS is None:
        made = {}
        for cls in _node_classes(base):
            try:
                made[cls] = (cls.__dict__["__init__"], _parse_time_init(cls))
            except (TypeError, AttributeError, SyntaxError):  # not a slotted dataclass like the others
                continue
        _CONSTRUCTORS = made
    return _CONSTRUCTORS


def _node_classes(base: type) -> Iterator[type]:
    """The node classes below `base`: slotted dataclasses. `dataclass(slots=True)` makes a new class;
    the one it replaced may still be listed by `__subclasses__` (no slots: left out)."""
    seen: set[type] = set()
    todo = [base]
    while todo:
        cls = todo.pop()
        sub: type
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
                if dataclasses.is_dataclass(sub) and "__init__" in sub.__dict__ and "__slots__" in sub.__dict__:
                    yield sub


def _parse_time_init(cls: type) -> Any:
    """An `__init__` for `cls` with the dataclass's parameters that stores them through the slots."""
    names: dict[str, Any] = {"_MISSING": dataclasses.MISSING}
    positional: list[str] = []
    keyword_only: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        slot = getattr(cls, f.name)
        if not f.init or type(slot).__name__ != "member_descriptor":
            raise TypeError(f"{cls.__name__}.{f.name} is not a slot set by __init__")
        # A slot's own __set__: what object.__setattr__ ends in, without the lookups (0.6 us a node)
        names[f"_set_{f.name}"] = slot.__set__
        if f.default is not dataclasses.MISSING:
            names[f"_default_{f.name}"] = f.default
            param = f"{f.name}=_default_{f.name}"
            value = f.name
        elif f.default_factory is not dataclasses.MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            param = f"{f.name}=_MISSING"
            value = f"_factory_{f.name}() if {f.name} is _MISSING else {f.name}"
        else:
            param = value = f.name
        (keyword_only if f.kw_only else positional).append(param)
        body.append(f"    _set_{f.name}(self, {value})\n")
    params = ", ".join(["self", *positional, *(["*", *keyword_only] if keyword_only else [])])
    exec(f"def __init__({params}):\n{''.join(body) or '    pass'}\n", names)  # noqa: S102  (our own text)
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init
