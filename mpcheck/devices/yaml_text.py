"""The part of YAML that a configuration spelled out in a script uses, read without PyYAML (the linter does not
depend on it): `yaml.safe_load('''devices: {encoder: "cuda:0"}\\nstages:\\n  - device: cuda:1''')`.

Block mappings and sequences by indentation, flow lists and mappings of scalars on one line, and scalars (quoted
or plain strings, ints, floats, booleans, null), with `#` comments. Anything else (anchors, tags, multi-line
scalars, several documents) makes `load` give None: the text's values are then not known, as for any text the
file does not spell out. Where it answers, it answers what PyYAML's safe_load would.
"""

from __future__ import annotations

import re
from typing import Any

_UNSUPPORTED = re.compile(r"^\s*(?:---|\.\.\.|%)|[&*!|>]\s*$|^\s*[&*!|>]|:\s+[&*!|>]")
# YAML 1.1, as PyYAML resolves plain scalars: a float needs a dot (`1e5` is a string) and an exponent's sign.
_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$")
_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+][0-9]+)?$")
# Other numbers PyYAML reads (octal `010`, hex, binary, sexagesimal `1:30`, `.inf`): refused, not guessed.
_OTHER_NUMBER = re.compile(r"^[-+]?(?:0[0-9bx]|[1-9][0-9_]*(?::[0-5]?[0-9])+$|\.(?:inf|nan)$)", re.IGNORECASE)
_BOOLEANS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}


class _Unsupported(Exception):
    pass


def load(text: str) -> Any:
    """What yaml.safe_load gives for `text`, or None when the text goes beyond the subset read here."""
    lines = []
    for raw in text.splitlines():
        line = _strip_comment(raw).rstrip()
        if not line.strip():
            continue
        if "\t" in line[: len(line) - len(line.lstrip())] or _UNSUPPORTED.search(line):
            return None
        lines.append((len(line) - len(line.lstrip()), line.strip()))
    if not lines:
        return None
    try:
        value, end = _block(lines, 0, lines[0][0])
    except (_Unsupported, IndexError, ValueError):
        return None
    return value if end == len(lines) else None


def _strip_comment(line: str) -> str:
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _block(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[Any, int]:
    """The block node starting at line i, whose lines are indented `indent`: (its value, the next line's index)."""
    if lines[i][1].startswith("- ") or lines[i][1] == "-":
        items: list[Any] = []
        while i < len(lines) and lines[i][0] == indent and (lines[i][1].startswith("- ") or lines[i][1] == "-"):
            rest = lines[i][1][1:].strip()
            if not rest:
                value, i = _block(lines, i + 1, lines[i + 1][0]) if i + 1 < len(lines) else (None, i + 1)
            elif _key_value(rest) is not None:
                # `- device: cuda:1` then more keys of that item, indented past the dash
                inner = indent + 2
                sub = [(inner, rest)]
                j = i + 1
                while j < len(lines) and lines[j][0] > indent:
                    sub.append(lines[j])
                    j += 1
                value, used = _block(sub, 0, inner)
                if used != len(sub):
                    raise _Unsupported
                i = j
            else:
                value, i = _scalar(rest), i + 1
            items.append(value)
        return items, i
    mapping: dict[Any, Any] = {}
    while i < len(lines) and lines[i][0] == indent:
        kv = _key_value(lines[i][1])
        if kv is None:
            raise _Unsupported
        key, rest = kv
        if rest:
            mapping[key], i = _scalar(rest), i + 1
        elif i + 1 < len(lines) and lines[i + 1][0] > indent:
            mapping[key], i = _block(lines, i + 1, lines[i + 1][0])
        elif i + 1 < len(lines) and lines[i + 1][0] == indent and lines[i + 1][1].startswith("-"):
            mapping[key], i = _block(lines, i + 1, indent)  # a sequence at the key's own indentation
        else:
            mapping[key], i = None, i + 1
    if i < len(lines) and lines[i][0] > indent:
        raise _Unsupported
    return mapping, i


def _key_value(line: str) -> tuple[Any, str] | None:
    """`key: rest` (rest may be empty), the key read as a scalar; None when the line is no mapping entry."""
    if line[:1] in "'\"":
        close = line.find(line[0], 1)
        if close < 0 or not line[close + 1 :].startswith(":"):
            return None
        return line[1:close], line[close + 2 :].strip()
    m = re.match(r"^([^:{}\[\],]+?):(?:\s+(.*))?$", line)
    if m is None:
        return None
    return _scalar(m.group(1).strip()), (m.group(2) or "").strip()


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        return [_scalar(p) for p in _split_flow(text[1:-1])]
    if text.startswith("{") and text.endswith("}"):
        out = {}
        for part in _split_flow(text[1:-1]):
            kv = _key_value(part)
            if kv is None:
                raise _Unsupported
            out[kv[0]] = _scalar(kv[1]) if kv[1] else None
        return out
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        inner = text[1:-1]
        if text[0] == '"' and "\\" in inner:
            raise _Unsupported
        return inner.replace("''", "'") if text[0] == "'" else inner
    if text[:1] in "[{'\"":
        raise _Unsupported
    if text in _BOOLEANS or text.lower() in _BOOLEANS and text in (text.lower(), text.upper(), text.capitalize()):
        return _BOOLEANS[text.lower()]
    if text in ("null", "Null", "NULL", "~", ""):
        return None
    if _OTHER_NUMBER.match(text):
        raise _Unsupported
    if _INT.match(text):
        return int(text.replace("_", ""))
    if _FLOAT.match(text):
        return float(text.replace("_", ""))
    return text


def _split_flow(text: str) -> list[str]:
    """The items of a flow collection's inside, split at top-level commas (no nesting: that is refused)."""
    if any(ch in text for ch in "[]{}"):
        raise _Unsupported
    parts: list[str] = []
    quote = ""
    cur: list[str] = []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == ",":
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    last = "".join(cur).strip()
    if last:
        parts.append(last)
    return parts
