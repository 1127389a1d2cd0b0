"""What the pipeline needs to know about each rule (code, name, severity,
summary, pre-filter words) without importing the rules.

Importing the rules imports libcst (0.4 s); a run whose results all come from
the cache must not pay that. So the metadata is stored beside the cache, keyed
by the code fingerprint, and the rules are imported only when it is missing.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import mpcheck
from mpcheck import codes
from mpcheck.finding import Finding

SYNTAX_ERROR_CODE = codes.SYNTAX_ERROR.code


@dataclass(frozen=True)
class RuleMeta:
    code: str
    name: str
    severity: str
    summary: str
    needs: tuple[str, ...]


# MP000 is the pipeline's own (no Rule class, no pre-filter words).
SYNTAX_ERROR = RuleMeta(
    codes.SYNTAX_ERROR.code, codes.SYNTAX_ERROR.name, codes.SYNTAX_ERROR.severity, codes.SYNTAX_ERROR.summary, ()
)


def syntax_finding(path: str, message: str, line: int = 1, column: int = 1) -> Finding:
    """The MP000 finding for a file that could not be read, decoded or parsed."""
    return Finding(
        code=SYNTAX_ERROR.code,
        name=SYNTAX_ERROR.name,
        path=path,
        line=line,
        column=column,
        message=message,
        severity=SYNTAX_ERROR.severity,
    )


def parse_failure(path: str, source: str, error: Exception) -> Finding:
    """The MP000 finding for a file libcst could not parse. Python's own
    SyntaxError gives the position and wording the user knows (libcst's often
    points at the line after, or at 1:1, and lists the tokens it expected);
    libcst's is used only when Python compiles the file."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings (invalid escapes) are not ours to print
            compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:  # IndentationError and TabError included
        return syntax_finding(path, f"could not parse: {exc.msg}", max(exc.lineno or 1, 1), max(exc.offset or 1, 1))
    except (ValueError, MemoryError, RecursionError):  # null bytes, too deep: fall back to libcst's
        pass
    line = getattr(error, "editor_line", 1)
    column = getattr(error, "editor_column", 1)
    message = getattr(error, "message", "") or f"{type(error).__name__}: {error}"
    first = message.strip().splitlines()[0] if message.strip() else "syntax error"
    # "expected one of !=, %, &, (, ...": the token list helps nobody.
    first = first.split(": expected one of ")[0].split(" expected one of ")[0]
    return syntax_finding(path, f"could not parse: {first}", max(line, 1), max(column, 1))


_FINGERPRINT: str | None = None


def code_fingerprint() -> str:
    """mpcheck's version plus the size and mtime of every module that can change
    a lint result (all but the runtime faces): a cache written by other code (a
    new release, an edited rule in a checkout) is never trusted."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        import hashlib

        h = hashlib.blake2b(mpcheck.__version__.encode(), digest_size=12)
        package = Path(mpcheck.__file__).resolve().parent
        for folder, dirs, files in os.walk(package):
            dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "runtime", "_rule_docs"))
            for name in sorted(files):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(folder, name))
                    h.update(
                        f"{os.path.relpath(os.path.join(folder, name), package)}:{st.st_size}:{st.st_mtime_ns};".encode()
                    )
        _FINGERPRINT = f"{mpcheck.__version__}-{h.hexdigest()}"
    return _FINGERPRINT


def _from_registry() -> list[RuleMeta]:
    from mpcheck.rules import all_rules

    return [RuleMeta(r.code, r.name, r.severity, r.summary, tuple(r.needs)) for r in all_rules()]


def load(cache_dir: Path | None) -> dict[str, RuleMeta]:
    """Every rule by code, MP000 included."""
    rules: list[RuleMeta] | None = None
    stored = cache_dir / f"rules-{code_fingerprint()}.json" if cache_dir is not None else None
    if stored is not None:
        try:
            with open(stored, encoding="utf-8") as fh:
                rules = [RuleMeta(**{**d, "needs": tuple(d["needs"])}) for d in json.load(fh)]
        except (OSError, ValueError, TypeError, KeyError):
            rules = None
    if rules is None:
        rules = _from_registry()
        if stored is not None:
            from mpcheck.lint.cache import write_json_atomic

            write_json_atomic(stored, [asdict(r) for r in rules])
    out = {SYNTAX_ERROR_CODE: SYNTAX_ERROR}
    out.update({r.code: r for r in rules})
    return out
