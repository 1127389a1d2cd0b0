"""The text pre-filter: a rule runs on a file only if the file contains one of
the words the rule `needs` where it counts (in code, not in a comment or prose:
lint/livetext.py); a rule that declares none always runs. A file left
with no rule is never parsed, which is what keeps a run over a big code base
that rarely mentions `cuda` cheap. The pipeline also counts, as a file's words, the
constants it imports by name that name a device (pipeline._Project.borrowed)."""

from __future__ import annotations

from collections.abc import Mapping

from mpcheck.lint.livetext import LiveText
from mpcheck.lint.rulemeta import RuleMeta
from mpcheck.syntax import SYNTAX_ERROR_CODE


class PreFilter:
    def __init__(self, rules: Mapping[str, RuleMeta], codes: frozenset[str]):
        self.needs = {c: rules[c].needs for c in codes if c in rules and c != SYNTAX_ERROR_CODE}
        self.words = sorted({w for needs in self.needs.values() for w in needs})
        self._signatures: dict[frozenset[str], str] = {}
        self._lexed: dict[int, LiveText] = {}  # id(text) -> its LiveText (which holds the text: ids stay unique)
        # A module imported by a checked file is summarised when *any* rule could
        # care about it, selected or not: a selected rule in train.py may need the
        # placement facts of a model.py that only mentions words of other rules.
        every = [r.needs for c, r in rules.items() if c != SYNTAX_ERROR_CODE]
        self._summary_always = any(not needs for needs in every)
        # "Loss": a loss class whose forward names no device still tells an importer's MP008 that it
        # compares its two inputs (devices/summary.py, _is_loss_of_inputs). "def forward": a module
        # class that names no device still tells an importer that moves it whole where its forward
        # then needs its input, or that it moves its input itself (summary._after_move); unsummarised,
        # the importer would take any module for one that needs its input where it was moved.
        self._summary_words = sorted({w for needs in every for w in needs} | {"Loss", "def forward"})

    def words_of(self, codes: frozenset[str]) -> frozenset[str]:
        """The words any of the rules in `codes` needs."""
        return frozenset(w for c in codes for w in self.needs.get(c, ()))

    def signature(self, codes: frozenset[str]) -> str:
        """What the verdict for a file depends on besides its text: the words of
        the rules in `codes` (\"*\" when one of them has none: it always runs)."""
        sig = self._signatures.get(codes)
        if sig is None:
            needs = [self.needs[c] for c in sorted(codes) if c in self.needs]
            if any(not n for n in needs):
                sig = "*"
            else:
                import hashlib

                words = "\0".join(sorted({w for n in needs for w in n}))
                sig = hashlib.blake2b(words.encode(), digest_size=8).hexdigest()
            self._signatures[codes] = sig
        return sig

    def codes_for(self, source: str, codes: frozenset[str]) -> frozenset[str]:
        """The rules among `codes` that could fire on `source`."""
        # The words in the text at all first (a substring test each: most files hold none), then, of
        # those only, each looked for where it counts (in code, not in a comment or prose:
        # lint/livetext.py) once at most, and only until a rule has one of its words: a file that
        # says `cuda` is not searched for the other flow words.
        present = [w for w in self.words if w in source]
        seen: dict[str, bool] = {}

        def has(word: str) -> bool:
            found = seen.get(word)
            if found is None:
                found = seen[word] = self._live(source).has(word)
            return found

        let_through = frozenset(
            c
            for c in codes
            if c in self.needs and (not self.needs[c] or any(has(w) for w in present if w in self.needs[c]))
        )
        if not let_through:
            self._lexed.pop(id(source), None)  # a file no rule runs on is not read again: keep none of it
        return let_through

    def worth_summarising(self, source: str) -> bool:
        """Whether an imported module could hold facts any rule needs."""
        if self._summary_always:
            return True
        return any(w in source and self._live(source).has(w) for w in self._summary_words)

    def _live(self, source: str) -> LiveText:
        """One LiveText per text, kept while the text is: a file both linted and imported is lexed once, as
        far as the first question needs, then on from there (its text is the project's, read once)."""
        got = self._lexed.get(id(source))
        if got is None or got.source is not source:
            got = self._lexed[id(source)] = LiveText(source)
        return got
