"""Wording shared by the rules' messages: how to name a split model, a value, a device."""

from __future__ import annotations

from mpcheck.devices.values import Obj, SeqV, Val, distinct_devices, show


def split_desc(v: Val) -> str:
    """'an instance of SplitNet, whose submodules sit on cuda:0 (enc) and cuda:1 (dec)'."""
    if isinstance(v, Obj) and v.split:
        by_dev: dict[str, list[str]] = {}
        for attr, dev in v.split:
            by_dev.setdefault(dev, []).append(attr)
        parts = [f"{show(d)} ({', '.join(a[:3])}{', ...' if len(a) > 3 else ''})" for d, a in by_dev.items()]
        where = " and ".join(parts) if len(parts) <= 2 else ", ".join(parts[:-1]) + " and " + parts[-1]
        cls = v.cls.name if v.cls is not None else (v.label or "a model")
        return f"a {cls} split over {where}"
    if isinstance(v, Obj) and v.dispatched:
        return f"a model dispatched over several devices with {v.dispatched}"
    if isinstance(v, SeqV):
        from mpcheck.devices.interp import _placements

        ds = distinct_devices(d for d, _ in _placements(v))
        return "a module container split over " + ", ".join(show(d) for d in ds)
    return "a model split over several devices"


def split_devices(v: Val) -> list[str]:
    if isinstance(v, Obj) and v.split:
        return distinct_devices(d for _, d in v.split)
    if isinstance(v, SeqV):
        from mpcheck.devices.interp import _placements

        return distinct_devices(d for d, _ in _placements(v))
    return []


def split_modules(v: Val) -> list[str]:
    if isinstance(v, Obj) and v.split:
        return [a for a, _ in v.split]
    return []
