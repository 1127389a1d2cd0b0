"""Lookups in a dict the file wrote as a literal (a hand-written device map): which keys were asked for, which
were found, and where a `.get()` that missed sent the part instead. Each is a MapLookup fact; MP023 reads them to
find a key that names nothing the code looks up while a name it does look up falls back to the default
(`"decoder_blocks": "cuda:1"` for a module called `decoder_layers`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from mpcheck.devices.events import MapLookup
from mpcheck.devices.values import Const, DictV, Val, as_device, single

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.interp import Interp
    from mpcheck.devices.program import State


def note(
    interp: Interp,
    d: DictV,
    key: Val,
    node: cst.CSTNode,
    st: State,
    default: Val | None = None,
    *,
    subscript: bool = False,
) -> None:
    """`d.get(key, default)`, `d[key]` (`subscript`) or `key in d` at `node`, `d` a dict of a literal of this
    file. A subscript that misses is not one: it raises KeyError, on a path the code guards (`if name in d`)."""
    if not isinstance(d.at, cst.Dict) or d.module or d.namespace:
        return
    name = key.value if isinstance(key, Const) and isinstance(key.value, str) else None
    if subscript and name is not None and name not in d.items:
        return
    interp.recorder.record(
        MapLookup(
            node=node,
            mode=st.mode,
            literal=d.at,
            key=name,
            found=name is not None and name in d.items,
            default=_device_of(default),
            devices=tuple((k, dev) for k, v in d.items.items() if isinstance(k, str) and (dev := _device_of(v))),
        ),
        key=name,
    )


def note_read_whole(interp: Interp, d: DictV, node: cst.CSTNode, st: State) -> None:
    """`d.items()`, `d.keys()`, `d.values()`: every key may be read, by names not known here."""
    note(interp, d, Const(None), node, st)


def _device_of(v: Val | None) -> str | None:
    """The one known device `v` names ("" for None: a part left where it is), else None."""
    if v is None:
        return None
    if isinstance(v, Const) and v.value is None:
        return ""
    devs = as_device(v)
    dev = single(devs) if devs is not None else None
    return dev if dev is not None and not dev.startswith("sym:") else None
