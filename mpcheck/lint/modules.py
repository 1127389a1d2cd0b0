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

from mpcheck.lint.livetext import LiveText


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


# A module-level assignment: `device0 = torch.device("cuda:0")`, `STAGES: list[str] = [...]`, and one whose
# brackets run over several lines (a settings dict as yaml.safe_load gives it): the lines after the first
# are indented or close the bracket at the margin (`}`), as nothing else at module level can be.
_TOP_BINDING = re.compile(
    r"^([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)([^\n]*(?:\n(?:[ \t]+[^\n]*|[)\]}][^\n]*))*)$", re.M
)


# A module-level class and its indented body: `class C:` then `    device = "cuda:1"`.
_TOP_CLASS = re.compile(r"^class[ \t]+([A-Za-z_]\w*)[^\n]*\n((?:[ \t]+[^\n]*\n|[ \t]*\n)*)", re.M)


# A module-level function and its indented body (its signature's continuation lines too).
_TOP_DEF = re.compile(r"^(?:async[ \t]+)?def[ \t]+([A-Za-z_]\w*)[^\n]*\n((?:[ \t]+[^\n]*\n|[ \t]*\n)*)", re.M)


# A line of code that places something on a named device: `.to("cuda...`, `.cuda(`, a "cuda:..." string
# (`f"cuda:{i}"` too), `device="cuda..."`, `torch.device("cuda...`, `.to(1)`. Not every "cuda" string:
# `device.type == "cuda"` places nothing, and torch's 127 importers of such functions would all be linted.
PLACING = r"""\.to\(\s*["']cuda|\.cuda\(|["']cuda:|device\s*=\s*["']cuda|device\(\s*["']cuda|\.to\(\s*\d"""
_PLACING = re.compile(PLACING)
_PLACING_LINE = re.compile(rf"^[^\n]*?({PLACING})[^\n]*$", re.M)


# A one-line assignment in a class body: `    device = "cuda:1"`, `    device: str = "cuda:1"` (its indent, the line).
_CLASS_BINDING = re.compile(r"^([ \t]+)([A-Za-z_]\w*[ \t]*(?::[^=\n]*)?=(?!=)[^\n]*)$", re.M)


def top_bindings(source: str) -> dict[str, str]:
    """name -> the right-hand side of its module-level assignments (the last one wins); for a
    module-level class, the one-line assignments of its body's own level (the constants an importer
    reads as `C.device`) and the lines of its methods that place something on a named device; for a
    module-level function, those lines of its body. An importer of a class that places its parts
    (`self.b = nn.Linear(4, 4).to("cuda:1")`) gets devices from it without naming one itself:
    `Net()(torch.randn(2, 4))` is an input left on the CPU."""
    bindings = TopBindings(source)
    return {name: side for name in bindings.names() if (side := bindings.get(name)) is not None}


