"""The rule registry: every module `mpNNN_*.py` in this package holds one Rule.

Adding a rule means adding its entry to mpcheck/codes.py, one module here and its
document in rules/; nothing else needs to be edited.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import cache

from mpcheck.rules.base import Rule

_RULE_MODULE = re.compile(r"^mp\d{3}_\w+$")


@cache
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code."""
    found: list[type[Rule]] = []
    for info in pkgutil.iter_modules(__path__):
        if not _RULE_MODULE.match(info.name):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Rule)
                and obj is not Rule
                and obj.__module__ == module.__name__
            ):
                found.append(obj)
    found.sort(key=lambda r: r.code)
    codes = [r.code for r in found]
    if len(codes) != len(set(codes)):
        raise RuntimeError(f"duplicate rule codes: {codes}")
    return tuple(found)


def rules_by_code() -> dict[str, type[Rule]]:
    return {r.code: r for r in all_rules()}
