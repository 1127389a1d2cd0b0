"""A torch call's arguments as the checks read them: the tensors in them (one level into lists and
tuples) and where each sits, an argument's name in a message, and the arguments rebuilt with some
tensors replaced (on_mismatch="move").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

# A torch call's arguments, and where a tensor sits in them: (position or keyword, index in a
# list or tuple argument, or None).
Args = tuple[Any, ...]
Kwargs = dict[str, Any]
Where = tuple[int | str, int | None]


def op_name(func: Any) -> str:
    try:
        from torch.overrides import resolve_name

        name = resolve_name(func)
    except Exception:  # pragma: no cover - resolve_name is best effort
        name = None
    return str(name or getattr(func, "__name__", repr(func)))


def iter_tensors(args: Iterable[Any], kwargs: Kwargs, tensor_type: type) -> Iterator[tuple[Where, Any]]:
    """(location, tensor) for every tensor in args/kwargs, one level into lists and tuples."""
    for i, a in enumerate(args):
        if isinstance(a, tensor_type):
            yield (i, None), a
        elif isinstance(a, (list, tuple)):
            for j, b in enumerate(a):
                if isinstance(b, tensor_type):
                    yield (i, j), b
    for k, a in kwargs.items():
        if isinstance(a, tensor_type):
            yield (k, None), a
        elif isinstance(a, (list, tuple)):
            for j, b in enumerate(a):
                if isinstance(b, tensor_type):
                    yield (k, j), b


def replace_tensors(args: Args, kwargs: Kwargs, moved: dict[Where, Any]) -> tuple[Args, Kwargs]:
    new_args = list(args)
    new_kwargs = dict(kwargs)
    for (where, inner), t in moved.items():
        if isinstance(where, str):
            new_kwargs[where] = _put(new_kwargs[where], inner, t)
        else:
            new_args[where] = _put(new_args[where], inner, t)
    return tuple(new_args), new_kwargs


def _put(old: Any, inner: int | None, t: Any) -> Any:
    """`t` in place of an argument (`inner` None), or of its item `inner` (a list or tuple argument)."""
    if inner is None:
        return t
    seq = list(old)
    seq[inner] = t
    return type(old)(seq) if isinstance(old, tuple) else seq


def describe_where(where: Where) -> str:
    pos, inner = where
    name = f"argument {pos}" if isinstance(pos, int) else f"keyword argument {pos!r}"
    return name if inner is None else f"{name}[{inner}]"
