"""MP000, the finding for a file that could not be read, decoded or parsed.

Both the lint pipeline (a file it cannot read) and the analysis (a file libcst cannot
parse) report it, so it lives below both.
"""

from __future__ import annotations

from mpcheck import codes
from mpcheck.finding import Finding

SYNTAX_ERROR_CODE = codes.SYNTAX_ERROR.code


def syntax_finding(path: str, message: str, line: int = 1, column: int = 1) -> Finding:
    """The MP000 finding for a file that could not be read, decoded or parsed."""
    return Finding(
        code=codes.SYNTAX_ERROR.code,
        name=codes.SYNTAX_ERROR.name,
        path=path,
        line=line,
        column=column,
        message=message,
        severity=codes.SYNTAX_ERROR.severity,
    )


def _compile(path: str, source: str) -> None:
    """Python's own compile of `source` (what `python -m py_compile` checks); raises what it raises."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarnings (invalid escapes) are not ours to print
        compile(source, path, "exec", dont_inherit=True)


def _from_syntax_error(path: str, exc: SyntaxError) -> Finding:
    return syntax_finding(path, f"could not parse: {exc.msg}", max(exc.lineno or 1, 1), max(exc.offset or 1, 1))


def compile_failure(path: str, source: str) -> Finding | None:
    """The MP000 finding for `source` when Python's compiler refuses it, else None."""
    try:
        _compile(path, source)
    except SyntaxError as exc:  # IndentationError and TabError included
        return _from_syntax_error(path, exc)
    except (ValueError, MemoryError, RecursionError) as exc:  # null bytes, nesting too deep
        return syntax_finding(path, f"could not parse: {exc}")
    return None


def parse_failure(path: str, source: str, error: Exception) -> Finding:
    """The MP000 finding for a file libcst could not parse. Python's own
    SyntaxError gives the position and wording the user knows (libcst's often
    points at the line after, or at 1:1, and lists the tokens it expected);
    libcst's is used only when Python compiles the file."""
    try:
        _compile(path, source)
    except SyntaxError as exc:  # IndentationError and TabError included
        return _from_syntax_error(path, exc)
    except (ValueError, MemoryError, RecursionError):  # null bytes, too deep: fall back to libcst's
        pass
    line = getattr(error, "editor_line", 1)
    column = getattr(error, "editor_column", 1)
    message = getattr(error, "message", "") or f"{type(error).__name__}: {error}"
    first = message.strip().splitlines()[0] if message.strip() else "syntax error"
    # "expected one of !=, %, &, (, ...": the token list helps nobody.
    first = first.split(": expected one of ")[0].split(" expected one of ")[0]
    return syntax_finding(path, f"could not parse: {first}", max(line, 1), max(column, 1))
