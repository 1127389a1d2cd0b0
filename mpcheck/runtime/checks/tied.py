"""Tied weights: one Parameter object held by two modules (a language model's token embedding and its
output projection). A device map that puts the two modules on different GPUs cannot place the one
Parameter on both: the last placement wins (accelerate's `dispatch_model` re-ties them to the first
name of the group), and the other module then meets its own weight on a device its map never asked for.
A module-entry mismatch whose module holds such a weight names its partner, so the finding explains that
device. Looked up only when a finding is made, never per call."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def tied_partner(
    module: Any, device: str, roots: Iterable[Any], name_of: Callable[[Any], str], device_of: Callable[[Any], str]
) -> tuple[str, str] | None:
    """(the module's parameter on `device` that another module of the same model also holds, that
    module's name for it as `root.path.weight`), or None."""
    try:
        own = {id(p): n for n, p in module.named_parameters(remove_duplicate=False) if device_of(p) == device}
    except Exception:  # noqa: BLE001  (a module whose parameters cannot be listed: say nothing more)
        return None
    if not own:
        return None
    for root in roots:
        inside = next((prefix for prefix, m in root.named_modules(remove_duplicate=False) if m is module), None)
        if inside is None:
            continue
        for name, p in root.named_parameters(remove_duplicate=False):
            own_name = own.get(id(p))
            if own_name is not None and not (inside == "" or name.startswith(inside + ".")):
                return own_name, f"{name_of(root)}.{name}"
    return None
