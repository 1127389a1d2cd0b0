"""Which files a run checks.

Folders are walked recursively; `.gitignore` files (in the walked folders and
in their parents up to the repository root) are honoured through pathspec;
the `exclude` patterns skip folders such as `.git`, virtualenvs (any folder with
a `pyvenv.cfg`), `site-packages`, `build`, `dist`. A file named on the command
line is always checked, whatever the patterns say, and so is a folder named
there, even one that is git-ignored or inside an ignored folder (as ruff does):
the files below it still honour the excludes and the .gitignore rules that
apply to them, but not the ones that ignored the folder itself. Only `.py` files
are checked; other files given explicitly are skipped quietly (pre-commit may
pass anything).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpcheck.config import Settings

if TYPE_CHECKING:  # imported lazily at run time (45 ms)
    from pathspec import GitIgnoreSpec

PY_SUFFIXES = (".py",)


@dataclass(frozen=True)
class SourceFile:
    path: str  # as shown in findings: the argument joined with the path below it
    abspath: str
    relpath: str | None  # posix path relative to the config root (for patterns), None outside it
    # Named on the command line (as pre-commit names each changed file) or read from stdin, not found by a
    # walk: such a file is always checked for MP000, even when no rule's word occurs in it (pipeline.py).
    named: bool = False


def _rel(abspath: str, root: str) -> str | None:
    prefix = root.rstrip(os.sep) + os.sep
    if abspath.startswith(prefix):  # the common case, without relpath's normalisation
        rel = abspath[len(prefix) :]
        return rel if os.sep == "/" else rel.replace(os.sep, "/")
    return None  # outside the root (both paths are absolute and normalised)


class _Patterns:
    """Exclude patterns plus a stack of .gitignore files, compiled lazily (pathspec costs 45 ms to import)."""

    def __init__(self, settings: Settings):
        self.root = str(settings.root)
        special = "*?[/!\\"
        # Bare names and `*.suffix` patterns need no regex (and no pathspec import).
        self.names = frozenset(p for p in settings.exclude if not any(ch in p for ch in special))
        self.suffixes = tuple(
            p[1:] for p in settings.exclude if p.startswith("*") and not any(ch in p[1:] for ch in special)
        )
        self.globs = [p for p in settings.exclude if p not in self.names and p[1:] not in self.suffixes]
        self._glob_spec: GitIgnoreSpec | None = None
        if self.globs:
            import pathspec

            self._glob_spec = pathspec.GitIgnoreSpec.from_lines(self.globs)
        self._gitignores: dict[str, GitIgnoreSpec | None] = {}

    def excluded(self, abspath: str, name: str, is_dir: bool) -> bool:
        if name in self.names or (self.suffixes and name.endswith(self.suffixes)):
            return True
        if self._glob_spec is not None:
            rel = _rel(abspath, self.root)
            target = rel if rel is not None else name
            if is_dir:
                target += "/"
            if self._glob_spec.match_file(target):
                return True
        return False

    def gitignore(self, folder: str) -> GitIgnoreSpec | None:
        """The compiled .gitignore of `folder`, or None."""
        if folder not in self._gitignores:
            spec = None
            path = os.path.join(folder, ".gitignore")
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    lines = fh.read().splitlines()
            except OSError:
                lines = []
            if any(line.strip() and not line.lstrip().startswith("#") for line in lines):
                import pathspec

                spec = pathspec.GitIgnoreSpec.from_lines(lines)
            self._gitignores[folder] = spec
        return self._gitignores[folder]


def _ancestor_gitignores(folder: str, patterns: _Patterns) -> list[tuple[str, GitIgnoreSpec]]:
    """(folder, spec) for the .gitignore files above `folder`, up to the git repository root."""
    chain: list[str] = []
    probe = folder
    # Only inside a git repository: outside one, a parent's .gitignore means nothing.
    while True:
        if os.path.exists(os.path.join(probe, ".git")):
            break
        parent = os.path.dirname(probe)
        if parent == probe:
            return []
        probe = parent
    repo_root = probe
    current = folder
    while True:
        parent = os.path.dirname(current)
        if current == repo_root or parent == current:
            break
        current = parent
        chain.append(current)
    out = []
    for f in reversed(chain):  # shallowest first
        spec = patterns.gitignore(f)
        if spec is not None:
            spec = _without_patterns_ignoring(spec, os.path.relpath(folder, f).replace(os.sep, "/") + "/")
            if spec is not None:
                out.append((f, spec))
    return out


def _without_patterns_ignoring(spec: GitIgnoreSpec, folder_rel: str) -> GitIgnoreSpec | None:
    """`spec` less the patterns that ignore `folder_rel` (a folder named on the
    command line), or None when none is left. Pathspec matches a folder's
    pattern on everything below it too, so without this a walk of an explicitly
    named, ignored folder (`mpcheck .venv/lib/.../torch`) would skip every file.
    The other patterns (`*_pb2.py`, `generated/`) still apply below it."""
    import pathspec

    kept = [p for p in spec.patterns if not (p.include and p.match_file(folder_rel) is not None)]
    if len(kept) == len(spec.patterns):
        return spec
    return pathspec.GitIgnoreSpec(kept) if any(p.include is not None for p in kept) else None


def _ignored_by_git(abspath: str, is_dir: bool, stack: list[tuple[str, GitIgnoreSpec]]) -> bool:
    # The deepest .gitignore with a matching pattern decides (a `!pattern` re-includes).
    for folder, spec in reversed(stack):
        rel = os.path.relpath(abspath, folder).replace(os.sep, "/")
        if is_dir:
            rel += "/"
        result = spec.check_file(rel)
        if result.include is not None:
            return bool(result.include)
    return False


def _walk(top: str, display_top: str, patterns: _Patterns, out: list[SourceFile]) -> None:
    stack = _ancestor_gitignores(top, patterns)
    # Iterative walk: (folder, display folder, gitignore stack for it)
    todo = [(top, display_top, stack)]
    while todo:
        folder, display, stack = todo.pop()
        spec = patterns.gitignore(folder)
        if spec is not None:
            stack = stack + [(folder, spec)]
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for entry in entries:
            name = entry.name
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir:
                if patterns.excluded(entry.path, name, True):
                    continue
                if os.path.isfile(os.path.join(entry.path, "pyvenv.cfg")):
                    continue  # a virtualenv, whatever its name
                if stack and _ignored_by_git(entry.path, True, stack):
                    continue
                subdirs.append((entry.path, os.path.join(display, name), stack))
            elif name.endswith(PY_SUFFIXES):
                if patterns.excluded(entry.path, name, False):
                    continue
                if stack and _ignored_by_git(entry.path, False, stack):
                    continue
                abspath = os.path.abspath(entry.path)
                out.append(SourceFile(_display(os.path.join(display, name)), abspath, _rel(abspath, patterns.root)))
        todo.extend(reversed(subdirs))


def _display(path: str) -> str:
    return os.path.normpath(path)


def stdin_source(filename: str | None, settings: Settings) -> SourceFile:
    """The file read from stdin: named by --stdin-filename (so that patterns and
    per-file-ignores apply to it), else shown as `-`."""
    abspath = os.path.abspath(filename or "stdin.py")
    return SourceFile(filename or "-", abspath, _rel(abspath, str(settings.root)), named=True)


def missing_paths(args: list[str]) -> list[str]:
    """The arguments that name nothing: the CLI reports them and checks the rest."""
    return [a for a in args if not os.path.exists(a)]


def discover(args: list[str], settings: Settings) -> list[SourceFile]:
    """The .py files to check, each once, in a stable order. Missing paths are
    skipped here (see missing_paths)."""
    patterns = _Patterns(settings)
    out: list[SourceFile] = []
    for arg in args:
        if os.path.isdir(arg):
            _walk(os.path.abspath(arg), arg, patterns, out)
        elif arg.endswith(PY_SUFFIXES) and os.path.exists(arg):
            abspath = os.path.abspath(arg)
            out.append(SourceFile(_display(arg), abspath, _rel(abspath, patterns.root), named=True))
    seen: set[str] = set()
    unique = []
    for f in out:
        if f.abspath not in seen:
            seen.add(f.abspath)
            unique.append(f)
    return unique
