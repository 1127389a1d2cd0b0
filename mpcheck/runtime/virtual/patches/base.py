"""How the dry run's patches are made and undone: each `set` remembers what it replaced."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any


class Patches:
    def __init__(self) -> None:
        self._saved: list[tuple[Any, Any, Any, bool]] = []  # (object, name or undo callable, old, had)

    def set(self, obj: Any, name: str, value: Any) -> None:
        if isinstance(obj, type):
            # The raw descriptor from the class dict: getattr would give a bound classmethod.
            had = name in vars(obj)
            old = vars(obj).get(name)
        elif hasattr(obj, "__dict__"):
            # The object's own attribute, if it has one: an attribute it only reaches through its class or a
            # `__getattr__` (torch.backends.cudnn delegates to the module it wraps) is deleted on restore,
            # not copied onto the object.
            had = name in vars(obj)
            old = vars(obj).get(name)
        else:
            had = hasattr(obj, name)
            old = getattr(obj, name, None)
        self._saved.append((obj, name, old, had))
        setattr(obj, name, value)

    def set_item(self, d: MutableMapping, key: Any, value: Any) -> None:
        """`d[key] = value` until restore(); `d` may be os.environ."""
        self._saved.append((d, key, d.get(key), key in d))
        d[key] = value

    def on_restore(self, undo: Callable[[], None]) -> None:
        """Call `undo` when restoring, in its place among the other undos (last set, first undone)."""
        self._saved.append((None, undo, None, False))

    def restore(self) -> None:
        while self._saved:
            obj, name, old, had = self._saved.pop()
            if obj is None:
                name()
            elif isinstance(obj, MutableMapping):
                if had:
                    obj[name] = old
                else:
                    obj.pop(name, None)
            elif had:
                setattr(obj, name, old)
            else:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass


def distinct(value: Any) -> Any:
    """A new function object per patched name: torch._dynamo, when first imported (an optimizer imports it),
    maps torch functions to rules and refuses one object under two names."""
    if isinstance(value, type):
        return type(value.__name__, (value,), {})

    def patched(*a: Any, **k: Any) -> Any:
        return value(*a, **k)

    patched.__name__ = getattr(value, "__name__", "patched")
    return patched
