"""The result cache: `.mpcheck_cache/` beside the nearest pyproject.toml (else
in the working folder).

One JSON file per code fingerprint (mpcheck version + its modules), so a new
mpcheck never reads an old cache. Inside, an entry's key is the file's content
hash, its module name and the codes checked on it (the effective config for that
file). An entry also records the content hash of every project module whose
summary the analysis used, and of every module that decided which summaries were
taken (the look-up chain of an imported name, skipped modules included); it is
stale as soon as one of them changed, which is how editing `model.py` re-checks
the `train.py` that wraps its class. A module off every chain is not recorded:
editing it cannot change the result.

A file whose functions other files of the run call with known devices is analysed
with those calls' arguments too (lint/callers.py): that result's key also holds a
hash of those caller contexts, so editing the caller re-checks the callee. An entry
stores the calls its file makes to other files' functions, so a run served by the
cache still knows every file's callers.

A module's summary is keyed by its content hash and module name, and covers
the names other files looked up in it (only the statements those need were
summarised, lint/slices.py): it serves a later run whose files look up no
other name, and is made again, for the old names and the new, when one does.

One shortcut is keyed by file metadata instead of content: a file in which no
selected rule could fire (the pre-filter's verdict) is remembered with its
mtime and size, and is not even read again until one of them changes.

JSON, never pickle: a cache file is data, not code. Written atomically (temp
file + os.replace), so a crash or a concurrent run leaves the old file or the
new one, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpcheck.lint.atomic import write_text_atomic

CACHE_DIR_NAME = ".mpcheck_cache"
# Entries unused this long are dropped when the cache is written back.
MAX_AGE_S = 30 * 24 * 3600


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON next to `path` then rename over it; failures are silent (a cache is optional)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        gitignore = path.parent / ".gitignore"
        if not gitignore.exists():
            # Like ruff and pytest: the cache folder ignores itself.
            gitignore.write_text("# Created by mpcheck\n*\n", encoding="utf-8")
        write_text_atomic(str(path), json.dumps(data, separators=(",", ":")))
    except OSError:
        pass


def entry_key(digest: str, modname: str, codes: frozenset[str], gpus: tuple[int, ...] = ()) -> str:
    key = f"{digest}|{modname}|{','.join(sorted(codes))}"
    return f"{key}|gpus={','.join(map(str, gpus))}" if gpus else key


class ResultCache:
    """Results of `analyze()` (findings after noqa) and `summarize()` by key."""

    def __init__(self, folder: Path, fingerprint: str):
        self.path = folder / f"results-{fingerprint}.json"
        self.results: dict[str, dict[str, Any]] = {}
        self.summaries: dict[str, Any] = {}
        # abspath -> [mtime_ns, size, pre-filter signature] of files no selected rule could fire on
        self.irrelevant: dict[str, list[Any]] = {}
        # abspath -> [mtime_ns, size, pre-filter signature, deps, codes asked, codes let through] of the others
        self.relevant: dict[str, list[Any]] = {}
        self.dirty = False
        self._now = int(time.time())
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
            if isinstance(data, dict):
                self.results = data.get("results", {}) or {}
                self.summaries = data.get("summaries", {}) or {}
                self.irrelevant = data.get("irrelevant", {}) or {}
                self.relevant = data.get("relevant", {}) or {}
        except (OSError, ValueError):
            pass

    def get(self, key: str, dep_hash: Callable[[str], str | None]) -> dict[str, Any] | None:
        """The stored entry, or None when absent or when a module it used has changed.
        `dep_hash(modname)` gives the current content hash of that module for this file."""
        entry = self.results.get(key)
        if entry is None:
            return None
        for modname, digest in entry.get("deps", {}).items():
            if dep_hash(modname) != digest:
                return None
        self._touch(entry)
        return entry

    def _touch(self, entry: dict[str, Any]) -> None:
        """Mark an entry used now (at most once a day, so that a run served by the cache rarely writes)."""
        if self._now - entry.get("t", 0) > 24 * 3600:
            entry["t"] = self._now
            self.dirty = True

    def put(
        self,
        key: str,
        findings: list[dict[str, Any]],
        deps: dict[str, str | None],
        calls: list[dict[str, Any]] | None = None,
    ) -> None:
        """`calls`: the calls of other files' functions the analysis kept (lint/callers.py)."""
        self.results[key] = {"findings": findings, "deps": deps, "t": self._now}
        if calls:
            self.results[key]["calls"] = calls
        self.dirty = True

    def known_irrelevant(self, abspath: str, stat: tuple[int, int], signature: str) -> bool:
        """Was no rule able to fire on this file when it was last seen, and are it and the project modules it
        imports names from (whose constants the pre-filter read as its words) unchanged since?"""
        return signature != "*" and _unchanged(self.irrelevant.get(abspath), stat, signature)

    def known_codes(
        self, abspath: str, stat: tuple[int, int], signature: str, codes: frozenset[str]
    ) -> frozenset[str] | None:
        """The rules among `codes` the pre-filter let through for this file when it was last seen, if it and
        the project modules it imports names from are unchanged since; None when not known. A cached run
        then reads the file for its content hash only (the pre-filter was a third of torch's cached run)."""
        seen = self.relevant.get(abspath)
        if signature == "*" or seen is None or seen[4] != sorted(codes) or not _unchanged(seen, stat, signature):
            return None
        return frozenset(seen[5])

    def mark_codes(
        self,
        abspath: str,
        stat: tuple[int, int],
        signature: str,
        deps: list[list[Any]],
        codes: frozenset[str],
        let_through: frozenset[str],
    ) -> None:
        if signature != "*":
            self.relevant[abspath] = [stat[0], stat[1], signature, deps, sorted(codes), sorted(let_through)]
            self.dirty = True

    def mark_irrelevant(
        self, abspath: str, stat: tuple[int, int], signature: str, deps: list[list[Any]] | None = None
    ) -> None:
        """`deps`: [path, mtime, size] of the project modules the file imports names from."""
        if signature != "*":
            self.irrelevant[abspath] = [stat[0], stat[1], signature, deps or []]
            self.dirty = True

    def get_summary(self, key: str, names: set[str]) -> tuple[bool, Any]:
        """(found, summary) of a module (`key`: its content and name) that covers `names`."""
        entry = self.summaries.get(key)
        if entry is not None and names.issubset(entry.get("n", ())):
            self._touch(entry)
            return True, entry["s"]
        return False, None

    def summary_names(self, key: str) -> set[str]:
        """The names the stored summary of `key` covers (none stored: empty)."""
        entry = self.summaries.get(key)
        return set(entry.get("n", ())) if entry is not None else set()

    def put_summary(self, key: str, summary: Any, names: list[str]) -> None:
        """A summary made for `names` (it holds what a look-up of any of them finds, maybe more)."""
        self.summaries[key] = {"s": summary, "n": names, "t": self._now}
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        cutoff = self._now - MAX_AGE_S
        data = {
            "results": {k: v for k, v in self.results.items() if v.get("t", 0) >= cutoff},
            "summaries": {k: v for k, v in self.summaries.items() if v.get("t", 0) >= cutoff},
            "irrelevant": {k: v for k, v in self.irrelevant.items() if os.path.exists(k)},
            "relevant": {k: v for k, v in self.relevant.items() if os.path.exists(k)},
        }
        write_json_atomic(self.path, data)
        self.dirty = False


def _unchanged(seen: list[Any] | None, stat: tuple[int, int], signature: str) -> bool:
    """Is a file's stored pre-filter verdict (`seen`: mtime, size, signature, deps, ...) still good: the file,
    the rules' words and the project modules it imports names from (their [path, mtime, size]) unchanged?"""
    if seen is None or seen[0] != stat[0] or seen[1] != stat[1] or seen[2] != signature:
        return False
    for dep, mtime, size in seen[3] if len(seen) > 3 else ():
        try:
            st = os.stat(dep)
        except OSError:
            return False
        if st.st_mtime_ns != mtime or st.st_size != size:
            return False
    return True
