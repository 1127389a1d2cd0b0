"""An imported module is summarised from the top-level statements its looked-up names
need (lint/slices.py): the summary of those names is the whole module's, the rest is
never parsed, and the cache re-checks an importer when the cut part changes what a
looked-up name is."""

from __future__ import annotations

import json
import textwrap

import pytest
from lint_fakes import write

from mpcheck import analysis, cli
from mpcheck.lint.slices import needed_source, summary_source

MODULE = textwrap.dedent(
    """\
    from __future__ import annotations
    import torch
    import torch.nn as nn
    from .base import *

    FIRST = "cuda:0"
    SECOND = torch.device("cuda", 1)
    UNUSED = "cuda:7"

    def unrelated():
        return torch.zeros(3).to(UNUSED)

    def place(layer, device=FIRST):
        return layer.to(device)

    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = place(nn.Linear(4, 4))

    @torch.no_grad()
    class Net(Half):
        def __init__(self):
            super().__init__()
            self.b = nn.Linear(4, 4).to(SECOND)

        def forward(self, x):
            return self.b(self.a(x).to(SECOND))

    class Other(nn.Module):
        pass

    def set_later():
        global LATE
        LATE = "cuda:3"
    """
)


def test_the_cut_keeps_what_the_name_needs_and_drops_the_rest():
    cut = needed_source(MODULE, ["Net"])
    assert cut is not None
    # Net, its base, the helper its base calls, the constants and imports they read, in order.
    for kept in (
        "class Net(Half)",
        "@torch.no_grad()",
        "class Half",
        "def place",
        "FIRST =",
        "SECOND =",
        "import torch\n",
    ):
        assert kept in cut, kept
    assert cut.index("FIRST =") < cut.index("def place") < cut.index("class Half") < cut.index("class Net")
    for dropped in ("UNUSED", "def unrelated", "class Other", "def set_later"):
        assert dropped not in cut, dropped
    # Always kept: a future import (grammar) and a star import (it may bind anything).
    assert "from __future__ import annotations" in cut and "from .base import *" in cut


def test_a_name_bound_by_global_in_a_function_keeps_that_function():
    cut = needed_source(MODULE, ["LATE"])
    assert cut is not None and "def set_later" in cut and "class Net" not in cut


def test_names_bound_in_blocks_by_targets_and_by_walrus_keep_their_statement():
    text = "if (W := 1):\n    pass\ntry:\n    import a.b\nexcept E as err:\n    pass\nfor i, (j, k) in x:\n    pass\nz = 2\n"
    for name, kept in [("W", "W := 1"), ("a", "import a.b"), ("err", "as err"), ("k", "for i")]:
        cut = needed_source(text, [name])
        assert cut is not None and kept in cut and "z = 2" not in cut, name


def test_a_name_bound_nowhere_keeps_only_what_is_always_kept():
    assert needed_source(MODULE, ["config"]) == "from __future__ import annotations\nfrom .base import *\n"


CLASS = textwrap.dedent(
    """\
    import torch.nn as nn

    def helper():
        return 1

    def only_for_report():
        return 2

    class Net(nn.Module):
        scale = 2

        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4).to("cuda:0")

        @property
        def width(self):
            return helper()

        def forward(self, x):
            return self.a(x) * self.width

        def report(self):
            self.calls = only_for_report()
            self.seen[0] += 1

        def move(self):
            self.to("cuda:1")

        def __len__(self):
            return 1
    """
)


def test_a_kept_class_keeps_the_methods_its_code_can_reach_and_stubs_the_others():
    cut = needed_source(CLASS, ["Net"])
    assert cut is not None
    # forward and __init__ always; `width` is read by forward; `move` moves the instance itself
    # (a whole-class fact); a dunder may run without its name written.
    for kept in ("def __init__", "def width", "def forward", 'self.to("cuda:1")', "def __len__", "scale = 2"):
        assert kept in cut, kept
    assert "def helper" in cut  # called by a kept method
    # `report` is reached by nothing: a stub assigning the same attributes, in its place.
    assert "    def report(self): self.calls = self.seen = None\n" in cut
    assert "only_for_report" not in cut
    assert cut.index("def forward") < cut.index("def report") < cut.index("def move")


