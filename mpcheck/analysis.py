"""The seam between the lint pipeline (files, cache, processes) and the analysis
(device model + rules). The pipeline calls only these three functions; all
three are pure functions of their arguments, so results can be cached and run
in any process.

    files -> read -> pre-filter -> imports() -> summarize() (files others import)
          -> analyze() per file -> findings -> noqa -> reporters
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mpcheck import parsing
from mpcheck.finding import Finding
from mpcheck.syntax import SYNTAX_ERROR_CODE, parse_failure

if TYPE_CHECKING:  # imported only to parse (0.4 s)
    import libcst as cst


class RuleCrash(Exception):
    """A rule, or the device model it asked, raised while checking one file: a bug in
    mpcheck, reported as an internal error (exit 2) and never as a clean file."""

    def __init__(self, path: str, code: str, error: Exception) -> None:
        super().__init__(f"crashed while checking {path} with rule {code}: {type(error).__name__}: {error}")
        self.path = path
        self.code = code


@dataclass
class FileResult:
    findings: list[Finding]
    # Dotted names of the project modules whose summaries this result used:
    # the cache must drop this file's result when any of them changes.
    used_modules: list[str] = field(default_factory=list)
    # Calls of other modules' functions with arguments of known devices (devices/callers.py):
    # {"module", "func", "args", "kwargs", "line", "code"}, for the pipeline to hand to the
    # callee's analysis when that module is linted too (lint/callers.py).
    calls: list[dict[str, Any]] = field(default_factory=list)


# An import statement's text, found from its keyword (a literal the regex engine looks for fast: anchoring at
# every line start with `^[ \t]*` was five times slower over torch) and kept when only blanks precede it on
# its line (_statements).
_IMPORT_RE = re.compile(r"import[ \t]+([^\n#;]+)")
_FROM_RE = re.compile(r"from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]*(\([^)]*\)|(?:[^\n#;\\]|\\\n)+)")


def _statements(pattern: re.Pattern[str], source: str) -> Iterator[re.Match[str]]:
    """The matches of `pattern` that start a line's code (only blanks before them on their line)."""
    for m in pattern.finditer(source):
        start = m.start()
        line = source.rfind("\n", 0, start) + 1
        if line == start or not source[line:start].strip(" \t"):
            yield m


def imports(source: str, modname: str) -> list[str]:
    """Dotted names of the modules `source` imports (relative imports resolved
    against `modname`). Cheap: no libcst parse.

    A package's `__init__.py` may be passed as `pkg.__init__` so that `from .
    import x` resolves to `pkg.x`; `pkg` alone is taken as a module of its parent.
    `from a import b` gives both `a` and `a.b` (b may be a submodule); names
    that are not modules simply resolve to no file. A line in a string that
    looks like an import may add a name: harmless, it only widens the set.
    """
    if "import" not in source:
        return []
    package = _package_of(modname)
    found: dict[str, None] = {}
    for m in _statements(_IMPORT_RE, source):
        for part in m.group(1).replace("\\", " ").split(","):
            name = part.split(" as ")[0].strip()
            if name and all(p.isidentifier() for p in name.split(".")):
                found[name] = None
    for m in _statements(_FROM_RE, source):
        dots, names = m.group(1), m.group(3)
        base = _from_base(package, dots, m.group(2))
        if base is None:
            continue
        if base:
            found[base] = None
        body = "\n".join(line.split("#", 1)[0] for line in names.strip("()").splitlines())
        for part in body.replace("\\", " ").split(","):
            name = part.split(" as ")[0].strip().strip("()")
            if name and name != "*" and name.isidentifier():
                found[f"{base}.{name}" if base else name] = None
    return list(found)


def _package_of(modname: str) -> str:
    """The package a module's relative imports start from (a package's `__init__` is its own)."""
    return modname[: -len(".__init__")] if modname.endswith(".__init__") else modname.rpartition(".")[0]


