"""One lint run: read -> pre-filter -> cache -> imports -> summaries -> analyze -> noqa.

    files --read--> text (unreadable / not UTF-8: an MP000 finding, the run goes on)
          --file-level noqa, per-file-ignores, pre-filter--> the codes each file needs (on a big run,
                           worked out by this process and forked workers together: lint/forked.py)
          --cache--> stored results of unchanged files (and unchanged dependencies)
          --imports()--> the project modules the remaining files use (transitively)
          --summarize()--> their summaries (cached by content), each made from the statements
                           that the names looked up in it need (lint/slices.py)
          --analyze()--> findings, in worker processes when there is enough work; a linted file
                         that others import is summarised from the tree its lint parsed, in the
                         same task, once the summaries it uses are made (lint/schedule.py)
          --callers--> a file whose functions other files of the run call with known devices
                       is analysed again with those calls' arguments (lint/callers.py)
          --noqa--> what the user sees, sorted by path, line, column
          --fix.verified_fixes--> a finding keeps its fix only when the file, re-analysed
                                  with it applied, no longer has that finding and has no new one

libcst is imported only by summarize()/analyze(), so a run served entirely by
the cache never imports it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mpcheck.codes
from mpcheck import parsing, syntax
from mpcheck.config import Settings
from mpcheck.finding import Finding
from mpcheck.lint import callers, forked, modules, noqa, schedule, slices, uses
from mpcheck.lint.cache import ResultCache, content_hash, entry_key
from mpcheck.lint.files import SourceFile
from mpcheck.lint.parse_ahead import ParseAhead
from mpcheck.lint.prefilter import PreFilter
from mpcheck.lint.rulemeta import RuleMeta
from mpcheck.syntax import SYNTAX_ERROR_CODE, syntax_finding

# Below this much work, worker processes cost more than they save (fork,
# pickling, an unbalanced split). Measured on 2 cores with transformers files
# containing `cuda`, cold, serial vs 2 processes (whole command, start-up
# included): 8 files / 75k chars 0.38 s vs 0.40 s; 4 files / 143k chars 0.63 s
# vs 0.70 s; 16 files / 192k chars 0.83 s vs 0.59 s.
PARALLEL_MIN_CHARS = 150_000
PARALLEL_MIN_FILES = 6
# A single file this big is parsed in a forked process from the start (lint/parse_ahead.py).
PARSE_AHEAD_MIN_CHARS = 50_000
# The pre-filter's verdicts on this much text are shared out with forked workers (lint/forked.py).
PARALLEL_JUDGE_MIN_CHARS = 2_000_000


# _project_modules of a file: imported module -> path of the summaries it uses, the modules the choice read,
# path -> the names looked up there.
_Walked = tuple[dict[str, str], set[str], dict[str, set[str]]]


@dataclass
class LintOutcome:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # internal errors (mpcheck's bugs): exit code 2
    sources: dict[str, str] = field(default_factory=dict)  # display path -> text, for files with findings
    abspaths: dict[str, str] = field(default_factory=dict)  # display path -> absolute path


@dataclass
class _File:
    src: SourceFile
    text: str
    modname: str
    root: str
    is_init: bool
    codes: frozenset[str]
    digest: str = ""
    # Calls of its functions in other files of the run, with their arguments (lint/callers.py).
    callers: list[dict[str, Any]] = field(default_factory=list)
    # _project_modules of the file, when it was worked out with its pre-filter verdict (_judge).
    walked: _Walked | None = None

    def key(self, gpus: tuple[int, ...]) -> str:
        """Its cache key: content, module name, codes, GPU counts, and its callers' contexts."""
        key = entry_key(self.digest, self.modname, self.codes, gpus)
        return f"{key}|callers={callers.digest(self.callers)}" if self.callers else key


@dataclass
class _Read:
    """A file read for the run, with the pre-filter's verdict on it: `run_codes`, the codes that could fire
    (cached, or worked out by _judge: `judged`), `deps` the modules it borrows words from (prefilter.py)."""

    src: SourceFile
    codes: frozenset[str]
    signature: str
    stat: tuple[int, int] | None
    text: str
    digest: str  # of its bytes (lint/cache.py)
    run_codes: frozenset[str] | None = None
    judged: bool = False
    deps: list[list[Any]] = field(default_factory=list)
    walked: _Walked | None = None


def _decode(path: str, data: bytes) -> tuple[str | None, Finding | None]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        return None, syntax_finding(
            path, f"not UTF-8: byte 0x{data[exc.start]:02x} cannot be decoded ({exc.reason})", line, column
        )
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, None


# ----------------------------------------------------------------- workers
# Module-level functions so that worker processes can run them. Both return an
# exception as one message (with the traceback under MPCHECK_DEBUG) instead of
# raising it: a bug met on one file must not hide the other files' results, and
# a message crosses the process boundary where an exception may not pickle.


