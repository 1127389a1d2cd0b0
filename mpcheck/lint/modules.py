"""Dotted module names of files, and the files behind imported names.

A file's module name follows its package chain (folders with `__init__.py`):
`src/pkg/sub/model.py` is `pkg.sub.model`, its import root is `src/`. An
imported name is looked up under the importing file's root, then the project
root and its `src/`, which is where `import pkg` would find it too, then the
working folder: a script run as `python -m training.train` from a repository,
or one that appends the repository to `sys.path`, imports from there.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache


@lru_cache(maxsize=4096)
def _is_package(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "__init__.py"))


def module_name(abspath: str) -> tuple[str, str, bool]:
    """(dotted name, import root, is a package's __init__) of a .py file."""
    folder, filename = os.path.split(abspath)
    stem = filename[:-3] if filename.endswith(".py") else filename
    is_init = stem == "__init__"
    parts = [] if is_init else [stem]
    while _is_package(folder):
        folder, pkg = os.path.split(folder)
        parts.append(pkg)
        if not pkg:  # reached the filesystem root
            break
    parts.reverse()
    return ".".join(parts) or stem, folder, is_init


def import_name(modname: str, is_init: bool) -> str:
    """The name imports() takes for a file: a package's __init__ as `pkg.__init__`,
    so that its `from . import x` resolves against the package itself."""
    return f"{modname}.__init__" if is_init else modname


@lru_cache(maxsize=65536)
def resolve_in(root: str, modname: str) -> str | None:
    """The file for `modname` under `root`, or None."""
    base = os.path.join(root, *modname.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def resolve(modname: str, roots: tuple[str, ...]) -> str | None:
    for root in roots:
        found = resolve_in(root, modname)
        if found is not None:
            return found
    return None


# `from .config import device0, device1 as d1` (also parenthesised over several lines); comments dropped.
_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
# A module-level binding on one line: `device0 = torch.device("cuda:0")`, `STAGES: list[str] = [...]`.
_TOP_BINDING = re.compile(r"^([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)([^\n]*)$", re.M)


def from_imports(source: str, modname: str, is_init: bool) -> list[tuple[str, str]]:
    """(module, name) of every `from module import name` in `source`, relative imports made absolute
    against `modname` (a package's `__init__` when `is_init`). Text only, no parse: a line inside a
    string that looks like an import adds a pair, which only widens what is looked at."""
    if "import" not in source:
        return []
    package = modname.split(".") if is_init else modname.split(".")[:-1]
    found: dict[tuple[str, str], None] = {}
    for m in _FROM_IMPORT.finditer(source):
        dots, module, names = m.group(1), m.group(2), m.group(3)
        if dots:
            up = len(dots) - 1
            if up > len(package):
                continue
            base = package[: len(package) - up]
            module = ".".join([*base, module] if module else base)
        if not module:
            continue
        body = "\n".join(line.split("#", 1)[0] for line in names.strip("()").splitlines())
        for part in body.replace("\\", " ").split(","):
            name = part.partition(" as ")[0].strip().strip("()")
            if name.isidentifier():
                found[(module, name)] = None
    return list(found)


def top_bindings(source: str) -> dict[str, str]:
    """name -> the right-hand side of its module-level one-line assignments (the last one wins)."""
    return {m.group(1): m.group(2) for m in _TOP_BINDING.finditer(source)}
