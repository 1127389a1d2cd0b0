"""Deprecated: 0.1.0's home of `DeviceMismatchError`; import it as `mpcheck.DeviceMismatchError`.

Kept so that `from mpcheck.runtime.core import DeviceMismatchError`, the path 0.1.0 documented,
still works after runtime/ was split into sub-packages.
"""

import warnings

from mpcheck.runtime.checks.findings import DeviceMismatchError

__all__ = ["DeviceMismatchError"]

warnings.warn(
    "mpcheck.runtime.core is deprecated; import DeviceMismatchError as mpcheck.DeviceMismatchError",
    DeprecationWarning,
    stacklevel=2,
)
