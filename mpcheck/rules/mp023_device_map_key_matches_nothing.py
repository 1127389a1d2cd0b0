"""MP023: a key of a hand-written device map that nothing looks up, beside a name looked up in vain."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

import libcst as cst

from mpcheck.devices.events import MapLookup
from mpcheck.devices.values import show
from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext
from mpcheck.rules.words import FLOW_WORDS

# How alike a missing name and an unused key must be to be one part under two spellings (difflib's ratio:
# `decoder_blocks` / `decoder_layers` 0.71, `lm_head` / `head` 0.73; `blocks` / `pooler`, two parts, 0.17).
_ALIKE = 0.6


class DeviceMapKeyMatchesNothing(Rule):
    code = "MP023"
    needs = FLOW_WORDS

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        by_map: dict[int, list[MapLookup]] = {}
        for ev in ctx.model.facts(MapLookup):
            by_map.setdefault(id(ev.literal), []).append(ev)
        for lookups in by_map.values():
            literal = lookups[0].literal
            if not ctx.owns(literal) or any(ev.key is None for ev in lookups):
                continue  # read whole, or by a name not known here: any key may be used
            devices = dict(lookups[0].devices)
            asked = {ev.key for ev in lookups}
            unused = [k for k in devices if k not in asked]
            reported: set[str] = set()
            for miss in (ev for ev in lookups if not ev.found):
                assert miss.key is not None
                key = _most_alike(miss.key, unused)
                if key is None or key in reported or miss.default == devices[key]:
                    continue
                reported.add(key)
                yield self._finding(ctx, literal, key, devices[key], miss)

    def _finding(self, ctx: FileContext, literal: cst.Dict, key: str, dev: str, miss: MapLookup) -> Finding:
        assert miss.key is not None
        if miss.default == "":
            instead = "gets None, so it stays where it was built"
        elif miss.default is not None:
            instead = f"gets the default ({show(miss.default)})"
        else:
            instead = "takes the code's fallback"
        return self.finding(
            ctx,
            _key_node(literal, key) or literal,
            f"The device map's key `{key!r}` (for {show(dev)}) names nothing the code looks up, and the name it "
            f"looks up at line {ctx.line(miss.node)}, `{miss.key!r}`, is not a key: that part {instead} instead of "
            f"{show(dev)}. Spell the key as the code names the part: `{miss.key!r}`.",
            devices=[dev, miss.default or None],
            modules=[miss.key],
            suggestion=f"rename the key {key!r} to {miss.key!r}",
        )


def _most_alike(name: str, keys: list[str]) -> str | None:
    """The key most like `name`, when it is alike enough to be the same part spelled another way."""
    scored = [(difflib.SequenceMatcher(None, name, k).ratio(), k) for k in keys]
    best = max(scored, default=None)
    return best[1] if best is not None and best[0] >= _ALIKE else None


def _key_node(literal: cst.Dict, key: str) -> cst.CSTNode | None:
    """The literal's element whose key is the string `key`."""
    for e in literal.elements:
        if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == key:
            return e
    return None
