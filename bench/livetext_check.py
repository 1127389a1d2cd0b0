"""Does the pre-filter's lexer (mpcheck/lint/livetext.py) agree with Python's tokenizer?

    python bench/livetext_check.py [PATH ...]     # default: this Python's site-packages

For every .py file that holds one of the rules' words, every span the lexer calls a comment
or a prose string must be, for `tokenize`, a comment or a string token without an f prefix
that has white space in it. A span outside those would hide a word that counts: the file's
rules would not run. Files `tokenize` refuses are skipped. Prints the spans checked and any
disagreement; exits 1 on a disagreement. (Measured: 11,180 files of the development venv's
site-packages, 128,524 spans, 0 disagreements.)
"""

from __future__ import annotations

import io
import re
import sys
import sysconfig
import tokenize
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mpcheck.lint.livetext import LiveText  # noqa: E402
from mpcheck.rules import all_rules  # noqa: E402

WORDS = sorted({w for rule in all_rules() for w in rule.needs} | {"Loss"})


def tokenizer_spans(source: str) -> list[tuple[int, int]] | None:
    """What the lexer should call inert, by `tokenize`; None when it cannot tokenize the file."""
    offset = [0]
    for line in source.splitlines(keepends=True):
        offset.append(offset[-1] + len(line))
    spans = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT or (
                tok.type == tokenize.STRING
                and re.search(r"\s", tok.string)
                and not re.match(r"(?i)[rbu]*f", tok.string)
            ):
                spans.append((offset[tok.start[0] - 1] + tok.start[1], offset[tok.end[0] - 1] + tok.end[1]))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return spans


def disagreements(source: str) -> list[tuple[int, int]]:
    """The lexer's inert spans that the tokenizer does not call inert."""
    truth = tokenizer_spans(source)
    if truth is None:
        return []
    known = set(truth)
    return [span for span in LiveText(source).inert_spans() if span not in known]


def main(paths: list[str]) -> int:
    files = checked = bad = 0
    for root in paths:
        for path in sorted(Path(root).rglob("*.py")) if Path(root).is_dir() else [Path(root)]:
            try:
                source = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if not any(w in source for w in WORDS):
                continue
            files += 1
            checked += len(LiveText(source).inert_spans())
            for start, end in disagreements(source):
                bad += 1
                print(f"{path}: {start}-{end}: {source[start : min(end, start + 60)]!r}")
    print(f"{files} files with a rule's word, {checked} inert spans, {bad} disagreements")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or [sysconfig.get_paths()["purelib"]]))
