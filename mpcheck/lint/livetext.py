"""Where a word of a file is code: the pre-filter's question, answered without a parse.

A rule's words (`cuda`, `devices`, ...) count only where the device model could read
them: in code, or in a string that could be a device or a name (`"cuda:1"`, `"cuda"`,
`f"cuda:{i}"`, `"CUDA_VISIBLE_DEVICES"`). They do not count in a comment, nor in a
string with white space in it: prose (a docstring, an error message, `help=` text) is
never a device, a module attribute or an environment variable's name. A JSON object or list
(`'{"encoder": "cuda:0", "decoder": "cuda:1"}'`, a placement read with json.loads, or a Python literal's text read
with ast.literal_eval) is data, and counts, as is a one-line list of settings that names a device
(`"encoder=cuda:0 crf=cuda:1"`, which the file splits), and so is a one-line list of devices (`"cuda:0 cuda:1"`, split by the file), and a config file's text with a line
that sets a key to a device (`key_device = "cuda:1"` in TOML, `device: cuda:1`
in YAML or INI). An f-string
always counts (its fields are code). Of torch's 2,285 files, 598 hold a rule's word and
494 hold one in code: the other 104 are no longer parsed.

A regular expression finds the comments and string literals, left to right, as
Python's tokenizer does, and only as far as the first occurrence that counts.
Where it could be wrong it errs towards "counts": text it cannot lex (an
unterminated string) is read as code, and a quote inside an f-string's field
(`f"{d["k"]}"`, Python 3.12) only splits that f-string into pieces that all count.
Checked against `tokenize` on every site-packages file of the development
environment that holds a rule's word (bench/livetext_check.py): no span it calls
prose or comment is anything else.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator

_STRING_BODY = (
    r"'''(?:[^'\\]|\\.|'(?!''))*'''"
    r'|"""(?:[^"\\]|\\.|"(?!""))*"""'
    r"|'(?:[^'\\\r\n]|\\.)*'"
    r'|"(?:[^"\\\r\n]|\\.)*"'
)
# A comment, or a string literal with its prefix (not the tail of a name: `xf"..."` is no prefix).
_LEXEME = re.compile(r"(#[^\r\n]*)|(?<!\w)([rRbBuUfF]{0,3})(?:" + _STRING_BODY + ")", re.S)
_SPACE = re.compile(r"\s")
# The opening of a JSON object or list literal in a string: `'{"`, `"[{`, `'["`, a triple-quoted `"""{\n  "`; or of
# a Python literal's (`"{'embed': 'cuda:0'}"`, `"('cuda:0', 'cuda:1')"`, read with ast.literal_eval).
# A line of a config file's text (TOML, YAML, INI: tomllib.loads, yaml.safe_load, configparser.read_string) that
# sets a key to a device: `key_device = "cuda:1"`, `devices: [cuda:0, cuda:1]`, `device=cuda`.
_CONFIG_DEVICE = re.compile(
    r"""^[ \t]*[\w.\-]+[ \t]*[:=][ \t]*[\["']?[ \t]*["']?cuda(?::\d+)?(?:["',\]]|[ \t]*$)""", re.M
)
# A one-line list of settings (`"encoder=cuda:0 crf=cuda:1"`, `"enc=cuda:0,dec=cuda:1"`), parsed by the file with
# `split`: data when one of them names a CUDA device.
_KEY_VALUES = re.compile(r"""["'][\w.\-]+=[^\s"'=,;]+(?:[ \t]*[ \t,;][ \t]*[\w.\-]+=[^\s"'=,;]+)*["']""")
# A one-line list of devices (`"cuda:0 cuda:1"`, `"cpu cuda:1"`), which the file splits: data.
_DEVICE_LIST = re.compile(r"""["'][ \t]*(?:cuda(?::\d+)?|cpu)(?:[ \t,;]+(?:cuda(?::\d+)?|cpu))+[ \t]*["']""")
_JSON = re.compile("(?:'''|\"\"\"|'|\")" + r"""\s*[\[{(]\s*[\[{("']""")


class LiveText:
    """One file's text; `has(word)`: does `word` occur where it counts?"""

    def __init__(self, source: str):
        self.source = source
        self._lexemes: Iterator[re.Match[str]] = _LEXEME.finditer(source)
        self._inert: list[tuple[int, int]] = []  # comments and prose strings found so far, in order
        self._scanned = 0  # the lexer has gone this far

    def has(self, word: str) -> bool:
        at = self.source.find(word)
        while at >= 0:
            end = self._inert_end(at, at + len(word))
            if end is None:
                return True
            at = self.source.find(word, end)
        return False

    def in_code(self, start: int, stop: int) -> bool:
        """Is source[start:stop] outside every comment and prose string?"""
        return self._inert_end(start, stop) is None

    def inert_spans(self) -> list[tuple[int, int]]:
        """(start, end) of every comment and prose string of the file, in order (scans it all)."""
        self._inert_end(len(self.source), len(self.source))
        return list(self._inert)

    def _inert_end(self, start: int, stop: int) -> int | None:
        """The end of the comment or prose string that holds source[start:stop], or None."""
        while self._scanned <= start:
            m = next(self._lexemes, None)
            if m is None:
                self._scanned = len(self.source) + 1
                break
            self._scanned = m.end()
            if m.group(1) is None:  # a string: prose only when it is no f-string and has white space
                prefix = m.group(2)
                if "f" in prefix or "F" in prefix or _SPACE.search(self.source, m.start(), m.end()) is None:
                    continue
                if _JSON.match(self.source, m.start() + len(prefix)):
                    continue  # a JSON object or list (`'{"encoder": "cuda:0", ...}'`, json.loads'): data
                if _CONFIG_DEVICE.search(self.source, m.start(), m.end()):
                    continue  # a config file's text (TOML, YAML, INI) that sets a device: data
                body = m.start() + len(prefix)
                if _KEY_VALUES.fullmatch(self.source, body, m.end()) and "cuda" in self.source[body : m.end()]:
                    continue  # `"encoder=cuda:0 crf=cuda:1"`: settings the file splits, data
                if _DEVICE_LIST.fullmatch(self.source, body, m.end()):
                    continue  # `"cuda:0 cuda:1".split()`: devices the file splits, data
            self._inert.append((m.start(), m.end()))
        # The spans are ordered and disjoint: the last one starting at or before `start` is the candidate.
        k = bisect.bisect_right(self._inert, start, key=lambda span: span[0])
        if k and stop <= self._inert[k - 1][1]:
            return self._inert[k - 1][1]
        return None
