"""What a rule is.

A rule is one module `mpcheck/rules/mpNNN_kebab_name.py` holding one `Rule`
subclass, plus its document `rules/MPNNN-kebab-name.md` at the top of the repo.
The document's fenced examples (```python bad / ```python good) are the rule's
tests: tests/test_rule_docs.py runs every one of them.

A rule asks the device model questions (where is this value? which devices does
this class use?) through `ctx.model`; it does not re-derive placements itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Iterable

from mpcheck.finding import Finding, Fix

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from mpcheck.rules.context import FileContext


class Rule:
    code: ClassVar[str]  # "MP002"
    name: ClassVar[str]  # "split-model-in-data-parallel"
    summary: ClassVar[str]  # one line, shown by `mpcheck rule --all` and in SARIF
    severity: ClassVar[str] = "error"
    # The text pre-filter: a file that contains none of these words is never
    # parsed for this rule. Keep them as specific as the rule allows.
    needs: ClassVar[tuple[str, ...]] = ()

    def check(self, ctx: "FileContext") -> Iterable[Finding]:
        raise NotImplementedError

    def finding(
        self,
        ctx: "FileContext",
        node: "cst.CSTNode",
        message: str,
        *,
        devices: Iterable[str] = (),
        modules: Iterable[str] = (),
        suggestion: str | None = None,
        fix: Fix | None = None,
    ) -> Finding:
        (line, col), (end_line, end_col) = ctx.span(node)
        return Finding(
            code=self.code,
            name=self.name,
            path=ctx.path,
            line=line,
            column=col,
            end_line=end_line,
            end_column=end_col,
            message=message,
            severity=self.severity,
            devices=tuple(devices),
            modules=tuple(modules),
            suggestion=suggestion,
            fix=fix,
        )