def test_the_cut_warns_about_nothing_in_the_users_code():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert needed_source('import re\nPAT = re.compile("\\d+")\nOTHER = 1\n', ["PAT"]) is not None


def test_statements_sharing_a_line_come_out_once():
    assert needed_source("a = 1; b = 2\nc = 3\nd = a\n", ["d"]) == "a = 1; b = 2\nd = a\n"


def test_no_cut_when_it_cannot_help_or_cannot_be_made():
    assert needed_source("def (:\n", ["x"]) is None  # does not parse: summarised whole (and fails the same)
    assert needed_source("A = 1\nB = A\n", ["B"]) is None  # everything is needed
    # A default-device change in one function changes the summaries after it: never cut.
    text = MODULE + "\ndef setup():\n    torch.set_default_device('cuda:1')\n"
    assert summary_source(text, ["Net"]) == text


@pytest.mark.parametrize(
    "text, names",
    [(MODULE, ["Net"]), (MODULE, ["place", "FIRST"]), (MODULE, ["Half", "SECOND"]), (MODULE, ["LATE", "Other"])]
    + [(CLASS, ["Net"])],
)
def test_the_summary_of_the_cut_is_the_whole_modules_for_those_names(text, names):
    whole = analysis.summarize("m.py", text, "pkg.m")
    cut = analysis.summarize("m.py", summary_source(text, names), "pkg.m")
    assert whole is not None and cut is not None
    for name in names:
        for section in ("classes", "functions", "constants", "reexports"):
            assert cut[section].get(name) == whole[section].get(name), (name, section)
    if text is MODULE:
        assert whole["classes"]["Net"]["split"] == [["a", "cuda:0"], ["b", "cuda:1"]]  # a real summary


SPLIT = textwrap.dedent(
    """\
    import torch.nn as nn

    FIRST = "cuda:0"
    SECOND = "cuda:1"

    def noise():
        return 1

    class SplitNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4).to(FIRST)
            self.b = nn.Linear(4, 4).to(SECOND)
    """
)
TRAIN = "import torch.nn as nn\nfrom models import SplitNet\n\nnet = nn.DataParallel(SplitNet())\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[project]\nname='p'\n", "models.py": SPLIT, "train.py": TRAIN})
    monkeypatch.chdir(tmp_path)
    sources: list[str] = []
    summarize = analysis.summarize

    def recording_summarize(path, source, modname, gpus=(), project=None):
        sources.append(source)
        return summarize(path, source, modname, gpus, project=project)

    monkeypatch.setattr(analysis, "summarize", recording_summarize)
    return tmp_path, sources


def run(capsys, *files):
    cli.main(["--jobs", "1", "--select", "MP002", "--output-format", "json", *files])
    return [(d["path"], d["line"], d["code"]) for d in json.loads(capsys.readouterr().out)]


def test_only_the_needed_part_is_summarised_and_the_finding_stays(project, capsys):
    root, sources = project
    assert run(capsys, "train.py") == [("train.py", 4, "MP002")]
    assert len(sources) == 1 and "class SplitNet" in sources[0] and "def noise" not in sources[0]


def test_an_edit_to_the_cut_part_that_matters_is_seen(project, capsys):
    root, sources = project
    run(capsys, "train.py")
    # A later definition of the looked-up name, on one device: no split any more.
    (root / "models.py").write_text(
        SPLIT + "\nclass SplitNet(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.a = nn.Linear(4, 4)\n"
    )
    assert run(capsys, "train.py") == []
    # An edit to a part no looked-up name needs: the same result (the importer is re-checked).
    (root / "models.py").write_text(SPLIT.replace("return 1", "return 2"))
    assert run(capsys, "train.py") == [("train.py", 4, "MP002")]
    # An edit to a constant the class reads: both parts on one device, no finding.
    (root / "models.py").write_text(SPLIT.replace('SECOND = "cuda:1"', 'SECOND = "cuda:0"'))
    assert run(capsys, "train.py") == []


