"""Shared by the tests in tests/gpu (imported as a sibling module, as tests/dryrun does with its helpers)."""

import inspect


def line_of(fn, marker):
    """The line number, in its file, of the first line of `fn`'s source that contains `marker`."""
    src, start = inspect.getsourcelines(fn)
    return next(start + i for i, t in enumerate(src) if marker in t)