def _from_base(package: str, dots: str, base: str) -> str | None:
    """The absolute module of `from <dots><base> import ...` in `package`; None where the dots climb
    beyond the top-level package (Python would refuse it too)."""
    if not dots:
        return base
    parts = package.split(".") if package else []
    up = len(dots) - 1
    if up and up >= len(parts):
        return None
    parts = parts[: len(parts) - up]
    if base:
        parts.append(base)
    return ".".join(parts)


def import_targets(source: str, modname: str) -> list[tuple[str, str]]:
    """(local name, dotted target) of every name `source` binds by an import, as
    `names.import_bindings` gives them after a parse (`from a import b as c` ->
    ("c", "a.b"); `import a.b as x` -> ("x", "a.b"); `import a.b` -> ("a", "a")).
    Cheap: no libcst parse. These targets are the only names the device model
    looks up in other files' summaries, so they decide which summaries can matter.
    A line in a string that looks like an import may add a pair: harmless, it
    only widens the set."""
    if "import" not in source:
        return []
    package = _package_of(modname)
    found: dict[tuple[str, str], None] = {}
    for m in _statements(_IMPORT_RE, source):
        for part in m.group(1).replace("\\", " ").split(","):
            name, _, alias = (x.strip() for x in part.partition(" as "))
            if not name or not all(p.isidentifier() for p in name.split(".")):
                continue
            if alias.isidentifier():
                found[(alias, name)] = None
            else:
                found[(name.split(".")[0], name.split(".")[0])] = None
    for m in _statements(_FROM_RE, source):
        dots, names = m.group(1), m.group(3)
        base = _from_base(package, dots, m.group(2))
        if not base:
            continue
        body = "\n".join(line.split("#", 1)[0] for line in names.strip("()").splitlines())
        for part in body.replace("\\", " ").split(","):
            name, _, alias = (x.strip().strip("()") for x in part.partition(" as "))
            if name and name != "*" and name.isidentifier():
                found[(alias if alias.isidentifier() else name, f"{base}.{name}")] = None
    return list(found)


def module_attribute_targets(source: str, keep: Callable[[str], bool] | None = None) -> list[str]:
    """`config.first` for `import config` and a use of `config.first` (`layer.to(config.first)`,
    `cfg.C.device`, `settings.Placement()`): the dotted targets of the names a file reads off
    modules it imports whole (`import pkg.config as cfg` -> `pkg.config.first` for `cfg.first`).
    Text only, like import_targets. `keep`: which imported modules to look at (the text is scanned
    once, for those only). The pipeline takes those of them that name a device where they are bound."""
    if "import" not in source:
        return []
    modules: dict[str, str] = {}  # the local name -> the module
    for m in _statements(_IMPORT_RE, source):
        for part in m.group(1).replace("\\", " ").split(","):
            name, _, alias = (x.strip() for x in part.partition(" as "))
            if not name or not all(p.isidentifier() for p in name.split(".")):
                continue
            if keep is None or keep(name):
                modules[alias if alias.isidentifier() else name] = name
    if not modules:
        return []
    locals_ = "|".join(re.escape(local) for local in sorted(modules, key=len, reverse=True))
    found: dict[str, None] = {}
    for use in re.finditer(rf"(?<![\w.])({locals_})\.(\w+)\b", source):
        found[f"{modules[use.group(1)]}.{use.group(2)}"] = None
    return list(found)


def constants_of(summary: dict[str, Any] | None) -> dict[str, Any]:
    """Of a summary, the device constants only (devices/summary.py): what an importer is summarised with."""
    from mpcheck.devices.summary import constants_of as of

    return of(summary)


