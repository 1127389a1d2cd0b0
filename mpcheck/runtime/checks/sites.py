"""The user's source line for a runtime event.

Findings and transfer records name the line in the user's code that caused
them, not a line inside torch or mpcheck. Walking frames with
`sys._getframe` costs a few microseconds; `inspect.stack()` costs ~1 ms, so
it is never used. Sites are cached by (code object, line): one `Site` object
per distinct line, so the ledger can key on it cheaply.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import CodeType, FrameType


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


UNKNOWN = Site("<unknown>", 0, "")

_cache: dict[tuple[CodeType, int], Site] = {}
# Decided once per code object: which package's code is it? (see _owner)
_owner_code: dict[CodeType, str] = {}
# Decided once per code object: is this frame inside torch, mpcheck or the
# standard library's context-manager machinery (which the user never wrote)?
_internal_code: dict[CodeType, bool] = {}

_TORCH_DIR = None
_MPCHECK_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep  # mpcheck/
_STDLIB_INTERNALS = ("contextlib.py", "threading.py", "functools.py")


def _torch_dir() -> str:
    global _TORCH_DIR
    if _TORCH_DIR is None:
        mod = sys.modules.get("torch")
        _TORCH_DIR = (os.path.dirname(os.path.abspath(mod.__file__)) + os.sep) if mod else "\0"
    return _TORCH_DIR


def _is_internal(code: CodeType) -> bool:
    hit = _internal_code.get(code)
    if hit is None:
        fn = code.co_filename
        full = fn if fn.startswith("<") else os.path.abspath(fn)
        hit = (
            full.startswith(_torch_dir())
            or full.startswith(_MPCHECK_DIR)
            or full.endswith(_STDLIB_INTERNALS)
            or fn.startswith("<frozen")
        )
        _internal_code[code] = hit
    return hit


def _owner(code: CodeType) -> str:
    """ "mpcheck", "torch" or "" (anyone else: the user, another library), once per code object."""
    owner = _owner_code.get(code)
    if owner is None:
        fn = code.co_filename
        full = fn if fn.startswith("<") else os.path.abspath(fn)
        owner = "mpcheck" if full.startswith(_MPCHECK_DIR) else "torch" if full.startswith(_torch_dir()) else ""
        _owner_code[code] = owner
    return owner


def called_by_torch(depth: int = 1) -> bool:
    """Is the innermost frame outside mpcheck, `depth` frames up, PyTorch's own code?

    A transfer such a frame makes (GradScaler.update() moving its found_inf flags,
    clip_grad_norm_ gathering norms) is the library's: the user can only change
    the line that called into torch, not the copy itself."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return False
    while frame is not None and _owner(frame.f_code) == "mpcheck":
        frame = frame.f_back
    return frame is not None and _owner(frame.f_code) == "torch"


def site_of_frame(frame: FrameType) -> Site:
    key = (frame.f_code, frame.f_lineno)
    site = _cache.get(key)
    if site is None:
        code = frame.f_code
        site = Site(code.co_filename, frame.f_lineno, code.co_name)
        _cache[key] = site
    return site


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame outside torch and mpcheck, starting `depth` frames up."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return None
    while frame is not None and _is_internal(frame.f_code):
        frame = frame.f_back
    return frame


def user_site(depth: int = 1) -> Site:
    """The user's source line calling into torch, or UNKNOWN (e.g. on an autograd thread)."""
    frame = user_frame(depth + 1)
    return site_of_frame(frame) if frame is not None else UNKNOWN
