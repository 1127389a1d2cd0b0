"""configparser, as the linter reads it: `cp = configparser.ConfigParser()`, `cp.read_string(INI)` of a text the
file spells out, then `cp["placement"]["encoder"]`, `cp.get("placement", "encoder")`, or `section.getint("gpus")`.

The parser is a DictV of sections (`ini` set), each a DictV of the section's options as strings (with the
DEFAULT section's options and configparser's own interpolation applied: the standard library reads the text).
Anything else (a file read with `cp.read(path)`, a text not known) leaves it empty: its values are not known.
"""

from __future__ import annotations

import configparser
from typing import Any

from mpcheck.devices.values import UNK, Const, DictV, Val

# Section methods that convert an option, as configparser does.
_CONVERTERS: dict[str, Any] = {"getint": int, "getfloat": float}


def new_parser() -> DictV:
    return DictV({}, ini=True)


def read_string(parser: DictV, text: Val) -> Val:
    """`cp.read_string(text)`: the parser filled in place with the sections of a known text."""
    if not (isinstance(text, Const) and isinstance(text.value, str)):
        return Const(None)
    reader = configparser.ConfigParser()
    try:
        reader.read_string(text.value)
        sections = {name: DictV({k: Const(v) for k, v in reader[name].items()}, ini=True) for name in reader.sections()}
    except (configparser.Error, ValueError):  # a text configparser refuses, or an interpolation it cannot make
        return Const(None)
    parser.items.update(sections)
    return Const(None)


def method(recv: DictV, meth: str, args: list[Val]) -> Val | None:
    """A configparser method on a parser or a section (None: not one of theirs, the dict's own methods apply)."""
    if meth == "read_string" and args:
        return read_string(recv, args[0])
    if meth not in ("get", "getint", "getfloat", "getboolean"):
        return None
    keys = [a.value if isinstance(a, Const) and isinstance(a.value, str) else None for a in args]
    section = recv
    if recv.items and all(isinstance(v, DictV) for v in recv.items.values()) and len(keys) >= 2:
        # the parser: `cp.get("placement", "encoder")`
        inner = recv.items.get(keys[0]) if keys[0] is not None else None
        if not isinstance(inner, DictV):
            return UNK
        section, keys = inner, keys[1:]
    if not keys or keys[0] is None:
        return UNK
    found = section.items.get(keys[0].lower())  # (options are read lower-cased, as configparser stores them)
    if not (isinstance(found, Const) and isinstance(found.value, str)):
        return UNK
    if meth == "get":
        return found
    try:
        if meth == "getboolean":
            return Const(configparser.ConfigParser.BOOLEAN_STATES[found.value.lower()])
        return Const(_CONVERTERS[meth](found.value))
    except (KeyError, ValueError):
        return UNK