class TopBindings:
    """top_bindings(source), read one name at a time: an importer looks up a few names of a module, and
    reading every class's constants and placing lines of the ~100 modules torch's `_inductor/ir.py`
    imports cost more than its own parse. A name bound by an assignment needs only the assignments;
    one that no `class` or `def` line names needs nothing more either."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._got: dict[str, str | None] = {}
        self._assigned: dict[str, str] | None = None
        self._defined: frozenset[str] | None = None  # every name a top-level class or def line may bind
        # name -> its definitions' bodies, in order (made at the first look-up of a defined name)
        self._classes: dict[str, list[str]] | None = None
        self._defs: dict[str, list[str]] = {}
        self._places = False
        self._tables: re.Pattern[str] | None = None

    def names(self) -> list[str]:
        self._index()
        assert self._classes is not None
        return list(dict.fromkeys([*self._classes, *self._defs, *self._assignments()]))

    def get(self, name: str) -> str | None:
        got = self._got.get(name, _UNSET)
        if got is _UNSET:
            got = self._got[name] = self._side(name)
        return got  # type: ignore[return-value]

    def assigns(self, name: str) -> bool:
        """Is `name` bound by a top-level assignment (a constant, not a class)?"""
        return name in self._assignments()

    def _assignments(self) -> dict[str, str]:
        if self._assigned is None:
            self._assigned = {m.group(1): m.group(2) for m in _TOP_BINDING.finditer(self.source)}
        return self._assigned

    def _index(self) -> None:
        if self._classes is not None:
            return
        source = self.source
        self._places = _may_place(source)  # most modules place nothing: their functions are not read
        # A class that places its parts by a device table of its module (`for name, dev in PLACEMENT.items():`
        # `getattr(self, name).to(dev)`) names no device itself: its lines that read such a table count too.
        self._tables = _device_tables(source) if self._places else None
        classes: dict[str, list[str]] = {}
        for m in _TOP_CLASS.finditer(source):
            classes.setdefault(m.group(1), []).append(m.group(2))
        self._classes = classes
        for m in _TOP_DEF.finditer(source) if self._places else ():
            self._defs.setdefault(m.group(1), []).append(m.group(2))

    def _side(self, name: str) -> str | None:
        assigned = self._assignments()
        if name in assigned:  # an assignment wins over a definition of the same name
            return assigned[name]
        if self._defined is None:
            self._defined = frozenset(_DEFINED.findall(self.source))
        if name not in self._defined:
            return None
        self._index()
        assert self._classes is not None
        for body in reversed(self._defs.get(name, ())):  # the last function of that name that places
            placing = _placing_lines(body)
            if placing:
                return placing
        bodies = self._classes.get(name)
        if not bodies:
            return None
        body = bodies[-1]
        return _joined(
            _class_constants(body),
            _placing_lines(body) + _lines_naming(body, self._tables) if self._places else "",
        )


# The names top-level `class` and `def` lines may bind (more than _TOP_CLASS and _TOP_DEF match, never fewer).
_DEFINED = re.compile(r"^(?:class|(?:async[ \t]+)?def)[ \t]+([A-Za-z_]\w*)", re.M)
_UNSET = object()


# A short helper that moves what it is given (`return [t.to(device) for t in batch]`): the device its
# result is on comes from its caller's arguments (devices/summary.py, _inlined; at most its text's size).
_MOVES = re.compile(r"\.to\(|\.cuda\(|device")
_SHORT_DEF = 600


def moves_by_argument(source: str, name: str) -> bool:
    """Is `name` a module-level function of `source`, short, whose body moves something (`.to(`, `.cuda(`)
    or names a device (its summary carries its text, for the importer to run with its arguments), or a
    module-level class whose body acts on what its constructor is given?"""
    if ".to(" not in source and ".cuda(" not in source and "device" not in source and "self." not in source:
        return False
    return _moving_definition(source, name)


@lru_cache(maxsize=4096)
def _moving_definition(source: str, name: str) -> bool:
    """moves_by_argument's answer, from the definitions of `name` only (an importer asks about a few names of
    a module: scanning every definition of torch's imported modules was 3% of linting `_inductor/ir.py`)."""
    if name not in _defined_names(source):
        return False
    defs = [m for m in _named_def(name).finditer(source) if m.group(1) == name]
    if defs:
        return any(len(m.group(0)) <= _SHORT_DEF and _MOVES.search(m.group(2)) is not None for m in defs)
    # A class that acts on what it is built with (`self.model = model.cuda()`, `next(model.parameters()).device`):
    # the importer that builds it with a split model has its __init__ and methods run with it (devices/callers.py).
    return any(m.group(1) == name and _acts_on_argument(m.group(2)) for m in _named_class(name).finditer(source))


@lru_cache(maxsize=256)
def _defined_names(source: str) -> frozenset[str]:
    return frozenset(_DEFINED.findall(source))


@lru_cache(maxsize=1024)
def _named_def(name: str) -> re.Pattern[str]:
    """_TOP_DEF for the definitions of `name` only."""
    return re.compile(_TOP_DEF.pattern.replace(r"([A-Za-z_]\w*)", f"({re.escape(name)})(?!\\w)", 1), re.M)