def _analyze_task(task: tuple[Any, ...], parsed: Any = None) -> tuple[Any, ...]:
    """`parsed`: the libcst tree of the task's text, when it was parsed already."""
    path, abspath, roots, text, codes, modname, project, gpus, contexts = task
    from mpcheck import analysis
    from mpcheck.lint.fix import verified_fixes

    # A call is handed on only to a module of the project that is not this file (lint/callers.py drops the
    # others): the rest are not even placed. The modules it names are dependencies of the result all the
    # same: one that appears later may be linted, and this result holds none of its calls.
    unresolved: set[str] = set()

    def keeps_call(module: str) -> bool:
        target = modules.resolve(module, roots) if module else None
        if target is None or target == abspath:
            unresolved.add(module)
            return False
        return True

    def findings_in(new_text: str) -> tuple[list[Finding], Any]:
        tree = parsed if new_text is text else None
        result = analysis.analyze(
            path, new_text, codes, modname, project, gpus, contexts, parsed=tree, keeps_call=keeps_call
        )
        found = [f for f in result.findings if f.code in codes or f.code == SYNTAX_ERROR_CODE]
        return noqa.filter_findings(new_text, found), result

    try:
        findings, result = findings_in(text)
        # A fix is offered only when it works: applied, its finding is gone and none is new.
        findings = verified_fixes(path, text, findings, lambda _, new_text: findings_in(new_text)[0])
        used = list(result.used_modules) + sorted(m for m in unresolved if m and m not in result.used_modules)
        return path, [f.to_dict() for f in findings], used, result.calls, None
    except analysis.RuleCrash as exc:  # its message names the file and the rule; the rule's exception is the cause
        return path, [], [], [], _describe(str(exc), exc.__cause__ or exc)
    except Exception as exc:
        return path, [], [], [], _describe(f"internal error while checking {path}: {_name(exc)}", exc)


def _summarize_task(task: tuple[Any, ...], whole: Any = None) -> tuple[Any, ...]:
    """`whole`: the libcst tree of the module's whole text, when it was parsed already."""
    abspath, text, modname, names, gpus, constants = task
    from mpcheck import analysis

    try:
        # The summaries of the device constants it imports (cut to those names), for its own.
        borrowed = {
            dep_mod: analysis.constants_of(
                analysis.summarize(dep, slices.summary_source(dep_text, dep_names), dep_mod, gpus)
            )
            for dep, dep_text, dep_mod, dep_names in constants
        }
        cut = slices.summary_tree(whole, text, names) if whole is not None else None
        if cut is not None:
            return abspath, analysis.summarize(abspath, text, modname, gpus, parsed=cut, project=borrowed), None
        source = slices.summary_source(text, names)
        return abspath, analysis.summarize(abspath, source, modname, gpus, project=borrowed), None
    except Exception as exc:
        where = os.path.relpath(abspath)
        return abspath, None, _describe(f"internal error while summarising {where}: {_name(exc)}", exc)


def _summarize_and_analyze_task(work: tuple[Any, ...]) -> tuple[Any, ...]:
    """(summary task or None, analysis task or None) -> (_summarize_task's result or None,
    _analyze_task's or None): a file linted and also imported is parsed once for both.

    The garbage collector is off while a task runs and collects once after it: during the task
    a collection could only rescan the file's tree, which is all alive (hundreds of thousands
    of objects); once the task is done, the tree has gone by reference counting and what the
    collection scans is the little the task left (torch's 2,285 files: 79 -> 72 CPU s)."""
    import gc

    gc.disable()
    try:
        return _one_task(work)
    finally:
        gc.enable()
        gc.collect(1)


def _one_task(work: tuple[Any, ...]) -> tuple[Any, ...]:
    summary, lint = work
    if lint is None:
        return _summarize_task(summary), None
    tree = parsing.parse_or_none(lint[3])  # a file that does not parse: each task fails its own way
    return (_summarize_task(summary, tree) if summary is not None else None), _analyze_task(lint, tree)


