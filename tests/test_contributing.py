"""Every path CONTRIBUTING.md names exists: a `path/like/this.py` in backquotes is a file or
folder of the repository; one with `<placeholders>` names at least one existing file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_QUOTED = re.compile(r"`([^`\s]+)`")
_PATHLIKE = re.compile(r"^\.?[\w<>.-]+(/[\w<>.-]*)+$|^[\w<>-]+\.(py|md|toml)$")


def named_paths(text: str) -> list[str]:
    """The backquoted words of `text` that look like paths (a slash, or a file name with an extension)."""
    return [w for w in _QUOTED.findall(text) if _PATHLIKE.match(w)]


def missing(paths: list[str], root: Path) -> list[str]:
    """The paths of `paths` that name nothing under `root`."""
    out = []
    for p in paths:
        if "<" in p:
            found = any(root.glob(re.sub(r"<[^>]*>", "*", p)))
        else:
            found = (root / p).exists()
        if not found:
            out.append(p)
    return out


def test_every_path_in_contributing_exists():
    paths = named_paths((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))
    # the kinds of path it must name, so that a reader that finds none cannot pass
    assert {"mpcheck/codes.py", "rules/MP<NNN>-<name>.md", ".ci/run", "tests/test_layering.py"} <= set(paths)
    assert missing(paths, ROOT) == []


def test_the_check_finds_a_missing_path(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "MP001-x.md").write_text("")
    text = "`rules/MP<NNN>-<name>.md`, `mpcheck/gone.py`, `ruff check .`, `x.py`, `a/b/` and `MP<NNN>`"
    assert named_paths(text) == ["rules/MP<NNN>-<name>.md", "mpcheck/gone.py", "x.py", "a/b/"]
    assert missing(named_paths(text), tmp_path) == ["mpcheck/gone.py", "x.py", "a/b/"]
