"""The user's source line for a runtime event.

Findings and transfer records name the line in the user's code that caused
them, not a line inside torch or mpcheck, nor inside another installed library
(transformers' `modeling_*.py`, `accelerate/hooks.py`): the user's frame is the
nearest one outside installed packages (site-packages, dist-packages) and the
standard library, and the innermost library frame is kept as the site's
context ("in transformers/models/t5/modeling_t5.py:123"). When every frame is a
library's, the innermost library frame is the site. Walking frames with
`sys._getframe` costs a few microseconds; `inspect.stack()` costs ~1 ms, so
it is never used. Sites are cached by (code object, line): one `Site` object
per distinct line, so the ledger can key on it cheaply.
"""

from __future__ import annotations

import inspect
import os
import sys
import sysconfig
import threading
from dataclasses import dataclass, field
from types import CodeType, FrameType, TracebackType
from typing import Any


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    function: str
    # The library line the user's line called into, "transformers/models/t5/modeling_t5.py:123"; not part
    # of the site's identity (one user line is one site in the ledger and in findings).
    context: str | None = field(default=None, compare=False)
    # The 1-based column of the expression the line was running when first seen (Python >= 3.11 keeps
    # each instruction's position; 1 before that). Not part of the identity either: one line, one site.
    column: int = field(default=1, compare=False)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


UNKNOWN = Site("<unknown>", 0, "")


def repeated_user_read(checker: Any, counts: dict[tuple[str, int], int]) -> Site | None:
    """The user's line making a check's call now (`checker.sites()`), when this is its second such call in `counts`
    (once is set-up, twice is a loop's); None otherwise, and for a call made by torch's or a library's own code,
    which the user does not write (nn.TransformerDecoder testing whether its mask is the causal one)."""
    site: Site | None = checker.sites()
    if site is None or site.context or called_by_torch() or count_at_line(counts, site) != 2:
        return None
    return site


def count_at_line(counts: dict[tuple[str, int], int], site: Site) -> int:
    """One more at `site`'s line in `counts` (a check's per-line tally: reported at its second pass, say): the
    count there now."""
    key = (site.path, site.line)
    n = counts.get(key, 0) + 1
    counts[key] = n
    return n


# (code, line) of the frame, plus (code, line) of the library frame it called into when named
_cache: dict[tuple[CodeType | int, ...], Site] = {}
# Decided once per code object: which package's code is it? (see _owner)
_owner_code: dict[CodeType, str] = {}
# Decided once per code object: is this frame inside torch, mpcheck or the
# standard library's context-manager machinery (which the user never wrote)?
_internal_code: dict[CodeType, bool] = {}