def summarize(
    path: str,
    source: str,
    modname: str,
    gpus: tuple[int, ...] = (),
    parsed: cst.Module | None = None,
    project: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """A JSON-able summary of what other files may import from this one
    (classes and their placement, helper functions and what they return);
    with `gpus`, what of it changes under each of those GPU counts.
    None when the file does not parse. An exception of the device model
    propagates: it is a bug in mpcheck, which the pipeline reports (exit 2).
    `parsed`: the libcst tree to summarise, made already (`source` is not parsed then).
    `project`: summaries of other modules it reads (module name -> summary: `constants_of`'s)."""
    from mpcheck.devices.memo import forget_trees
    from mpcheck.devices.summary import summarize_module

    module = parsed if parsed is not None else parsing.parse_or_none(source)
    if module is None:
        return None
    try:
        return summarize_module(module, modname, gpus, project)
    finally:
        forget_trees()  # the tree is done with: keep none of it alive (devices/memo.py)


def analyze(
    path: str,
    source: str,
    codes: frozenset[str],
    modname: str,
    project: Mapping[str, dict[str, Any]],
    gpus: tuple[int, ...] = (),
    callers: Sequence[Mapping[str, Any]] = (),
    parsed: cst.Module | None = None,
    keeps_call: Callable[[str], bool] | None = None,
) -> FileResult:
    """Run the rules whose codes are in `codes` on one file. `project` maps
    dotted module names to their summaries. Never raises on bad input: a file
    that does not parse gives one MP000 finding. A rule that raises (a bug in
    mpcheck, not in the file) raises RuleCrash naming the file and the rule.

    `gpus`: the GPU counts to assume where the file asks torch.cuda.device_count().
    The file is interpreted with the count unknown; only when that interpretation
    asked the count, it is interpreted again under each count, and a finding of
    those runs is kept when the fewest GPUs the code allows give it (rules/gpucounts.py).

    `callers`: calls of this file's functions in other linted files, with their arguments
    (devices/callers.py): each function is also run with those, its facts naming the call.
    Their devices come from the callers, so every rule in `codes` runs, whatever words the
    file holds.

    `parsed`: the libcst tree of `source` when the caller parsed it already.

    `keeps_call`: which modules' calls are worth placing and returning (those of a module linted in the
    same run; the pipeline drops the others anyway). Placing a call costs a code generation of the whole
    file, which for torch's files went mostly to calls of `itertools` or `random`."""
    from mpcheck.rules import all_rules

    # `codes` went through the pipeline's pre-filter (lint/prefilter.py): the file's words in code (not in its
    # comments or prose), those of the constants, classes and functions it imports (a device defined in another
    # file), or all of them for a run with callers.
    rules = [r for r in all_rules() if r.code in codes]
    if not rules and SYNTAX_ERROR_CODE not in codes:
        return FileResult([])
    try:
        module = parsed if parsed is not None else parsing.parse(source)
    except Exception as e:  # noqa: BLE001  (ParserSyntaxError, and the parser's other failures: recursion, ...)
        return FileResult([parse_failure(path, source, e)])
    from mpcheck.devices.memo import forget_trees

    try:
        return _analyze_tree(path, source, module, rules, modname, project, gpus, callers, keeps_call)
    finally:
        forget_trees()  # the tree is done with: keep none of it alive (devices/memo.py)


def _analyze_tree(
    path: str,
    source: str,
    module: cst.Module,
    rules: list[Any],
    modname: str,
    project: Mapping[str, dict[str, Any]],
    gpus: tuple[int, ...],
    callers: Sequence[Mapping[str, Any]],
    keeps_call: Callable[[str], bool] | None = None,
) -> FileResult:
    from mpcheck.rules.context import FileContext
    from mpcheck.rules.gpucounts import counted_calls, for_count

    ctx = FileContext(path, source, module, modname, project, callers=for_count(callers, None))
    findings = _run_rules(ctx, rules)
    counted = [c for c in callers if "gpus" in c]  # contexts of a caller's runs under a count
    # (A rule that only compares counts, MP032, reads no model in the base run: the base model is built for it.)
    compares_counts = any(hasattr(r, "check_counts") for r in rules)
    by_count = bool(gpus and (ctx.model_built or compares_counts) and (ctx.model.asks_gpu_count or counted))
    # Under counts, every call takes part in deciding which runs are worth going on (counted_calls): all kept.
    calls = _outgoing_calls(ctx, None if by_count else keeps_call)
    if by_count:
        from mpcheck.rules.gpucounts import CountRun, merge, refused_by_callers, worth_going_on

        runs = []
        allowed: list[tuple[int, Any]] = []  # (count, its FileContext) for the rules that compare counts
        calls_by_count: dict[int, list[dict[str, Any]]] = {}
        for count in gpus:
            ctx_k = FileContext(
                path, source, module, modname, project, gpu_count=count, callers=for_count(callers, count)
            )
            refuted = ctx_k.model.count_refuted_at is not None
            if not ctx.model.asks_gpu_count and refused_by_callers(counted, count):
                refuted = True  # every caller that passes count-dependent devices refuses this count
            runs.append(CountRun(count, _run_rules(ctx_k, rules), refuted))
            if not refuted:
                allowed.append((count, ctx_k))
            calls_by_count[count] = _outgoing_calls(ctx_k)
            if (
                not worth_going_on(findings, runs)
                and not counted_calls(calls, calls_by_count, runs)
                and not _fewer_gpus_than_count(allowed)
            ):
                break  # the fewest allowed count gives nothing new: no finding can be kept
        else:
            findings = merge(findings, runs)
            calls += counted_calls(calls, calls_by_count, runs)
        findings += _across_counts(allowed, rules)
    findings.sort(key=Finding.sort_key)
    return FileResult(findings, ctx.used_modules, calls)


def _fewer_gpus_than_count(allowed: Sequence[tuple[int, Any]]) -> bool:
    """Whether the fewest allowed count, run alone so far, moved modules to GPUs, but to fewer than it has: a
    split the next count makes may have waited for more GPUs than it uses (MP032 compares the runs)."""
    if len(allowed) != 1:
        return False
    count, ctx = allowed[0]
    return 0 < len(ctx.model.placed_gpus) < count


def _across_counts(allowed: Sequence[tuple[int, Any]], rules: list[Any]) -> list[Finding]:
    """The findings of rules that compare the runs under assumed counts (a `check_counts` method)."""
    out: list[Finding] = []
    for rule_cls in rules:
        if hasattr(rule_cls, "check_counts"):
            try:
                out.extend(rule_cls().check_counts(allowed))
            except Exception as exc:  # as _run_rules: the file is reported as not checked
                raise RuleCrash(allowed[0][1].path, rule_cls.code, exc) from exc
    return out


def _outgoing_calls(ctx: Any, keeps_call: Callable[[str], bool] | None = None) -> list[dict[str, Any]]:
    """The calls the device model kept for other files (devices/callers.py), placed: line and text;
    with `keeps_call`, those of the modules it keeps only."""
    import libcst as cst

    if not ctx.model_built:
        return []
    out = []
    kept = [(n, c) for n, c in ctx.model.outgoing if keeps_call is None or keeps_call(c.get("module", ""))]
    ctx.place([node for node, _ in kept])
    for node, call in kept:
        text = ctx.code(node)
        if text.endswith("...") and isinstance(node, cst.Call):  # cut (FileContext.code): name it by its callee
            text = f"{ctx.code(node.func)}(...)"
        out.append({**call, "line": ctx.line(node), "code": text})
    return out


def _run_rules(ctx: Any, rules: list[Any]) -> list[Finding]:
    findings: list[Finding] = []
    for rule_cls in rules:
        try:
            findings.extend(rule_cls().check(ctx))
        except Exception as exc:  # never a silently missing finding: the file is reported as not checked
            raise RuleCrash(ctx.path, rule_cls.code, exc) from exc
    return findings
