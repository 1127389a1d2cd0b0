"""MP001 for a program that PyTorch stopped because tensors on different devices met where the checks
do not look: a library's own test, in Python, raised before any torch call could be checked
(`parameters_to_vector` over a split model: "Found two parameters on different devices"; an RNN's
"Input and parameter tensors are not at the same device"). The program stops either way; this names
the user's line as a finding, with its devices, so the report says what the traceback meant.

Called once, when the program ends with an exception (debug mode's exit, `mpcheck run`, the dry
run's stop). An exception that came through mpcheck's own hooks or torch function mode (a checked
call: its finding is made there, maybe at the line that caused it), or that stopped a line already
holding a device finding, gets nothing more."""

from __future__ import annotations

import re
from types import TracebackType
from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.sites import is_mpcheck_file, site_of_traceback, user_frames_from

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

# PyTorch's words for tensors on different devices (the op dispatcher's, torch.nn.utils', the RNN
# modules'); an exception whose message has none of them is not a device bug as far as mpcheck knows.
DEVICE_ERROR = re.compile(
    r"same device|different devices|Expected object of device type|but expected (?:it )?to be on|"
    r"expected device \S+ but got device|device type for generator",
    re.IGNORECASE,
)
# What PyTorch raises for them: an op's RuntimeError, torch.nn.utils' TypeError, a check's ValueError.
_REFUSALS = (RuntimeError, TypeError, ValueError)
_DEVICE_WORD = re.compile(r"\b(cuda:\d+|cpu|meta)\b")
_DEVICE_CODES = frozenset({"MP001", "MP004", "MP007", "MP008", "MP012", "MP013"})
_MAX_ITEMS = 64  # items of a list or tuple local read for their devices


def on_program_stopped(self: Checker, exc: BaseException) -> None:
    """MP001 at the user's line where `exc`, PyTorch's refusal of tensors on different devices, stopped
    the program; nothing for any other exception, or where a device finding is already at that line."""
    if (
        not self.wants("MP001")
        or not isinstance(exc, _REFUSALS)
        or not DEVICE_ERROR.search(str(exc))
        or exc.__traceback__ is None
    ):
        return
    entries = []  # the traceback's entries, outermost first
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    frames = [e.tb_frame for e in entries]
    user, library = user_frames_from(frames[-1])
    if user is None or user not in frames:
        return
    at = frames.index(user)
    inside = frames[at + 1 :]  # the library's frames, from the user's call to the raise
    if any(is_mpcheck_file(f.f_code.co_filename) for f in inside) and not getattr(exc, "mpcheck_unchecked", False):
        return  # raised through mpcheck's hooks or mode: a checked call, whose finding the checks made
    site = site_of_traceback(entries[at], library)
    if any(f.code in _DEVICE_CODES and f.path == site.path and f.line == site.line for f in self.findings):
        return
    devices = _devices_named(str(exc)) or _devices_held(self, inside)
    said = f"{type(exc).__name__}: {exc}"
    where = f" in {site.context}" if site.context else ""
    between = " and ".join(devices) if devices else "different devices"
    if "generator" in str(exc):
        # `torch.randn(..., generator=torch.Generator(), device="cuda:1")`: a generator has no `.to()`
        what = "the generator and the tensor it draws for are of two device types"
        fix = "make the generator where it draws: `torch.Generator(device=...)` (it has no `.to()`)"
    elif "cpu" in devices and any(str(f.f_globals.get("__name__", "")).startswith("torch.optim") for f in inside):
        # A step of torch's optimizers with a state on the host: `optimizer.load_state_dict` puts each state
        # where its parameter is at that moment, so a model placed after it leaves the states behind.
        what = (
            f"the optimizer's state is on the CPU while its parameters are on {between.replace(' and cpu', '')}: "
            "a state stays where its parameter was when it was made or loaded (`load_state_dict`), and the "
            "model moved after"
        )
        fix = (
            "place the model on its devices before `optimizer.load_state_dict(...)`, or build the optimizer "
            "and load its state after the model is placed"
        )
    elif "same index" in str(exc) and any(
        str(f.f_globals.get("__name__", "")).startswith("torch.optim") for f in inside
    ):
        # The foreach step's grouping: a state tensor on another GPU than its parameter. Optimizer.load_state_dict
        # moves every state tensor to its parameter's device but `step` (unless fused or capturable).
        what = (
            f"the optimizer holds a state tensor on one of {between} beside its parameter on the other: "
            "`load_state_dict` moves each state to its parameter's device except the `step` counts, so a "
            "checkpoint loaded with map_location onto one GPU leaves them there (and a model moved after the "
            "optimizer's first step leaves all its state behind)"
        )
        fix = (
            "load the checkpoint with map_location='cpu' (the state then follows each parameter), or build and "
            "load the optimizer after the model is placed"
        )
    else:
        what = f"the tensors it was given are on {between}"
        fix = (
            "bring what this call is given onto one device first (`.to(...)` on each tensor), or do the work "
            "once per device (over a split model's parameters: group them by `p.device`)"
        )
    self.emit(
        "MP001",
        site,
        f"PyTorch stopped the program here{where} with {said!r}: {what}",
        devices=devices,
        suggestion=fix,
        fatal=False,  # it has stopped already: on_mismatch has nothing left to decide
    )


def _devices_named(message: str) -> list[str]:
    """The devices a message names ("... found at least two devices, cuda:0 and cuda:1"), in order."""
    return list(dict.fromkeys(_DEVICE_WORD.findall(message)))


def _devices_held(self: Checker, frames: list[Any]) -> list[str]:
    """The devices of the tensors that `frames` (a library's, between the user's call and the raise) held,
    alone or in a list or tuple: what the call was given, when its message names no device."""
    seen: dict[str, None] = {}
    for frame in frames:
        for value in frame.f_locals.values():
            items = value[:_MAX_ITEMS] if isinstance(value, (list, tuple)) else (value,)
            for item in items:
                if isinstance(item, self._tensor):
                    seen[self.devices.device_of(item)] = None
    return list(seen) if len(seen) > 1 else []
