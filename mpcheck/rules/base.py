"""What a rule is.

A rule is one module `mpcheck/rules/mpNNN_kebab_name.py` holding one `Rule`
subclass, plus its document `rules/MPNNN-kebab-name.md` at the top of the repo.
The document's fenced examples (```python bad / ```python good) are the rule's
tests: tests/test_rule_docs.py runs every one of them.

A rule class declares only its `code`; its name, severity and summary come from
mpcheck/codes.py, the one table of every code (a code missing there, or one the
table does not give the lint face, is refused when the class is defined).

A rule asks the device model questions (where is this value? which devices does
this class use?) through `ctx.model`; it does not re-derive placements itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar, TypeVar

from mpcheck import codes
from mpcheck.finding import Finding, Fix

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from mpcheck.devices.events import Fact
    from mpcheck.rules.context import FileContext

E = TypeVar("E", bound="Fact")


class Rule:
    code: ClassVar[str]  # "MP002": the only identity a rule class declares
    # Filled in from mpcheck.codes when the class is defined:
    name: ClassVar[str]  # its kebab name
    summary: ClassVar[str]  # one line, shown by `mpcheck rule --all` and in SARIF
    severity: ClassVar[str]
    # The text pre-filter: a file that contains none of these words is never
    # parsed for this rule. Keep them as specific as the rule allows.
    needs: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            return  # an intermediate base class, not a rule
        try:
            entry = codes.get(cls.code)
        except KeyError:
            raise TypeError(f"{cls.__name__}: {cls.code} is not in mpcheck/codes.py") from None
        if codes.LINT not in entry.faces:
            raise TypeError(f"{cls.__name__}: mpcheck/codes.py does not give {cls.code} the lint face")
        for attr in ("name", "severity", "summary"):
            if attr in cls.__dict__:
                raise TypeError(f"{cls.__name__}: {attr} comes from mpcheck/codes.py; declare only the code")
        cls.name, cls.severity, cls.summary = entry.name, entry.severity, entry.summary

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        raise NotImplementedError

    def finding(
        self,
        ctx: FileContext,
        node: cst.CSTNode,
        message: str,
        *,
        devices: Iterable[str | None] = (),  # None (an unknown device) is left out
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
            devices=tuple(d for d in devices if d is not None),
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
