"""Load a case's cached real file as a module, under its own path (so findings point at its lines)."""

import importlib.util
import os
from types import ModuleType


def load_file(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
