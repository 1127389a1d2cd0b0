"""Atomic file writes: a temporary file in the same folder, then os.replace, so a
reader (or a crash) sees the old content or the new one, never half of one."""

from __future__ import annotations

import os
import tempfile


def write_text_atomic(path: str, text: str, *, prefix: str = ".mpcheck-tmp-") -> None:
    folder = os.path.dirname(os.path.abspath(path))
    # Keep the permissions of a file we replace (a fixed script stays executable).
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else None
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