_TORCH_DIR = None
_MPCHECK_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep  # mpcheck/
_STDLIB_INTERNALS = ("contextlib.py", "threading.py", "functools.py")
# Decided once per code object: the path of a library's code inside its installation folder
# ("transformers/models/t5/modeling_t5.py"), or "" for the user's code (see _library_path).
_library_code: dict[CodeType, str] = {}
_PACKAGE_DIRS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_STDLIB_DIRS = tuple(
    {
        os.path.abspath(d) + os.sep
        for d in (sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib"))
        if d
    }
)


def _torch_dir() -> str:
    global _TORCH_DIR
    if _TORCH_DIR is None:
        mod = sys.modules.get("torch")
        _TORCH_DIR = (os.path.dirname(os.path.abspath(mod.__file__)) + os.sep) if mod and mod.__file__ else "\0"
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


def _library_path(code: CodeType) -> str:
    """Where an installed library's code lives, relative to its installation folder
    (site-packages, dist-packages, the standard library); "" for the user's own code."""
    path = _library_code.get(code)
    if path is None:
        fn = code.co_filename
        path = ""
        if not fn.startswith("<"):
            full = os.path.abspath(fn)
            for marker in _PACKAGE_DIRS:
                at = full.rfind(marker)
                if at >= 0:
                    path = full[at + len(marker) :]
                    break
            else:
                for stdlib in _STDLIB_DIRS:
                    if full.startswith(stdlib):
                        path = full[len(stdlib) :]
                        break
            path = path.replace(os.sep, "/")
        _library_code[code] = path
    return path


def is_users_function(fn: Any) -> bool:
    """Is `fn` (unwrapped of its functools.wraps wrappers) written in the user's own code, not in torch,
    mpcheck or an installed library? A user's Optimizer subclass's `step`, for one."""
    fn = inspect.unwrap(fn) if callable(fn) else fn
    code = getattr(fn, "__code__", None)
    return isinstance(code, CodeType) and not _is_internal(code) and not _library_path(code)


def is_mpcheck_file(filename: str) -> bool:
    """Is this file one of mpcheck's own?"""
    return not filename.startswith("<") and os.path.abspath(filename).startswith(_MPCHECK_DIR)


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
        frame: FrameType | None = sys._getframe(depth + 1)
    except ValueError:
        return False
    while frame is not None and _owner(frame.f_code) == "mpcheck":
        frame = frame.f_back
    return frame is not None and _owner(frame.f_code) == "torch"


# The folder mpcheck was started from: a script's own frames name it as given there
# (`examples/train.py`), so the modules it imports are named relative to the same folder, even after
# the program's own os.chdir (as the output paths are, see commands/options.py).
_LAUNCH_DIR = os.getcwd()


def shown_path(filename: str, base: str = _LAUNCH_DIR) -> str:
    """`filename` relative to `base` when it lies under it (`examples/split_model.py`), else as is:
    a module imported by the script has an absolute co_filename, the script itself a relative one."""
    if filename.startswith("<") or not os.path.isabs(filename):
        return filename
    try:
        inside = os.path.relpath(filename, base)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if inside == os.pardir or inside.startswith(os.pardir + os.sep) else inside


def site_of_frame(frame: FrameType, library: FrameType | None = None) -> Site:
    """The site of `frame`; `library`: the library frame it called into, named as the context."""
    # A code object compares equal to another of the same code in another file (its filename is not part of
    # its equality): keyed by identity, the code kept alive by the key so that its id is not reused.
    code = frame.f_code
    key = (
        (id(code), code, frame.f_lineno)
        if library is None
        else (id(code), code, frame.f_lineno, id(library.f_code), library.f_code, library.f_lineno)
    )
    site = _cache.get(key)
    if site is None:
        context = None if library is None else f"{_library_path(library.f_code)}:{library.f_lineno}"
        site = Site(shown_path(code.co_filename), frame.f_lineno, code.co_name, context, _column(frame))
        _cache[key] = site
    return site


def site_of_traceback(tb: TracebackType, library: FrameType | None = None) -> Site:
    """The site of a traceback entry: the line and column its frame raised at (the frame itself may have
    moved on since, to the `with` statement whose __exit__ is running). Not cached: one per exception."""
    code = tb.tb_frame.f_code
    context = None if library is None else f"{_library_path(library.f_code)}:{library.f_lineno}"
    return Site(
        shown_path(code.co_filename), tb.tb_lineno, code.co_name, context, _column_at(code, tb.tb_lasti, tb.tb_lineno)
    )


def _column(frame: FrameType) -> int:
    """The 1-based start column of the instruction `frame` is running (the call or operator on the user's
    line that reached torch), from the code object's position table; 1 where there is none. Paid once per
    site (sites are cached), never per event."""
    return _column_at(frame.f_code, frame.f_lasti, frame.f_lineno)


def _column_at(code: CodeType, lasti: int, lineno: int | None) -> int:
    positions = getattr(code, "co_positions", None)
    if positions is None or lasti < 0:  # Python 3.10; a frame not started
        return 1
    # One position per 2-byte code unit (CACHE entries included), so the running instruction is lasti // 2.
    for i, (line, _end_line, col, _end_col) in enumerate(positions()):
        if i == lasti // 2:
            return col + 1 if col is not None and line == lineno else 1
    return 1


def _user_and_library_frames(depth: int) -> tuple[FrameType | None, FrameType | None]:
    """(the user's frame, the innermost library frame inside it or None), starting `depth` frames
    up and skipping torch and mpcheck. With no user frame, the innermost library frame is the user's."""
    try:
        frame: FrameType | None = sys._getframe(depth + 1)
    except ValueError:
        return None, None
    return user_frames_from(frame)


def user_frames_from(frame: FrameType | None) -> tuple[FrameType | None, FrameType | None]:
    """_user_and_library_frames, from `frame` outwards (a frame found by other means: the innermost of
    an exception's traceback)."""
    library = None
    while frame is not None:
        code = frame.f_code
        if not _is_internal(code):
            if not _library_path(code):
                return frame, library
            if library is None:
                library = frame
        frame = frame.f_back
    return library, None


_COMPREHENSIONS = frozenset({"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>"})


def transfer_site(depth: int = 1) -> Site:
    """user_site() of a transfer: a user's recursive helper that moves what it is given (`to_device(obj, dev)`
    walking dicts, lists and tuples to move each tensor) is treated as a library's would be, its copies belonging
    to the line that called it from outside, which chose what to move (`out = to_device(lower, dev)`), not to the
    helper's `obj.to(dev)` that every call shares. Only transfers: a device mismatch inside a recursive function
    (a tree encoder) is at its own line, where the ops meet."""
    frame, library = _user_and_library_frames(depth + 1)
    if frame is None or library is not None or _library_path(frame.f_code):
        return user_site(depth + 1)
    return site_of_frame(_outside_recursion(frame))


def _outside_recursion(frame: FrameType) -> FrameType:
    """The frame that called the outermost run of `frame`'s function where `frame` runs inside a recursion of it
    (through its comprehensions), else `frame`. Cheap where there is none: the caller is one or two frames up."""
    base = _out_of_comprehensions(frame)
    code = base.f_code
    outer, up = base, _out_of_comprehensions(base.f_back) if base.f_back is not None else None
    while up is not None and up.f_code is code:
        outer = up
        up = _out_of_comprehensions(up.f_back) if up.f_back is not None else None
    if outer is base or up is None or _is_internal(up.f_code) or _library_path(up.f_code):
        return frame
    return up


def _out_of_comprehensions(frame: FrameType) -> FrameType:
    """The function a comprehension's (or generator expression's, or lambda's) frame runs in: the frame that
    called it, where its code is one of that frame's constants; `frame` itself for any other."""
    while (
        frame.f_code.co_name in _COMPREHENSIONS
        and frame.f_back is not None
        and frame.f_code in frame.f_back.f_code.co_consts
    ):
        frame = frame.f_back
    return frame


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame outside torch, mpcheck and installed libraries, starting `depth` frames up
    (the innermost library frame when every frame is a library's)."""
    return _user_and_library_frames(depth + 1)[0]


def column_now(site: Site) -> int:
    """`site`'s column as the user's frame now running that line says it (the operator or call that is
    reporting, where the cached site keeps the first one seen on the line); the cached one otherwise
    (a finding reported later than its line ran: at a pass's or a step's end)."""
    frame, _library = _user_and_library_frames(1)
    if frame is not None and frame.f_lineno == site.line and shown_path(frame.f_code.co_filename) == site.path:
        return _column(frame)
    return site.column


def user_site(depth: int = 1) -> Site:
    """The user's source line calling into torch, or UNKNOWN (e.g. on an autograd thread); a
    library frame in between is named as the site's context. In a thread the program started (or a
    thread pool's task) whose frames are all a library's or torch's (parallel_apply's replicas), the
    user's line that started it (set_origin)."""
    frame, library = _user_and_library_frames(depth + 1)
    if frame is None:
        return getattr(_thread_origin, "site", None) or UNKNOWN
    if library is None and _library_path(frame.f_code):
        origin = getattr(_thread_origin, "site", None)
        if origin is not None:
            return _from_origin(origin, frame)
    return site_of_frame(frame, library)


# The user's line that started the running thread, or submitted its running task (capture/threads.py).
_thread_origin = threading.local()
_origin_cache: dict[tuple[Site, int, CodeType, int], Site] = {}


def origin_site() -> Site | None:
    """The user's line running now in this thread, to name in the threads it starts (set_origin)."""
    frame, library = _user_and_library_frames(1)
    if frame is None or (library is None and _library_path(frame.f_code)):
        return getattr(_thread_origin, "site", None)  # a thread started by a library in a thread of its own
    return site_of_frame(frame)


def set_origin(site: Site | None) -> Site | None:
    """This thread's work is for the user's line `site` (None: none); the previous one is returned."""
    old = getattr(_thread_origin, "site", None)
    _thread_origin.site = site
    return old


def _from_origin(origin: Site, library: FrameType) -> Site:
    """`origin`, with the library line running in this thread as its context."""
    code = library.f_code
    key = (origin, id(code), code, library.f_lineno)
    site = _origin_cache.get(key)
    if site is None:
        context = f"{_library_path(code)}:{library.f_lineno}"
        site = _origin_cache[key] = Site(origin.path, origin.line, origin.function, context, origin.column)
    return site


def user_site_from(frame: FrameType | None) -> Site:
    """user_site(), walking outwards from `frame` (a frame found by other means: the caller of a constructor)."""
    user, library = user_frames_from(frame)
    return site_of_frame(user, library) if user is not None else UNKNOWN