@lru_cache(maxsize=1024)
def _named_class(name: str) -> re.Pattern[str]:
    """_TOP_CLASS for the classes of `name` only."""
    return re.compile(_TOP_CLASS.pattern.replace(r"([A-Za-z_]\w*)", f"({re.escape(name)})(?!\\w)", 1), re.M)


_INIT = re.compile(r"def[ \t]+__init__[ \t]*\(([^)]*)\)")
_ACTS_ON = re.compile(r"\b([A-Za-z_]\w*)\.(?:to\(|cuda\(|parameters\(|device\b)|\bdevice[ \t]*=[ \t]*([A-Za-z_]\w*)\b")
# `self.model = model` on a line of its own: an argument kept as it was given.
_KEPT = re.compile(r"^[ \t]+self\.([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=[ \t]*([A-Za-z_]\w*)[ \t]*(?:#[^\n]*)?$", re.M)


def _acts_on_argument(body: str) -> bool:
    """Does a class body move, or read the device or parameters of, one of its `__init__`'s parameters
    (`model.cuda()`, `next(model.parameters())`, `model.device`), make a tensor on one (`torch.zeros(n,
    device=device)`: a metric's running counts on the device its builder names), or keep one as an attribute that a
    method then calls or moves to (`self.model = model` ... `self.model(x)`; `self.device = device` ...
    `y.to(self.device)`)? The second is an evaluator or a trainer class that never names a device: it
    works with the model and the devices its builder gives it (devices/callers.py runs its methods with
    them). Not merely name a device: of torch's classes that say `device`, few do this (and summarising
    the others cost 3 s of 60)."""
    init = _INIT.search(body)
    if init is None:
        return False
    params = {p.split("=")[0].split(":")[0].strip().lstrip("*") for p in init.group(1).split(",")} - {"self", ""}
    if any((m.group(1) or m.group(2)) in params for m in _ACTS_ON.finditer(body)):
        return True
    kept = sorted({attr for attr, value in _KEPT.findall(body) if value in params})
    if not kept:
        return False
    attrs = "|".join(map(re.escape, kept))
    used = rf"\bself\.(?:{attrs})\(|(?:\.to\(|\.cuda\(|device=)[ \t]*self\.(?:{attrs})\b"
    return re.search(used, body) is not None


def _placing_lines(body: str) -> str:
    """The lines of `body` that place something on a named device, where that is code (lint/livetext.py)."""
    if not _may_place(body):
        return ""
    text = LiveText(body)
    return "\n".join(m.group(0).strip() for m in _PLACING_LINE.finditer(body) if text.in_code(m.start(1), m.end(1)))


def _device_tables(source: str) -> re.Pattern[str] | None:
    """The module-level names bound to a value that names a device, as one pattern; None if none."""
    names = [m.group(1) for m in _TOP_BINDING.finditer(source) if _PLACING.search(m.group(2))]
    return re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b") if names else None


def _lines_naming(body: str, tables: re.Pattern[str] | None) -> str:
    """The lines of `body` that read one of `tables` (each on a line of its own, after a newline)."""
    if tables is None or tables.search(body) is None:
        return ""
    return "".join("\n" + line.strip() for line in body.splitlines() if tables.search(line))


def _may_place(text: str) -> bool:
    # Two substring tests first: every placing pattern holds one of them, and most texts hold neither.
    return ("cuda" in text or ".to(" in text) and _PLACING.search(text) is not None


def _joined(constants: str, placing: str) -> str:
    """A class's constants, then those of its placing lines that are not among them."""
    lines = constants.splitlines() if constants else []
    own = set(lines)
    return "\n".join(lines + [line for line in placing.splitlines() if line not in own])


def _class_constants(body: str) -> str:
    first = _FIRST_CODE_LINE.search(body)  # the body's own level: the indent of its first line that is not blank
    indent = first.group(1) if first else ""
    return "\n".join(m.group(2) for m in _CLASS_BINDING.finditer(body) if m.group(1) == indent)


_FIRST_CODE_LINE = re.compile(r"^([ \t]*)\S", re.M)