def _name(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _describe(head: str, origin: BaseException) -> str:
    """`head`, then where `origin` (the exception first raised) was raised: its last frame,
    or its whole traceback under MPCHECK_DEBUG."""
    if os.environ.get("MPCHECK_DEBUG"):
        import traceback

        return head + "\n" + "".join(traceback.format_exception(type(origin), origin, origin.__traceback__))
    tb = origin.__traceback__
    where = ""
    while tb is not None:
        where = f" (at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno})"
        tb = tb.tb_next
    return head + where


def available_cpus() -> int:
    """The cores this process may use (a container or `taskset` may allow fewer than the machine has)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _run_tasks(
    func: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    tasks: list[tuple[Any, ...]],
    sizes: list[int],
    jobs: int,
    beside: Callable[[], None] | None = None,
) -> list[tuple[Any, ...]]:
    """Run `func` over `tasks`, in worker processes when it pays; the order of results is not meaningful.
    `beside`: work for this process while the workers run (left undone when there are none)."""
    many = len(tasks) >= PARALLEL_MIN_FILES or beside is not None
    if jobs > 1 and tasks and many and sum(sizes) >= PARALLEL_MIN_CHARS:
        order = sorted(range(len(tasks)), key=lambda i: -sizes[i])  # biggest first: better balance
        try:
            return _pool_map(func, [tasks[i] for i in order], jobs, beside)
        except (OSError, ImportError, RuntimeError):
            pass  # no processes here (a sandbox, a frozen app): do the work in this one
    return [func(t) for t in tasks]


def _pool_map(
    func: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    tasks: list[tuple[Any, ...]],
    jobs: int,
    beside: Callable[[], None] | None = None,
) -> list[tuple[Any, ...]]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork: workers start in milliseconds and inherit what this process imported.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    ctx = multiprocessing.get_context(method)
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
        results = pool.map(func, tasks, chunksize=1)  # every task is submitted here
        if beside is not None:
            beside()
        return list(results)


# ----------------------------------------------------------------- the run


# A constant that names a device: a "cuda..." string (`"cuda:1"`, `f"cuda:{i}"`, `"cuda" if ... else "cpu"`),
# `torch.device(...)` or a placement (`Net().cuda()`); for a class or a function, one of its lines that
# places something on a named device (modules.top_bindings). Not any line with a rule's word:
# `HAS_CUDA = torch.cuda.is_available()` places nothing, and letting its importers through cost torch's
# 2,285 files a tenth more CPU for no finding.
_WORD = re.compile(r"[A-Za-z_]\w*")
_NAMES_A_DEVICE = re.compile(rf"""[\"']cuda|\bdevice\(|{modules.PLACING}""")


def _attribute_targets(
    text: str, modname: str, is_init: bool, roots: tuple[str, ...], inits: set[str] | None = None
) -> list[str]:
    """analysis.module_attribute_targets of a file, of modules of its own top-level package (any, for a
    file in no package: a script beside its config.py): `torch.float32` read in a package's file is no
    constant of that project. Not of a module that is a package's __init__ under `roots`: what a file
    reads off one is not taken (both callers skip it), so its uses are not even looked for (in torch,
    every `torch.` of every file); `inits` gets those modules' names (what the choice depended on)."""
    from mpcheck import analysis  # its import scan is text only: no libcst

    top = modname.split(".")[0] if is_init or "." in modname else None

    def keep(module: str) -> bool:
        if top is not None and module.split(".")[0] != top:
            return False
        path = modules.resolve(module, roots)
        if path is not None and modules.module_name(path)[2]:
            if inits is not None:
                inits.add(module)
            return False
        return True

    return analysis.module_attribute_targets(text, keep)


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class _Project:
    """Files by absolute path: read once, hashed once, whether linted or only imported."""

    def __init__(self, settings: Settings, prefilter: PreFilter, overrides: Mapping[str, str] | None = None):
        self.prefilter = prefilter
        self._text: dict[str, str | None] = {}
        self._hash: dict[str, str | None] = {}
        self._imports: dict[str, list[tuple[str, str]]] = {}
        self._worth: dict[str, bool] = {}
        self._sides: dict[tuple[str, str], list[str]] = {}  # _device_sides
        self._holds: dict[tuple[str, frozenset[str]], bool] = {}  # _holds_any
        self._attributes: dict[str, tuple[list[str], frozenset[str]]] = {}  # attribute_targets
        self._top: dict[str, modules.TopBindings | None] = {}  # module-level bindings of a module (borrowed)
        self._constants: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {}  # constants_imported
        for abspath, text in (overrides or {}).items():  # files as --diff would leave them
            self._text[abspath] = text
            self._hash[abspath] = content_hash(text.encode("utf-8"))
        self.gpus = settings.gpus  # the GPU counts assumed (results depend on them: part of the cache key)
        # Import roots besides a file's own (lint/modules.py): the project's, its src/, and the working folder.
        extra = (settings.project_root, settings.project_root / "src", Path.cwd())
        self.extra_roots = tuple(dict.fromkeys(str(p) for p in extra if p.is_dir()))

    def preload(self, abspath: str, text: str, digest: str) -> None:
        """A file's text as this run reads it (stdin, an override), and the digest of its bytes."""
        self._text[abspath] = text
        self._hash[abspath] = digest or None

    def roots_for(self, f_root: str) -> tuple[str, ...]:
        return (f_root,) + tuple(r for r in self.extra_roots if r != f_root)

    def text(self, abspath: str) -> str | None:
        if abspath not in self._text:
            try:
                with open(abspath, "rb") as fh:
                    data = fh.read()
                self._hash[abspath] = content_hash(data)
                self._text[abspath] = data.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                self._text[abspath] = None
        return self._text[abspath]

    def imports(self, abspath: str) -> list[tuple[str, str]]:
        """analysis.import_targets of a project module, scanned once however many files import it
        (linting torch's 592 files scanned the same modules 80,000 times)."""
        got = self._imports.get(abspath)
        if got is None:
            dep_mod, _, dep_init = modules.module_name(abspath)
            got = self.own_imports(abspath, self.text(abspath) or "", dep_mod, dep_init)
        return got

    def own_imports(self, abspath: str, text: str, modname: str, is_init: bool) -> list[tuple[str, str]]:
        """`imports` of a file whose text is at hand (a file of the run: asked by the pre-filter's borrowing and
        again for the modules its analysis needs, _project_modules)."""
        got = self._imports.get(abspath)
        if got is None:
            from mpcheck import analysis  # its import scan is text only: no libcst

            got = self._imports[abspath] = analysis.import_targets(text, modules.import_name(modname, is_init))
        return got

    def attribute_targets(
        self, abspath: str, text: str, modname: str, is_init: bool, roots: tuple[str, ...]
    ) -> tuple[list[str], frozenset[str]]:
        """_attribute_targets of a file of the run (with the package modules it skipped), scanned once."""
        got = self._attributes.get(abspath)
        if got is None:
            inits: set[str] = set()
            targets = _attribute_targets(text, modname, is_init, roots, inits)
            got = self._attributes[abspath] = (targets, frozenset(inits))
        return got

    def borrowed(self, src: SourceFile, text: str, wanted: frozenset[str]) -> tuple[str, list[list[Any]]]:
        """What the pre-filter reads besides a file's text: the right-hand sides of the module-level
        constants it imports by name from project modules (`from config import device0`, with
        `device0 = torch.device("cuda:0")` in config.py: its devices are defined there), the lines of
        the classes and functions it imports by name that place something on a named device, and every
        project module it imports names from, with its (mtime, size): a verdict that no rule can fire
        holds only while those are unchanged (ResultCache.known_irrelevant). Only a module whose text holds one
        of the `wanted` words (those of the rules not let through yet) is read for its lines: the lines are
        its text's, so the others could add none."""

        modname, root, is_init = modules.module_name(src.abspath)
        roots = self.roots_for(root)
        sides: list[str] = []
        deps: dict[str, tuple[int, int] | None] = {}
        targets = [t for _, t in self.own_imports(src.abspath, text, modname, is_init)]
        whole = set(self.attribute_targets(src.abspath, text, modname, is_init, roots)[0])  # `config.first` ...
        for target in [*targets, *sorted(whole)]:
            module, _, name = target.rpartition(".")  # `from module import name`
            path = modules.resolve(module, roots) if module else None
            if path is None or path == src.abspath or (target in whole and modules.module_name(path)[2]):
                continue
            if path not in deps:
                deps[path] = _stat(path)
            if self._holds_any(path, wanted):
                sides.extend(self._device_sides(path, name))
        return "\n".join(sides), [[path, *st] for path, st in deps.items() if st is not None]

    def _holds_any(self, abspath: str, words: frozenset[str]) -> bool:
        key = (abspath, words)
        got = self._holds.get(key)
        if got is None:
            text = self.text(abspath) or ""
            got = self._holds[key] = any(w in text for w in words)
        return got

    def _device_sides(self, abspath: str, name: str) -> list[str]:
        """The text of `name`'s top-level binding when it names a device, else that text with those of the
        module's constants it names that do (a class whose lines read `PLACEMENT.items()`, with
        `PLACEMENT = {"encoder": "cuda:0", ...}` in its module: modules.top_bindings); [] when neither does."""
        key = (abspath, name)
        got = self._sides.get(key)
        if got is None:
            side = self._binding(abspath, name)
            if side is None:
                got = []
            elif _NAMES_A_DEVICE.search(side) is not None:
                got = [side]
            else:
                words = sorted(set(_WORD.findall(side)) - {name})
                named = [self._binding(abspath, w) or "" for w in words if self.names_a_device(abspath, w)]
                got = [side, *named] if named else []
            self._sides[key] = got
        return got

    def constants_imported(self, abspath: str) -> dict[str, tuple[str, tuple[str, ...]]]:
        """The device constants of other project modules that the module at `abspath` imports by name
        (`from .placement import HEAD` in model.py, with `HEAD = torch.device("cuda:1")` in
        placement.py): their module's path -> (its module name, those names). The summary of
        model.py is made with them (a class placed on HEAD is split only where HEAD is known), for
        the file that imports the class: placement.py is a third file to it."""
        got = self._constants.get(abspath)
        if got is None:
            modname, root, is_init = modules.module_name(abspath)
            roots = self.roots_for(root)
            found: dict[str, tuple[str, set[str]]] = {}
            targets = [t for _, t in self.imports(abspath)]
            whole = _attribute_targets(self.text(abspath) or "", modname, is_init, roots)  # `import cfg` ... `cfg.HEAD`
            for target in [*targets, *whole]:
                module, _, name = target.rpartition(".")
                path = modules.resolve(module, roots) if module else None
                if path is None or path == abspath or not self.assigns(path, name):
                    continue  # (a constant, not a class: asked first, it is the cheaper question)
                if self.names_a_device(path, name, through=2):
                    found.setdefault(path, (module, set()))[1].add(name)
            got = self._constants[abspath] = {p: (m, tuple(sorted(n))) for p, (m, n) in sorted(found.items())}
        return got

    def names_a_device(self, abspath: str, name: str, through: int = 0) -> bool:
        """Does the module bind `name` at its top level by an assignment, or a class, whose text names a
        device? With `through`, also one whose text names such a name of the module, that many steps away
        (`LAST = GPUS[-1]` under `GPUS = [torch.device(f"cuda:{i}") for i in ...]`)."""
        side = self._binding(abspath, name)
        if side is None:
            return False
        if _NAMES_A_DEVICE.search(side) is not None:
            return True
        return through > 0 and any(
            self.names_a_device(abspath, word, through - 1) for word in set(_WORD.findall(side)) - {name}
        )

    def _binding(self, abspath: str, name: str) -> str | None:
        """modules.top_bindings(text of the module).get(name), read for that name only."""
        bindings = self._top_bindings(abspath)
        return bindings.get(name) if bindings is not None else None

    def assigns(self, abspath: str, name: str) -> bool:
        """Does a module that may name a device bind `name` at its top level by an assignment?"""
        bindings = self._top_bindings(abspath)
        return bindings is not None and bindings.assigns(name)

    def _top_bindings(self, abspath: str) -> modules.TopBindings | None:
        """The module's TopBindings; None for one that names no device anywhere."""
        if abspath not in self._top:
            text = self.text(abspath) or ""
            # Every _NAMES_A_DEVICE pattern holds one of these: a module without them names no device anywhere.
            names = "cuda" in text or "device(" in text or ".to(" in text
            self._top[abspath] = modules.TopBindings(text) if names else None
        return self._top[abspath]

    def worth_summarising(self, abspath: str) -> bool:
        """The pre-filter's verdict on an imported module's text, taken once per module."""
        got = self._worth.get(abspath)
        if got is None:
            got = self._worth[abspath] = self.prefilter.worth_summarising(self.text(abspath) or "")
        return got

    def digest(self, abspath: str | None) -> str | None:
        if abspath is None:
            return None
        if self._hash.get(abspath) is None:
            try:
                with open(abspath, "rb") as fh:
                    self._hash[abspath] = content_hash(fh.read())
            except OSError:
                self._hash[abspath] = None
        return self._hash[abspath]


def lint(
    files: Iterable[SourceFile],
    settings: Settings,
    rules: Mapping[str, RuleMeta],
    *,
    cache: ResultCache | None = None,
    jobs: int | None = None,
    stdin: tuple[SourceFile, bytes] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> LintOutcome:
    """`overrides` (absolute path -> text): lint those files, and import them, with
    this text instead of what is on disk (a fix checked before it is written)."""
    out = LintOutcome()
    jobs = jobs or available_cpus()
    overrides = overrides or {}
    prefilter = PreFilter(rules, settings.codes)
    project = _Project(settings, prefilter, overrides)
    candidates: list[_File] = []
    selected: dict[str, tuple[SourceFile, frozenset[str]]] = {}  # every file of the run: its codes (callers)

    inputs: list[tuple[SourceFile, bytes | None]] = [(f, None) for f in files]
    if stdin is not None:
        inputs.append(stdin)
    read: list[_Read] = []
    for src, data in inputs:
        out.abspaths[src.path] = src.abspath
        codes = settings.codes_for(src.relpath)
        if stdin is None or src is not stdin[0]:
            selected[src.abspath] = (src, codes)
        signature = prefilter.signature(codes)
        stat = None
        if src.abspath in overrides:
            data = overrides[src.abspath].encode("utf-8")
        if data is None:
            try:
                st = os.stat(src.abspath)
                stat = (st.st_mtime_ns, st.st_size)
            except OSError:
                pass
            # A file that had none of the rules' words when it was last seen, and
            # has not changed since (same mtime and size), is not even read (one named on the command
            # line is: its MP000 check below is not cached).
            if (
                cache is not None
                and stat is not None
                and not src.named
                and cache.known_irrelevant(src.abspath, stat, signature)
            ):
                continue
            try:
                with open(src.abspath, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                if SYNTAX_ERROR_CODE in codes:
                    out.findings.append(syntax_finding(src.path, f"cannot read: {exc.strerror or exc}"))
                continue
        text, bad = _decode(src.path, data)
        if text is None:
            if SYNTAX_ERROR_CODE in codes and bad is not None:
                out.findings.append(bad)
            continue
        known = cache.known_codes(src.abspath, stat, signature, codes) if cache and stat else None
        # Its digest, not its bytes: every file's bytes and text kept at once were 90 MB more over torch.
        read.append(_Read(src, codes, signature, stat, text, content_hash(data), known))
        if stdin is not None and src is stdin[0]:
            project.preload(src.abspath, text, read[-1].digest)  # what its importers read of it, in any process

    _judge(read, prefilter, project, jobs)
    for r in read:
        src, codes, stat, text, run_codes = r.src, r.codes, r.stat, r.text, r.run_codes
        assert run_codes is not None
        if r.judged and cache is not None and stat is not None:
            cache.mark_codes(src.abspath, stat, r.signature, r.deps, codes, run_codes)
        if not run_codes:
            if src.named and SYNTAX_ERROR_CODE in codes:
                # Named on the command line: a file that does not parse is reported even with no rule word in it
                # (Python's own compile, ~10x cheaper than libcst's parse; a walk over a tree skips this).
                whole = noqa.file_noqa(text)
                silenced = isinstance(whole, str) or (whole is not None and SYNTAX_ERROR_CODE in whole)  # str: ALL
                broken = None if silenced else syntax.compile_failure(src.path, text)
                if broken is not None:
                    out.findings.append(broken)
                    continue
            if cache is not None and stat is not None:
                cache.mark_irrelevant(src.abspath, stat, r.signature, r.deps)
            continue  # no rule could fire: never parsed
        whole = noqa.file_noqa(text)
        if isinstance(whole, str):  # ALL: every code suppressed
            continue
        if whole:
            run_codes -= whole
            if not run_codes:
                continue
        if SYNTAX_ERROR_CODE in codes and not (whole and SYNTAX_ERROR_CODE in whole):
            run_codes |= {SYNTAX_ERROR_CODE}
        modname, root, is_init = modules.module_name(src.abspath)
        f = _File(src, text, modname, root, is_init, run_codes, r.digest, walked=r.walked)
        project.preload(f.src.abspath, f.text, f.digest)
        candidates.append(f)
    read.clear()  # the texts of the files no rule runs on go now, not at the end of the run

    # Stored results of unchanged files whose dependencies did not change either.
    misses: list[_File] = []
    calls: dict[str, list[dict[str, Any]]] = {}  # display path -> the calls its analysis kept (lint/callers.py)
    for f in candidates:
        entry = _cached(f, project, cache)
        if entry is None:
            misses.append(f)
            continue
        _take(out, f, [Finding.from_dict({**d, "path": f.src.path}) for d in entry["findings"]])
        calls[f.src.path] = entry.get("calls", [])

    if misses:
        calls.update(_analyze_misses(misses, project, cache, jobs, out))
    _analyze_called(candidates, calls, selected, project, cache, jobs, out)
    if cache is not None:
        cache.save()

    out.findings.sort(key=Finding.sort_key)
    return out


def _judge(read: list[_Read], prefilter: PreFilter, project: _Project, jobs: int) -> None:
    """The pre-filter's verdict on each file of `read` that has none cached: the rules that could fire on it
    (its own words, then those it borrows from the project modules it imports names from); with many files,
    also the project modules a file let through needs (_project_modules), which read the same modules.
    Shared out with forked workers when there is enough of it (lint/forked.py)."""

    todo = [r for r in read if r.run_codes is None]
    sizes = [len(r.text) for r in todo]
    many = jobs > 1 and sum(sizes) >= PARALLEL_JUDGE_MIN_CHARS

    def verdict(i: int) -> tuple[frozenset[str], list[list[Any]], Any]:
        r = todo[i]
        run_codes = prefilter.codes_for(r.text, r.codes)
        deps: list[list[Any]] = []
        if run_codes != r.codes:
            # Devices may be defined in another file and imported by name (`from config import device0`):
            # their definitions count as this file's words. Also for a file that some rule's own words let
            # through already (`num_gpus` is MP015's word): the others may need the borrowed ones.
            borrowed, deps = project.borrowed(r.src, r.text, prefilter.words_of(r.codes - run_codes))
            if borrowed:
                run_codes = prefilter.codes_for(r.text + "\n" + borrowed, r.codes)
        walked = None
        if run_codes and many:  # worked out here, where the modules it reads are read already
            modname, root, is_init = modules.module_name(r.src.abspath)
            walked = _project_modules(_File(r.src, r.text, modname, root, is_init, run_codes), project)
        return run_codes, deps, walked

    for r, (run_codes, deps, walked) in zip(todo, forked.share_out(verdict, sizes, jobs if many else 1)):
        r.run_codes, r.deps, r.walked, r.judged = run_codes, deps, walked, True


def _cached(f: _File, project: _Project, cache: ResultCache | None) -> dict[str, Any] | None:
    """The stored result of `f`, when neither it nor a module it depends on changed."""
    if cache is None:
        return None
    roots = project.roots_for(f.root)

    def dep_hash(modname: str) -> str | None:
        return project.digest(modules.resolve(modname, roots))

    return cache.get(f.key(project.gpus), dep_hash)


def _take(out: LintOutcome, f: _File, findings: list[Finding]) -> None:
    out.findings.extend(findings)
    if findings:
        out.sources[f.src.path] = f.text


def _analyze_called(
    done: list[_File],
    calls: dict[str, list[dict[str, Any]]],
    selected: dict[str, tuple[SourceFile, frozenset[str]]],
    project: _Project,
    cache: ResultCache | None,
    jobs: int,
    out: LintOutcome,
) -> None:
    """Analyse again, with their callers' contexts, the files whose functions other files of the
    run call with known devices (lint/callers.py); their new results replace the first ones.
    The calls those context runs make in turn are contexts of the next level, up to
    mpcheck.codes.CALLER_DEPTH files from the call that made the devices known (lint/callers.py)."""
    if not any(calls.values()):
        return

    def resolver(f: _File) -> Callable[[str], str | None]:
        roots = project.roots_for(f.root)
        return lambda mod: modules.resolve(mod, roots) if mod else None

    own = {f.src.path: f.src.abspath for f in done}
    found: dict[str, dict[str, dict[str, Any]]] = {}
    grown = callers.add(
        found, ((f.src.path, calls[f.src.path], resolver(f)) for f in done if calls.get(f.src.path)), set(selected), own
    )
    for _ in range(mpcheck.codes.CALLER_DEPTH):
        if not grown:
            break
        deeper = _analyze_with_contexts(sorted(grown), callers.ordered(found), selected, project, cache, jobs, out)
        own.update({f.src.path: f.src.abspath for f, _ in deeper})
        grown = callers.add(found, ((f.src.path, c, resolver(f)) for f, c in deeper if c), set(selected), own)


def _analyze_with_contexts(
    paths: list[str],
    by_callee: dict[str, list[dict[str, Any]]],
    selected: dict[str, tuple[SourceFile, frozenset[str]]],
    project: _Project,
    cache: ResultCache | None,
    jobs: int,
    out: LintOutcome,
) -> list[tuple[_File, list[dict[str, Any]]]]:
    """Analyse the files at `paths` with their contexts; their results replace those in `out`.
    Returns each file with the calls its context runs made (those with a `chain`)."""
    again: list[_File] = []
    redone = LintOutcome()
    replaced: set[str] = set()  # display paths of the files analysed again
    made: list[tuple[_File, list[dict[str, Any]]]] = []
    for abspath in paths:
        contexts = by_callee[abspath]
        src, codes = selected[abspath]
        text = project.text(abspath)
        whole = noqa.file_noqa(text) if text is not None else "ALL"
        if text is None or isinstance(whole, str):
            continue
        codes = codes - (whole or frozenset())
        if not codes - {SYNTAX_ERROR_CODE}:
            continue
        modname, root, is_init = modules.module_name(abspath)
        f = _File(src, text, modname, root, is_init, codes, project.digest(abspath) or "", contexts)
        entry = _cached(f, project, cache)
        if entry is None:
            again.append(f)
        else:
            _take(redone, f, [Finding.from_dict({**d, "path": src.path}) for d in entry["findings"]])
            replaced.add(src.path)
            made.append((f, [c for c in entry.get("calls", []) if "chain" in c]))
    if again:
        got = _analyze_misses(again, project, cache, jobs, redone)
        replaced.update(got)
        made += [(f, [c for c in got[f.src.path] if "chain" in c]) for f in again if f.src.path in got]
    out.findings[:] = [x for x in out.findings if x.path not in replaced]
    out.findings.extend(redone.findings)
    out.sources.update(redone.sources)
    out.errors.extend(redone.errors)
    return made


def _project_modules(f: _File, project: _Project, alone: bool = False) -> _Walked:
    """(imported module name -> absolute path of every project module whose summary
    can matter to `f`, the names of every module the choice read, absolute path ->
    the names looked up in that module: all its summary has to cover).

    The device model looks a summary up for one thing only: a name `f` imports
    (`from pkg.model import Net` looks `Net` up in `pkg.model`'s summary), and, when
    that summary re-exports the name (`from .split import Net` in an __init__),
    the same look-up one module further. So the modules worth summarising are the
    ones on those chains, nothing else: the modules they import for their own use
    are never looked at (linting torch's `_inductor/ir.py` summarised 479 modules
    for the dozen its imports reach).

    A module on a chain is taken when its text passes the pre-filter (it may hold
    facts a rule needs), or when it is a package's __init__, which often names no
    device and only re-exports. The second result lists every module the choice
    depended on, taken or not, found or not: the cache drops `f`'s result when one
    of them changes (a module that gains `cuda`, one that appears).

    `alone`: `f` is the run's only file to analyse, so this choice is on the way to its result.
    Then names `f` imports only for annotations and type tests are left out (lint/uses.py): the
    same findings, and no wait for summaries nothing reads. (Over many files the `ast` parse it
    takes would cost more than it spares: their summaries are made once for all of them.)
    """
    roots = project.roots_for(f.root)
    found: dict[str, str] = {}
    consulted: set[str] = set()
    wanted: dict[str, set[str]] = {}
    imported = project.own_imports(f.src.abspath, f.text, f.modname, f.is_init)
    unread = uses.type_only_names(f.text, frozenset(local for local, _ in imported)) if alone else frozenset()
    todo = [target for local, target in imported if local not in unread]
    # Constants read off a project module imported whole (`import config` ... `config.first`, `config.C`):
    # taken where that module is a file of its own (not a package's __init__) that binds the name at its
    # top level by an assignment that names a device, or by a class (`project.borrowed` reads the
    # same), so that `torch.float32` after `import torch`, or `F.gelu` passed as a value, summarise nothing.
    targets, inits = project.attribute_targets(f.src.abspath, f.text, f.modname, f.is_init, roots)
    for target in targets:
        mod, _, name = target.rpartition(".")
        consulted.add(mod)
        path = modules.resolve(mod, roots)
        if path is None or path == f.src.abspath or modules.module_name(path)[2]:
            continue
        if project.names_a_device(path, name) and project.worth_summarising(path):
            found[mod] = path
            wanted.setdefault(path, set()).add(name)
    consulted |= inits
    seen: set[str] = set()
    while todo:
        target = todo.pop()
        if target in seen:
            continue
        seen.add(target)
        mod, _, name = target.rpartition(".")
        if not mod:
            continue
        consulted.add(mod)
        path = modules.resolve(mod, roots)
        if path is None or path == f.src.abspath:
            continue
        if project.text(path) is None:
            continue
        if not (
            modules.module_name(path)[2]
            or project.worth_summarising(path)
            or modules.moves_by_argument(project.text(path) or "", name)  # summary.py's _inlined
        ):
            continue
        found[mod] = path
        wanted.setdefault(path, set()).add(name)
        consulted.update(dep_mod for dep_mod, _ in project.constants_imported(path).values())
        # The name may be re-exported from further on: follow that import only.
        todo.extend(t for local, t in project.imports(path) if local == name)
    return found, consulted, wanted


def _analyze_misses(
    misses: list[_File],
    project: _Project,
    cache: ResultCache | None,
    jobs: int,
    out: LintOutcome,
) -> dict[str, list[dict[str, Any]]]:
    """Analyse `misses` into `out` (and the cache); the calls each file's analysis kept for
    other files (lint/callers.py), by display path, for the files analysed without error."""

    only = misses[0] if len(misses) == 1 else None
    ahead = None
    if only is not None and jobs > 1 and len(only.text) >= PARSE_AHEAD_MIN_CHARS:
        ahead = ParseAhead(only.text, _analyze_task)  # parses while this process chooses the summaries
    try:
        return _analyze_chosen(misses, project, cache, jobs, out, ahead)
    finally:
        if ahead is not None:
            ahead.close()


def _analyze_chosen(
    misses: list[_File],
    project: _Project,
    cache: ResultCache | None,
    jobs: int,
    out: LintOutcome,
    ahead: ParseAhead | None,
) -> dict[str, list[dict[str, Any]]]:
    alone = len(misses) == 1
    walked = {id(f): f.walked or _project_modules(f, project, alone) for f in misses}
    uses = {k: used for k, (used, _, _) in walked.items()}
    wanted: dict[str, set[str]] = {}
    for _, _, names_by_path in walked.values():
        for path, names in names_by_path.items():
            wanted.setdefault(path, set()).update(names)

    # Summaries of every module some file uses (of the names looked up in it: analysis.summarize
    # reads only the statements those need), from the cache when its text is unchanged and the
    # stored summary covers those names.
    summaries: dict[str, Any] = {}
    todo: list[tuple[Any, ...]] = []
    keys: dict[str, str] = {}
    for path in sorted(wanted):
        # A package's __init__ as `pkg.__init__`: its `from .split import Net` re-exports `pkg.split.Net`.
        modname = modules.import_name(*modules.module_name(path)[::2])
        key = f"{project.digest(path)}|{modname}|gpus={','.join(map(str, project.gpus))}"
        # The device constants it imports from other modules are part of what its summary says.
        constants = [
            (dep, project.text(dep) or "", dep_mod, names)
            for dep, (dep_mod, names) in project.constants_imported(path).items()
        ]
        if constants:
            key += "|constants=" + ",".join(f"{project.digest(dep)}:{'+'.join(n)}" for dep, _, _, n in constants)
        keys[path] = key
        names = wanted[path]
        hit, summary = cache.get_summary(key, names) if cache is not None else (False, None)
        if hit:
            summaries[path] = summary
        else:
            # Grown, not replaced: the names an earlier run needed stay covered for its files.
            names = names | (cache.summary_names(key) if cache is not None else set())
            todo.append((path, project.text(path), modname, sorted(names), project.gpus, constants))
    crashed: set[str] = set()  # modules whose summary raised: their users' results are incomplete
    covers = {t[0]: t[3] for t in todo}

    def summary_made(path: str, summary: Any, error: str | None) -> None:
        if error is not None:
            out.errors.append(error)
            crashed.add(path)
            return
        summaries[path] = summary
        if cache is not None:
            cache.put_summary(keys[path], summary, covers[path])

    def task(f: _File) -> tuple[Any, ...]:
        used = uses[id(f)]
        proj = {name: summaries[p] for name, p in used.items() if summaries.get(p) is not None}
        roots = project.roots_for(f.root)
        return (f.src.path, f.src.abspath, roots, f.text, f.codes, f.modname, proj, project.gpus, f.callers)

    by_path = {f.src.path: f for f in misses}
    calls: dict[str, list[dict[str, Any]]] = {}
    shared = {f.src.abspath for f in misses} & set(covers)
    results: list[tuple[Any, ...]] = []
    if shared and len(misses) > 1:
        # Linted files that others import: one parse for both (lint/schedule.py).
        specs = {t[0]: t for t in todo}
        lints = [
            schedule.Lint(
                f,
                {p for p in uses[id(f)].values() if p in specs},
                f.src.abspath if f.src.abspath in shared else None,
                len(f.text),
            )
            for f in misses
        ]
        plan = schedule.Schedule(
            [p for p in sorted(specs) if p not in shared], lints, {p: len(t[1]) for p, t in specs.items()}
        )

        def prepare(step: schedule.Step) -> tuple[Any, ...]:
            if step.summary is not None:
                return (specs[step.summary], None)
            assert step.lint is not None
            gives = step.lint.gives
            return (specs[gives] if gives else None, task(step.lint.key))

        def done(result: tuple[Any, ...]) -> list[str]:
            made, analysed = result
            if analysed is not None:
                results.append(analysed)
            if made is None:
                return []
            summary_made(*made)
            return [made[0]]

        big = (
            len(misses) + len(specs) >= PARALLEL_MIN_FILES
            and sum(len(t[1]) for t in specs.values()) + sum(len(f.text) for f in misses) >= PARALLEL_MIN_CHARS
        )
        schedule.run(plan, prepare, _summarize_and_analyze_task, done, jobs if big else 1)
    else:
        # One file to check (an editor's run, torch's _inductor/ir.py alone): its libcst parse, most of
        # its cost, needs no summary, so it runs beside the rest: in a process forked before the
        # summaries were chosen (lint/parse_ahead.py), else in this one while workers summarise.
        parsed: dict[str, Any] = {}
        only = misses[0] if len(misses) == 1 else None
        beside = None
        if only is not None and ahead is None:
            beside = lambda: parsed.update({only.src.path: parsing.parse_or_none(only.text)})  # noqa: E731
        for made in _run_tasks(_summarize_task, todo, [len(t[1]) for t in todo], jobs, beside):
            summary_made(*made)
        tasks = [task(f) for f in misses]
        if ahead is not None:
            results = [ahead.result(tasks[0])]
        elif parsed:
            results = [_analyze_task(tasks[0], parsed[tasks[0][0]])]
        else:
            results = _run_tasks(_analyze_task, tasks, [len(t[3]) for t in tasks], jobs)
    for path, finding_dicts, used_modules, made_calls, error in results:
        f = by_path[path]
        if error is not None:
            out.errors.append(error)
            continue  # nothing cached: the next run checks the file again and says so again
        calls[path] = made_calls
        _take(out, f, [Finding.from_dict(d) for d in finding_dicts])
        if cache is not None and not crashed.intersection(uses[id(f)].values()):
            roots = project.roots_for(f.root)
            # The modules whose summaries were used, and those that decided which were taken.
            names = set(used_modules) | walked[id(f)][1]
            deps = {m: project.digest(modules.resolve(m, roots)) for m in sorted(names)}
            stored = [{k: v for k, v in d.items() if k != "path"} for d in finding_dicts]
            cache.put(f.key(project.gpus), stored, deps, made_calls)
    return calls


class Relint:
    """Lint runs over edited texts held in memory (display path -> text): what a
    fresh run would find once the edits are written. `--fix` and `--diff` check
    each fix with `one` and report what `all` finds."""

    def __init__(
        self,
        files: Iterable[SourceFile],
        settings: Settings,
        rules: Mapping[str, RuleMeta],
        cache: ResultCache | None,
        jobs: int | None,
        stdin: tuple[SourceFile, bytes] | None,
        abspaths: Mapping[str, str],
    ):
        self.files = {f.path: f for f in files}
        self.settings, self.rules, self.cache, self.jobs = settings, rules, cache, jobs
        self.stdin = stdin
        self.abspaths = abspaths

    def _stdin(self, texts: Mapping[str, str]) -> tuple[SourceFile, bytes] | None:
        if self.stdin is None:
            return None
        src, data = self.stdin
        return (src, texts[src.path].encode("utf-8")) if src.path in texts else (src, data)

    def _overrides(self, texts: Mapping[str, str]) -> dict[str, str]:
        stdin_path = self.stdin[0].path if self.stdin else None
        return {self.abspaths.get(p, p): t for p, t in texts.items() if p != stdin_path}

    def one(self, path: str, text: str) -> list[Finding] | None:
        """What a fresh run finds in `path` holding `text`; None when that run failed.
        No cache: the intermediate texts of a fix are not worth storing."""
        texts = {path: text}
        is_stdin = self.stdin is not None and self.stdin[0].path == path
        if not is_stdin and path not in self.files:
            return None
        files = [] if is_stdin else [self.files[path]]
        stdin = self._stdin(texts) if is_stdin else None
        run = lint(files, self.settings, self.rules, cache=None, jobs=1, stdin=stdin, overrides=self._overrides(texts))
        if run.errors:
            return None
        return [f for f in run.findings if f.path == path]

    def all(self, texts: Mapping[str, str]) -> LintOutcome:
        """A fresh run over every file, the edited ones with their new text."""
        return lint(
            list(self.files.values()),
            self.settings,
            self.rules,
            cache=self.cache,
            jobs=self.jobs,
            stdin=self._stdin(texts),
            overrides=self._overrides(texts),
        )
