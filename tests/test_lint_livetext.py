"""The pre-filter reads a rule's words only where they count: in code and in strings that could be a
device or a name, not in comments or prose (mpcheck/lint/livetext.py)."""

from __future__ import annotations

import io
import re
import tokenize

import pytest

from mpcheck.lint.livetext import LiveText
from mpcheck.lint.prefilter import PreFilter

COUNTS = [
    "m = m.cuda()\n",
    "x = x.to('cuda:1')\n",
    'x = x.to("cuda")\n',
    "d = f'cuda:{i}'\n",
    'd = f"{x} on cuda"\n',  # an f-string's text may hold a field that is code: it always counts
    "os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n",
    "s = '''cuda'''\n",
    "if d.type == 'cuda':  # on the GPU\n    pass\n",
    "x = '# not a comment' + 'cuda'\n",
    "x = 'it''s' ; y = x.cuda()\n",
    "s = 'unterminated\ny = x.cuda()\n",  # text the lexer cannot read counts as code
    'x = "a \\" b" ; y = "cuda"\n',  # an escaped quote does not end the string
    "print('a b', end='') or x.cuda()\n",
    "x = b'raw bytes' ; devices = [0, 1]\n",
    "P = ast.literal_eval(\"{'embed': 'cuda:0', 'head': 'cuda:1'}\")\n",  # a Python literal's text: data
    "P = ast.literal_eval(\"('cuda:0', 'cuda:1')\")\n",
    'PLACEMENT = "encoder=cuda:0 crf=cuda:1"\n',  # settings on one line, split by the file: data
    "PLACEMENT = 'enc=cuda:0, dec=cuda:1'\n",
    'A, B = map(torch.device, "cuda:0 cuda:1".split())\n',  # a list of devices, split by the file: data
    "STAGES = 'cpu cuda:1'\n",
]

INERT = [
    "x = 1  # move it with .cuda() later\n",
    '"""Runs on cuda if there is one."""\n',
    "def f():\n    '''Put it on cuda:1\n    first.'''\n",
    "raise RuntimeError('expected a cuda tensor')\n",
    "help = r'the devices to use'\n",
    "s = 'a \\' cuda'\n",
    "# cuda\n# devices\n",
    "x = \"it's on cuda\"  # and 'cuda' here\n",
    'msg = "run with device=cuda when you can"\n',  # prose around a setting: not one line of settings
    'msg = "cuda or cpu"\n',  # words between the devices: prose
]


@pytest.mark.parametrize("source", COUNTS)
def test_words_in_code_or_device_like_strings_count(source):
    word = "CUDA_VISIBLE_DEVICES" if "CUDA_VISIBLE" in source else "devices" if "devices" in source else "cuda"
    assert LiveText(source).has(word)


@pytest.mark.parametrize("source", INERT)
def test_words_in_comments_and_prose_do_not(source):
    text = LiveText(source)
    assert not text.has("cuda") and not text.has("devices")


def test_a_later_occurrence_in_code_counts_after_inert_ones():
    source = "# cuda\n'''on cuda'''\nx = 'a cuda b'\ny = x.cuda()\n"
    assert LiveText(source).has("cuda")
    assert not LiveText(source[: source.index("y =")]).has("cuda")


def test_spans_agree_with_the_tokenizer():
    """Every span the lexer calls inert is, for Python's tokenizer, a comment or a non-f string with white
    space (bench/livetext_check.py runs the same check over installed packages)."""
    source = (
        'import torch\n"""Module doc: cuda."""\nx = f"{a[\'k\']} cuda"  # c: cuda\n'
        "y = rb'x y' + 'cuda:0'\ndef f():\n    '''doc\n    cuda\n    '''\n    return x.cuda()  # done\n"
    )
    spans = LiveText(source).inert_spans()
    lines = source.splitlines(keepends=True)
    offset = [0]
    for line in lines:
        offset.append(offset[-1] + len(line))
    truth = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        start, end = offset[tok.start[0] - 1] + tok.start[1], offset[tok.end[0] - 1] + tok.end[1]
        if tok.type == tokenize.COMMENT or (
            tok.type == tokenize.STRING and re.search(r"\s", tok.string) and not re.match(r"(?i)[rbu]*f", tok.string)
        ):
            truth.append((start, end))
    assert spans == truth


def test_prefilter_runs_no_rule_on_a_file_whose_words_are_all_prose():
    from mpcheck.lint import rulemeta

    rules = rulemeta.load(None)
    codes = frozenset(rules)
    pre = PreFilter(rules, codes)
    prose = '"""Moves the model to cuda."""\nx = 1  # devices\n'
    assert pre.codes_for(prose, codes) == frozenset()
    assert not pre.worth_summarising(prose)
    assert "MP001" in pre.codes_for(prose + "y = x.to('cuda:1')\n", codes)
    assert pre.worth_summarising(prose + "y = x.to('cuda:1')\n")


def test_the_lexer_agrees_with_the_tokenizer_on_torch_nn_and_cuda():
    """Real code: torch's own nn/ and cuda/ packages (the whole site-packages: bench/livetext_check.py)."""
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    try:
        from livetext_check import disagreements
    finally:
        sys.path.pop(0)
    root = Path(list(spec.submodule_search_locations)[0])
    files = [p for sub in ("nn", "cuda") for p in sorted((root / sub).rglob("*.py"))]
    sources = [p.read_text(encoding="utf-8") for p in files]
    assert sum("cuda" in s for s in sources) > 20
    assert [(str(p), d) for p, s in zip(files, sources) for d in disagreements(s)] == []
