"""torch.load under the run-time faces: which device each storage of the checkpoint was saved from.

A whole model pickled while split over two GPUs (`torch.save(model, path)`) and loaded with one
`map_location` (`torch.load(path, map_location="cuda:0")`) comes back with every stage on that one
device: the split is undone, as by `model.to("cuda:0")` (MP007, split_model.on_model_loaded). A
map_location that names one device (a string, a torch.device, an integer) or a table of locations is
handed to torch.load as the same mapping, written as a function that also notes each storage's saved
location; a function of the user's, or none, is left as it is (the storages go where they were saved,
or where that function decides)."""

from __future__ import annotations

from typing import Any

import torch

from mpcheck.runtime.capture.hooks import Undo, patch
from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.sites import user_site


def install(checker: Checker) -> Undo:
    import torch.serialization as ser

    restore_for = getattr(ser, "_get_restore_location", None)
    orig_load = torch.load
    if restore_for is None:  # pragma: no cover - a torch without the helper: nothing noted
        return lambda: None

    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(map_location, int) and not isinstance(map_location, bool):
            map_location = f"cuda:{map_location}"  # CUDA's device k, as torch.load reads an integer
        if not isinstance(map_location, (str, torch.device, dict)):
            return orig_load(f, map_location, *args, **kwargs)
        restore = restore_for(map_location)
        saved_on: dict[int, str] = {}  # a restored storage (its C pointer) -> the device it was saved from

        def noting(storage: Any, location: str) -> Any:
            out = restore(storage, location)
            saved_on[getattr(out, "_cdata", id(out))] = location
            return out

        site = user_site()
        out = orig_load(f, noting, *args, **kwargs)
        if saved_on:
            checker.on_model_loaded(out, saved_on, map_location, site)
        return out

    return patch(torch, "load", load)
