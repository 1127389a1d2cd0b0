"""Warnings raised in the user's code point at the user's line, not at mpcheck's.

PyTorch's C++ warnings (`Converting a tensor with requires_grad=True to a scalar`) take the
innermost Python frame as their location: while a session runs, that frame is often mpcheck's
function mode or module hook (`mode.py:79: UserWarning: ...`), which tells the user nothing.
While a session runs, `warnings.showwarning` moves such a warning to the user's frame (the one
findings name; see checks/sites.py). A warning whose location is not in mpcheck's files is left
as it is. Python's filters have already run against mpcheck's location: an "once per location"
filter counts mpcheck's line, so the same warning from a second user line may be shown once only.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from mpcheck.runtime.checks.sites import is_mpcheck_file, user_frame


def redirect_warnings() -> Callable[[], None]:
    """Install the redirection; returns its undo (which leaves a later replacement in place)."""
    previous = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if is_mpcheck_file(filename):
            frame = user_frame(1)
            if frame is not None and not is_mpcheck_file(frame.f_code.co_filename):
                filename, lineno, line = frame.f_code.co_filename, frame.f_lineno, None
        return previous(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning

    def undo() -> None:
        if warnings.showwarning is showwarning:
            warnings.showwarning = previous

    return undo
