"""mpcheck: device-placement checks for manually model-parallel PyTorch code.

`import mpcheck` stays light: torch is imported only when a runtime face
(`mpcheck.debug`, `mpcheck.dryrun`, `mpcheck.DeviceMismatchError`) is first touched.
"""

__version__ = "0.1.0"

__all__ = ["DeviceMismatchError", "__version__", "debug", "dryrun"]


def __getattr__(name: str) -> object:
    # Lazy so that the linter path never imports torch.
    if name == "debug":
        from mpcheck.runtime.real.debug import debug

        return debug
    if name == "dryrun":
        from mpcheck.runtime.virtual.dryrun import dryrun

        return dryrun
    if name == "DeviceMismatchError":  # what `mpcheck.debug(on_mismatch="raise")` raises
        from mpcheck.runtime.checks.findings import DeviceMismatchError

        return DeviceMismatchError
    raise AttributeError(f"module 'mpcheck' has no attribute {name!r}")