def test_the_stored_summary_grows_to_cover_every_importer(project, capsys):
    root, sources = project
    (root / "other.py").write_text(
        "import torch.nn as nn\nfrom models import noise, SplitNet\n\nnet = nn.DataParallel(SplitNet())\nprint(noise())\n"
    )  # (`noise` called: a name imported and never used, or used only as a type, is not looked up: lint/uses.py)
    run(capsys, "train.py")
    assert len(sources) == 1 and "def noise" not in sources[0]
    # other.py looks `noise` up too: the summary is made again for both names, then stored for both.
    assert run(capsys, "train.py", "other.py") == [("other.py", 4, "MP002"), ("train.py", 4, "MP002")]
    assert len(sources) == 2 and "def noise" in sources[1]
    (root / "train.py").write_text(TRAIN + "\n")  # re-checked: the stored summary covers its name
    assert run(capsys, "train.py") == [("train.py", 4, "MP002")]
    assert len(sources) == 2


def _corpus():
    from pathlib import Path

    here = Path(__file__).parent
    files = sorted((here / "fixtures").rglob("*.py")) + sorted((here.parent / "examples").rglob("*.py"))
    return [f for f in files if "cuda" in f.read_text(encoding="utf-8")]


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
def test_every_names_summary_from_its_cut_is_the_whole_modules(path):
    # The device model's whole test corpus: a summary reading more than the module-level
    # statements its name's code mentions (a new scan of the module) would show here.
    import ast

    text = path.read_text(encoding="utf-8")
    whole = analysis.summarize(str(path), text, "pkg.m")
    if whole is None:
        return
    top = [s for s in ast.parse(text).body if isinstance(s, (ast.ClassDef, ast.FunctionDef, ast.Assign))]
    names = {s.name for s in top if not isinstance(s, ast.Assign)} | {
        t.id for s in top if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)
    }
    for name in sorted(names):
        cut = analysis.summarize(str(path), summary_source(text, [name]), "pkg.m")
        assert cut is not None
        for section in ("classes", "functions", "constants", "reexports"):
            assert cut[section].get(name) == whole[section].get(name), (name, section)


def test_a_walrus_binds_the_module_name_only_outside_function_and_class_bodies():
    text = textwrap.dedent(
        """\
        def local():
            if (ctx := 1):
                return ctx

        class Holder:
            def get(self):
                return [y for x in [1] if (y := x)]

        def with_default(a=(ctx := 2)):
            return a

        ctx_user = ctx
        """
    )
    cut = needed_source(text, ["ctx_user"])
    # `ctx := 2` in a default runs at module level; the other two bind names of their own scopes.
    assert cut is not None and "def with_default" in cut and "def local" not in cut and "class Holder" not in cut


REACHED = textwrap.dedent(
    """\
    import torch.nn as nn

    class Net(nn.Module):
        def forward(self, x):
            return getattr(self, {spelled})(x)

        def encode(self, x):
            self.seen = x
            return x

        def report(self):
            self.calls = 1
    """
)


@pytest.mark.parametrize(
    "spelled",
    [
        '"encode"',
        '"\\x65ncode"',
        '"\\145ncode"',
        '"enc" "ode"',
        "'enc''ode'",
        '"enc" \\\n "ode"',
        '"\\N{LATIN SMALL LETTER E}ncode"',
    ],
)
def test_a_method_reached_by_a_string_is_kept_however_the_string_is_spelled(spelled):
    # The cut walks a node only when its text names something not reached yet; a string whose
    # value is not spelled as it reads (an escape, literals joined) is always walked.
    cut = needed_source(REACHED.format(spelled=spelled), ["Net"])
    assert cut is not None
    assert "return x" in cut  # encode kept whole
    assert "    def report(self): self.calls = None\n" in cut  # report reached by nothing: a stub


def test_a_word_only_in_a_comment_or_docstring_reaches_nothing():
    text = REACHED.format(spelled='"encode"').replace(
        "def forward(self, x):\n", 'def forward(self, x):\n        """Calls report."""  # report too\n'
    )
    cut = needed_source(text, ["Net"])
    assert cut is not None and "    def report(self): self.calls = None\n" in cut


