"""What a rule is.

A rule is one module `mpcheck/rules/mpNNN_kebab_name.py` holding one `Rule`
subclass, plus its document `rules/MPNNN-kebab-name.md` at the top of the repo.
The document's fenced examples (```python bad / ```python good) are the rule's
tests: tests/test_rule_docs.py runs every one of them.

A rule asks the device model questions (where is this value? which devices does
this class use?) through `ctx.model`; it does not re-derive placements itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, ClassVar, Iterable, TypeVar

from mpcheck.finding import Finding, Fix

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from mpcheck.rules.context import FileContext

E = TypeVar("E")


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


def once_per_node(events: Iterable[E], keep: Callable[[E], bool] | None = None) -> Iterable[E]:
    """The first event at each node that `keep` accepts (all, without `keep`):
    one finding per expression, however many operands or paths disagree there.
    An event `keep` refuses does not hide a later one at the same node."""
    seen: set[int] = set()
    for ev in events:
        if (keep is None or keep(ev)) and id(ev.node) not in seen:
            seen.add(id(ev.node))
            yield ev
