"""Imports and aliases, resolved from the import statements themselves.

libcst's scope and qualified-name providers cost 5-10x a parse; a file's
imports are a handful of statements, so reading them directly is enough:
`from torch.nn import DataParallel as DP` binds DP -> torch.nn.DataParallel,
`import torch.nn.parallel as par` binds par -> torch.nn.parallel.
Also the two readings of an expression as written that the interpreter and the rules share: its dotted
name (`self.head.weight`) and whether it is a number (`a_number`).
"""

from __future__ import annotations

import libcst as cst

from mpcheck.devices.torchapi import REEXPORT_PREFIXES, REEXPORTS


def canonical(q: str) -> str:
    """One name per object: `torch.nn.DataParallel` -> `torch.nn.parallel.DataParallel`."""
    for old, new in REEXPORT_PREFIXES:
        if q.startswith(old):
            q = new + q[len(old) :]
            break
    return REEXPORTS.get(q, q)


def dotted(node: cst.BaseExpression) -> str | None:
    """'a.b.c' for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def a_number(e: cst.BaseExpression) -> bool:
    """A number as written: a literal (`1024.0`, `-1`, `True`), arithmetic on numbers, or `math.log(...)`,
    `float(...)`, `int(...)`: what `torch.tensor(...)` makes a one-number tensor of (MP011 reads it too)."""
    if isinstance(e, (cst.Integer, cst.Float)):
        return True
    if isinstance(e, cst.Name):
        return e.value in ("True", "False")
    if isinstance(e, cst.UnaryOperation):
        return a_number(e.expression)
    if isinstance(e, cst.BinaryOperation):
        return a_number(e.left) and a_number(e.right)
    if isinstance(e, cst.Call):
        name = dotted(e.func) or ""
        return name.startswith("math.") or name in ("float", "int")
    return False


def resolve_relative(level: int, module: str | None, modname: str, is_package: bool = False) -> str:
    base = modname.split(".")
    # A module's own package is its name minus the last part (unless it is a package's __init__).
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)] if level - 1 <= len(base) else []
    if module:
        base = base + module.split(".")
    return ".".join(base)


def import_bindings(stmt: cst.CSTNode, modname: str = "") -> list[tuple[str, str]]:
    """(local name, dotted target) pairs bound by one Import/ImportFrom."""
    out: list[tuple[str, str]] = []
    if isinstance(stmt, cst.Import):
        for alias in stmt.names:
            full = dotted(alias.name)
            if not full:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                out.append((alias.asname.name.value, full))
            else:
                top = full.split(".")[0]
                out.append((top, top))
    elif isinstance(stmt, cst.ImportFrom):
        mod = dotted(stmt.module) if stmt.module is not None else None
        level = len(stmt.relative)
        if level:
            is_pkg = modname.endswith(".__init__")
            name = modname[: -len(".__init__")] if is_pkg else modname
            mod = resolve_relative(level, mod, name, is_pkg)
        if not mod or isinstance(stmt.names, cst.ImportStar):
            return out
        for alias in stmt.names:
            if not isinstance(alias.name, cst.Name):
                continue
            local = alias.name.value
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            out.append((local, f"{mod}.{alias.name.value}"))
    return out