@pytest.mark.parametrize(
    "call",
    ["self.to('cuda:1')", "(self).cuda(1)", "self . to ('cuda:1')", "self.\\\n            to_empty(device='cuda:1')"],
)
def test_a_method_that_moves_the_instance_is_kept_however_the_call_is_spelled(call):
    text = CLASS.replace('self.to("cuda:1")', call)
    cut = needed_source(text, ["Net"])
    assert cut is not None and call in cut


def test_a_method_that_only_says_self_and_to_is_not_taken_for_a_move():
    text = CLASS.replace('self.to("cuda:1")', 'print("self", "to")\n        self.moved = 1')
    cut = needed_source(text, ["Net"])
    assert cut is not None and "    def move(self): self.moved = None\n" in cut


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
def test_skipping_the_walk_of_nodes_that_name_nothing_new_changes_no_cut(path, monkeypatch):
    from mpcheck.lint import slices

    text = path.read_text(encoding="utf-8")
    names = _top_names(text)
    fast = [needed_source(text, [name]) for name in names]
    monkeypatch.setattr(slices._Cut, "_mentions", lambda self, node: slices._mentions(node))
    assert fast == [needed_source(text, [name]) for name in names]


def _top_names(text: str) -> list[str]:
    import ast

    try:
        body = ast.parse(text).body
    except SyntaxError:
        return []
    return sorted(
        {s.name for s in body if isinstance(s, (ast.ClassDef, ast.FunctionDef))}
        | {t.id for s in body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    )


def test_a_short_property_named_for_a_device_is_kept_for_the_summary_to_ask():
    text = textwrap.dedent(
        """\
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 2).to("cuda:1")
            @property
            def device(self):
                return next(self.parameters()).device
            @property
            def width(self):
                return 2
            def forward(self, x):
                return self.b(self.a(x).to("cuda:1"))
        """
    )
    cut = summary_source(text, ["Net"])
    assert "return next(self.parameters()).device" in cut
    assert "return 2" not in cut


def test_a_short_helper_or_a_class_that_moves_what_it_is_given_is_worth_summarising():
    from mpcheck.lint.modules import moves_by_argument

    text = textwrap.dedent(
        """\
        def move(batch, device):
            return [t.to(device) for t in batch]
        def width(n):
            return 2 * n
        class Runner:
            def __init__(self, model):
                self.model = model.cuda()
        class Plain:
            def __init__(self, n):
                self.n = n
        """
    )
    assert moves_by_argument(text, "move") and moves_by_argument(text, "Runner")
    assert not moves_by_argument(text, "width") and not moves_by_argument(text, "Plain")
    assert not moves_by_argument(text, "missing")


def test_a_class_summarised_for_its_arguments_acts_on_them_or_makes_tensors_on_their_device():
    from mpcheck.lint.modules import moves_by_argument

    text = textwrap.dedent(
        """\
        class Trainer:
            def __init__(self, model, lr=1e-3):
                self.device = next(model.parameters()).device
        class Buffer:
            def __init__(self, size, device="cuda"):
                self.data = torch.zeros(size, device=device)
        class Cache:
            def __init__(self):
                self.device = torch.device("cpu")
            def put(self, t):
                return t.to(self.device)
        """
    )
    assert moves_by_argument(text, "Trainer")
    # A device of its own: nothing its builder gives is acted on.
    assert not moves_by_argument(text, "Cache")
    # A device its builder names, given to a factory: its tensors are there, where a method meets its
    # callers' (a metric's running counts, `torch.zeros(n, n, device=device)`; session 44's blind round, t08).
    assert moves_by_argument(text, "Buffer")


# ----------------------------------------------------------------- the split without a parse
# _cut parses only the statements it reads: the text is split at its top-level statements first
# (slices._split), and a `def` or `class` is parsed only when the cut takes it. The cut must be
# the one a parse of the whole text gives.


def _both(text: str, names: list[str]) -> tuple[str | None, str | None]:
    from mpcheck.lint import slices

    split, whole = slices._cut(text, names), slices._cut(text, names, whole=True)
    return (split.source() if split else None), (whole.source() if whole else None)


SPLIT_CASES = {
    "decorated over lines, clauses, brackets and a backslash at column 0": """\
        import torch
        @decorate(
        "cuda:1")
        @other
        def placed():
            return torch.zeros(1).to("cuda:1")
        try:
            import apex
        except ImportError:
            apex = None
        else:
            pass
        finally:
            pass
        TABLE = [
        "cuda:0",
        ]
        TOTAL = 1 + \\
        2
        def user():
            return placed(), TABLE, TOTAL, apex
        """,
    "column-0 lines inside strings": '''\
        DOC = """
        def fake():
        class Fake:
        """
        def real():
            s = f"""
        x = {DOC}
        """
            return s
        ''',
    "a global set in a method, a walrus in a default and a decorator": """\
        class Holder:
            def set(self):
                global LATE
                LATE = "cuda:3"
        def with_default(a=(FIRST := "cuda:0")):
            return a
        @pick(SECOND := "cuda:1")
        def decorated():
            return SECOND
        def reader():
            return LATE, FIRST, SECOND
        """,
    "a walrus inside a body binds nothing here": """\
        def body_only():
            if (d := "cuda:1"):
                return d
        d = "cuda:0"
        def reader():
            return d
        """,
    "one-line definitions and statements sharing a line": """\
        def f(): return "cuda:1"
        class A: x = f(); y = 2
        a = 1; b = f()
        def reader(): return A, b
        """,
    "windows line ends": "import torch\r\nX = 'cuda:1'\r\ndef reader():\r\n    return X\r\n",
}


@pytest.mark.parametrize("text", SPLIT_CASES.values(), ids=SPLIT_CASES.keys())
def test_the_split_text_is_cut_as_the_whole_parse_cuts_it(text):
    import ast

    text = textwrap.dedent(text) if "\r" not in text else text
    for name in _top_names(text) + ["LATE", "FIRST", "SECOND"]:
        split, whole = _both(text, [name])
        assert split == whole, name
    assert ast.parse(text)  # the cases are Python


def test_a_definition_the_split_misread_falls_back_to_the_whole_parse():
    from mpcheck.lint import slices

    # A form feed indents nothing (a statement after it is top-level): such a text is not split.
    text = "def f():\n    return 1\n\fX = 'cuda:1'\ndef g():\n    return X\n"
    starts = [0]
    for line in slices._LINE.findall(text):
        starts.append(starts[-1] + len(line))
    assert slices._split(text, starts) is None
    assert _both(text, ["g"])[0] == _both(text, ["g"])[1] == "\fX = 'cuda:1'\ndef g():\n    return X\n"


def test_a_syntax_error_in_a_definition_the_cut_leaves_out_goes_unseen():
    # The whole text does not parse, but the names looked up are summarised from what does.
    text = "X = 'cuda:1'\ndef broken():\n    x = = 1\ndef reader():\n    return X\n"
    assert needed_source(text, ["reader"]) == "X = 'cuda:1'\ndef reader():\n    return X\n"
    assert needed_source(text, ["broken"]) is None  # taken: it does not parse, so nothing is cut


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
def test_the_split_cuts_every_corpus_file_as_the_whole_parse(path):
    text = path.read_text(encoding="utf-8")
    for name in _top_names(text):
        split, whole = _both(text, [name])
        assert split == whole, name


def test_a_banner_of_hashes_after_a_string_is_read_in_linear_time():
    # The gate of _Cut._mentions once let a comment end anywhere: `"a"` then a line of 60 `#`s took 2**60
    # steps to fail (torch's _functorch/compilers.py hung a cut). Run apart, so that a regression fails by
    # the timeout instead of hanging the suite.
    import subprocess
    import sys

    code = (
        "from mpcheck.lint.slices import needed_source\n"
        "text = 'X = \"cuda:1\"\\nY = 2\\ndef f():\\n    s = \"a\"\\n    ' + '#' * 60 + '\\n    return X\\n'\n"
        "print(needed_source(text, ['f']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.startswith('X = "cuda:1"\ndef f():')
