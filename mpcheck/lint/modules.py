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


# A module-level binding on one line: `device0 = torch.device("cuda:0")`, `STAGES: list[str] = [...]`.
_TOP_BINDING = re.compile(r"^([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)([^\n]*)$", re.M)


# A module-level class and its indented body: `class C:` then `    device = "cuda:1"`.
_TOP_CLASS = re.compile(r"^class[ \t]+([A-Za-z_]\w*)[^\n]*\n((?:[ \t]+[^\n]*\n|[ \t]*\n)*)", re.M)


# A one-line assignment in a class body: `    device = "cuda:1"`, `    device: str = "cuda:1"` (its indent, the line).
_CLASS_BINDING = re.compile(r"^([ \t]+)([A-Za-z_]\w*[ \t]*(?::[^=\n]*)?=(?!=)[^\n]*)$", re.M)


def top_bindings(source: str) -> dict[str, str]:
    """name -> the right-hand side of its module-level one-line assignments (the last one wins), or,
    for a module-level class, the one-line assignments of its body's own level (the constants an
    importer reads as `C.device`; not its methods' code)."""
    out = {m.group(1): _class_constants(m.group(2)) for m in _TOP_CLASS.finditer(source)}
    out.update((m.group(1), m.group(2)) for m in _TOP_BINDING.finditer(source))
    return out


def _class_constants(body: str) -> str:
    lines = [(m.group(1), m.group(2)) for m in _CLASS_BINDING.finditer(body)]
    first = next((line for line in body.splitlines() if line.strip()), "")
    indent = first[: len(first) - len(first.lstrip())]
    return "\n".join(text for ind, text in lines if ind == indent)
