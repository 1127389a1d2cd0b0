"""`[tool.mpcheck]` in the nearest pyproject.toml, the command-line flags that
override it, and the selection of rule codes they make.

Selection works in layers like ruff's: the config file is one layer, the flags
another. In each layer a `select` replaces what came before, then
`extend-select` adds and `ignore` removes. A code may be given in full (MP003),
as a prefix (MP0, MP) or as ALL. An unknown key, code or prefix is a
ConfigError that names it: the CLI turns it into exit 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported only when per-file-ignores are configured
    from pathspec import GitIgnoreSpec

# What a folder walk skips unless `exclude` replaces the list (as in ruff, where
# `exclude` replaces the defaults and `extend-exclude` adds to them).
DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    ".bzr",
    ".venv",
    "venv",
    ".env",
    "env",
    "site-packages",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    ".tox",
    ".nox",
    ".eggs",
    "*.egg-info",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".mpcheck_cache",
)

KNOWN_KEYS = ("select", "ignore", "extend-select", "exclude", "extend-exclude", "per-file-ignores", "gpus")

# The GPU counts the linter assumes where code asks `torch.cuda.device_count()`: a finding
# that depends on the count is reported when it holds with the fewest GPUs the code allows.
DEFAULT_GPUS = (2, 4, 8)
MAX_GPUS = 16  # loops over more devices than this are not unrolled: the values would be unknown


class ConfigError(Exception):
    """Bad configuration or usage: reported on one line, exit code 2."""


@dataclass
class Layer:
    """One source of settings: the config file or the command line."""

    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] | None = None
    extend_exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    gpus: tuple[int, ...] | None = None
    origin: str = "command line"


@dataclass
class Settings:
    codes: frozenset[str]  # the codes selected for every file
    exclude: tuple[str, ...]  # gitignore-style patterns, relative to `root`
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...]
    root: Path  # patterns are relative to this folder (the config's, else cwd)
    config_path: Path | None  # the pyproject.toml that was read, if any
    project_root: Path  # where the cache lives: beside the nearest pyproject.toml, else cwd
    gpus: tuple[int, ...] = DEFAULT_GPUS  # the GPU counts assumed for torch.cuda.device_count()

    def codes_for(self, relpath: str | None) -> frozenset[str]:
        """The codes that apply to one file, after per-file-ignores."""
        if not self.per_file_ignores or relpath is None:
            return self.codes
        codes = set(self.codes)
        for spec, ignored in _compiled_per_file(self.per_file_ignores):
            if spec.match_file(relpath):
                codes -= ignored
        return frozenset(codes)


_PerFile = tuple[tuple[str, frozenset[str]], ...]
_PER_FILE_CACHE: dict[_PerFile, list[tuple[GitIgnoreSpec, frozenset[str]]]] = {}


def _compiled_per_file(items: _PerFile) -> list[tuple[GitIgnoreSpec, frozenset[str]]]:
    compiled = _PER_FILE_CACHE.get(items)
    if compiled is None:
        import pathspec  # only when per-file-ignores are configured

        compiled = [(pathspec.GitIgnoreSpec.from_lines([pattern]), codes) for pattern, codes in items]
        _PER_FILE_CACHE[items] = compiled
    return compiled


def find_pyproject(start: Path, *, with_tool_table: bool) -> Path | None:
    """The nearest pyproject.toml at or above `start` (with a [tool.mpcheck] table if asked)."""
    start = start.resolve()
    if start.is_file() or not start.exists():
        start = start.parent
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            if not with_tool_table:
                return candidate
            try:
                text = candidate.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            # A cheap look before the TOML parse: most pyproject files have no such table.
            if "tool.mpcheck" in text:
                return candidate
    return None


def project_root(start: Path) -> Path:
    """Where the cache lives: the folder of the nearest pyproject.toml at or above `start`, else cwd."""
    nearest = find_pyproject(start, with_tool_table=False)
    return nearest.parent if nearest is not None else Path(os.getcwd())


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        try:
            import tomli as tomllib
        except ImportError as exc:
            raise ConfigError(f"{path}: reading it needs Python >= 3.11 or the 'tomli' package") from exc
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc


def _string_list(value: Any, key: str, origin: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{origin}: '{key}' must be a list of strings")
    return list(value)


def gpu_counts(value: Any, origin: str) -> tuple[int, ...]:
    """`gpus = [2, 4, 8]` (or `--gpus 2,4,8`): distinct whole numbers from 1 to MAX_GPUS, sorted."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        try:
            value = [int(p) for p in parts]
        except ValueError:
            raise ConfigError(
                f"{origin}: 'gpus' must be GPU counts separated by commas, as 2,4,8 (got {value!r})"
            ) from None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_GPUS for v in value)
    ):
        raise ConfigError(
            f"{origin}: 'gpus' must be a non-empty list of GPU counts from 1 to {MAX_GPUS}, as [2, 4, 8] "
            f"(got {value!r})"
        )
    return tuple(sorted(set(value)))


def layer_from_table(table: dict[str, Any], origin: str) -> Layer:
    unknown = sorted(set(table) - set(KNOWN_KEYS))
    if unknown:
        raise ConfigError(
            f"{origin}: unknown key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(k) for k in unknown)} in [tool.mpcheck] (known: {', '.join(KNOWN_KEYS)})"
        )
    layer = Layer(origin=origin)
    if "select" in table:
        layer.select = _string_list(table["select"], "select", origin)
    layer.extend_select = _string_list(table.get("extend-select", []), "extend-select", origin)
    layer.ignore = _string_list(table.get("ignore", []), "ignore", origin)
    if "exclude" in table:
        layer.exclude = _string_list(table["exclude"], "exclude", origin)
    layer.extend_exclude = _string_list(table.get("extend-exclude", []), "extend-exclude", origin)
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{origin}: 'per-file-ignores' must be a table of pattern = [codes]")
    layer.per_file_ignores = {
        pattern: _string_list(codes, f"per-file-ignores.{pattern}", origin) for pattern, codes in pfi.items()
    }
    if "gpus" in table:
        layer.gpus = gpu_counts(table["gpus"], origin)
    return layer


def read_config_layer(path: Path) -> Layer:
    data = _load_toml(path)
    table = data.get("tool", {}).get("mpcheck", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.mpcheck] must be a table")
    return layer_from_table(table, str(path))


def expand_codes(selectors: Iterable[str], known: Iterable[str], origin: str) -> set[str]:
    """Full codes for a list of codes / prefixes / ALL; an unknown one is a ConfigError naming it."""
    known = sorted(known)
    out: set[str] = set()
    for raw in selectors:
        sel = raw.strip().upper()
        if not sel:
            continue
        if sel == "ALL":
            out.update(known)
            continue
        matched = [c for c in known if c.startswith(sel)]
        if not matched:
            raise ConfigError(
                f"{origin}: unknown rule code or prefix {raw.strip()!r} (known codes: {', '.join(known)})"
            )
        out.update(matched)
    return out


def resolve(
    cli: Layer,
    known_codes: Iterable[str],
    *,
    start: Path,
    use_config: bool = True,
) -> Settings:
    """Combine the config file found from `start` with the command-line layer."""
    known = frozenset(known_codes)
    config_path = find_pyproject(start, with_tool_table=True) if use_config else None
    layers: list[Layer] = []
    if config_path is not None:
        layers.append(read_config_layer(config_path))
    layers.append(cli)

    codes: set[str] = set(known)
    exclude: list[str] = list(DEFAULT_EXCLUDE)
    per_file: dict[str, set[str]] = {}
    gpus: tuple[int, ...] = DEFAULT_GPUS
    for layer in layers:
        if layer.gpus is not None:
            gpus = layer.gpus
        if layer.select is not None:
            codes = expand_codes(layer.select, known, layer.origin)
        codes |= expand_codes(layer.extend_select, known, layer.origin)
        codes -= expand_codes(layer.ignore, known, layer.origin)
        if layer.exclude is not None:
            exclude = list(layer.exclude)
        exclude.extend(layer.extend_exclude)
        for pattern, selectors in layer.per_file_ignores.items():
            per_file.setdefault(pattern, set()).update(expand_codes(selectors, known, layer.origin))

    root = config_path.parent if config_path is not None else Path(os.getcwd())
    return Settings(
        codes=frozenset(codes),
        exclude=tuple(exclude),
        per_file_ignores=tuple((p, frozenset(c)) for p, c in sorted(per_file.items())),
        root=root,
        config_path=config_path,
        project_root=project_root(start),
        gpus=gpus,
    )
