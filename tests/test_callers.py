"""Values across files: a helper of one linted file run with the devices another linted
file calls it with (devices/callers.py, lint/callers.py), through the real rules and CLI."""

from __future__ import annotations

import json
from pathlib import Path

import libcst as cst
import pytest

from mpcheck import analysis, cli
from mpcheck.devices import callers as devices_callers
from mpcheck.devices import torchapi as T
from mpcheck.devices.interp import Interp
from mpcheck.devices.values import Const, Obj
from mpcheck.lint import callers, modules

# The split model of the fixture case (its forward returns the logits on devices[1]).
MODEL = (Path(__file__).parent / "fixtures" / "cases" / "F_helper_module_train_pkg_bad" / "model.py").read_text()

UTILS = """import torch.nn.functional as F


def train_one_epoch(model, loader, device, optimizer):
    for inputs, targets in loader:
        inputs, targets = inputs.to(device), targets.to(device)
        outputs = model(inputs)
        loss = F.nll_loss(outputs.log_softmax(-1), targets)
        loss.backward()
"""

MAIN = """import torch

import utils
from model import ShardedMLP


def main(loader):
    devices = [torch.device("cuda:0"), torch.device("cuda:1")]
    model = ShardedMLP(devices)
    opt = torch.optim.Adam(model.parameters())
    utils.train_one_epoch(model, loader, {device}, opt)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "utils.py").write_text(UTILS)
    (tmp_path / "main.py").write_text(MAIN.format(device="devices[0]"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def lint(capsys: pytest.CaptureFixture[str], *args: str) -> list[tuple[str, int, str, str]]:
    cli.main(["--jobs", "1", "--output-format", "json", *args])
    out = json.loads(capsys.readouterr().out)
    return [(d["path"].replace("\\", "/"), d["line"], d["code"], d["message"]) for d in out]


def test_helper_in_another_file_reports_at_its_loss_line_naming_the_call(project, capsys):
    found = lint(capsys, "--no-cache", ".")
    assert [(p, line, code) for p, line, code, _ in found] == [("utils.py", 8, "MP008")]
    message = found[0][3]
    assert "cuda:1" in message and "cuda:0" in message
    assert "(when called by `utils.train_one_epoch(model, loader, devices[0], opt)` at main.py:11)" in message


def test_a_file_linted_alone_has_no_callers(project, capsys):
    assert lint(capsys, "--no-cache", "utils.py") == []
    assert lint(capsys, "--no-cache", "utils.py", "model.py") == []


def test_the_call_that_proves_nothing_reports_nothing(project, capsys):
    (project / "main.py").write_text(MAIN.format(device="devices[-1]"))
    assert lint(capsys, "--no-cache", ".") == []


def test_symbolic_devices_do_not_cross_files(project, capsys):
    # `devices` is main's parameter: its entries are told apart in main.py, but the names mean nothing in utils.py.
    (project / "main.py").write_text(
        MAIN.format(device="devices[0]").replace(
            'def main(loader):\n    devices = [torch.device("cuda:0"), torch.device("cuda:1")]\n',
            "def main(loader, devices):\n",
        )
    )
    assert lint(capsys, "--no-cache", ".") == []


def test_editing_the_caller_changes_the_callee_findings_on_a_cached_run(project, capsys):
    assert [f[:3] for f in lint(capsys, ".")] == [("utils.py", 8, "MP008")]
    assert [f[:3] for f in lint(capsys, ".")] == [("utils.py", 8, "MP008")]  # every file from the cache
    (project / "main.py").write_text(MAIN.format(device="devices[-1]"))
    assert lint(capsys, ".") == []  # utils.py unchanged, its caller's context changed
    (project / "main.py").write_text("\n" + MAIN.format(device="devices[0]"))
    found = lint(capsys, ".")
    assert [f[:3] for f in found] == [("utils.py", 8, "MP008")]
    assert "at main.py:12)" in found[0][3]  # the call moved down a line: the message follows it


def test_each_call_reports_what_it_proves_naming_itself(project, capsys):
    (project / "evaluate.py").write_text(
        "import torch.nn as nn\n\nimport utils\n\n\ndef main(loader, opt):\n"
        '    head = nn.Linear(256, 10).to("cuda:1")\n'
        '    utils.train_one_epoch(head, loader, "cuda:1", opt)\n'
    )
    found = lint(capsys, "--no-cache", ".")
    assert [f[:3] for f in found] == [("utils.py", 8, "MP008")]
    assert "at main.py:11)" in found[0][3] and "evaluate.py" not in found[0][3]


def test_a_callee_the_pre_filter_keeps_is_reported_once(project, capsys):
    # utils.py names `cuda` now: it is analysed on its own first (no finding), then with its caller.
    (project / "utils.py").write_text("# the batch goes to cuda\n" + UTILS)
    for _ in range(2):  # cold, then from the cache
        found = lint(capsys, ".")
        assert [f[:3] for f in found] == [("utils.py", 9, "MP008")]
        assert "at main.py:11)" in found[0][3]


def test_a_helper_imported_by_name_from_a_summarised_module(project, capsys):
    # `cuda` in utils.py makes it a summarised module: `train_one_epoch` is then its summary, not a bare name.
    (project / "utils.py").write_text("# the batch goes to cuda\n" + UTILS)
    main = MAIN.format(device="devices[0]").replace("import utils\n", "from utils import train_one_epoch\n")
    (project / "main.py").write_text(main.replace("utils.train_one_epoch(", "train_one_epoch("))
    found = lint(capsys, "--no-cache", ".")
    assert [f[:3] for f in found] == [("utils.py", 9, "MP008")]
    assert "(when called by `train_one_epoch(model, loader, devices[0], opt)` at main.py:11)" in found[0][3]


def _call(line: int, device: str, func: str = "fit") -> dict:
    return {"module": "helpers", "func": func, "args": [{"device": [device]}], "kwargs": {}, "line": line, "code": "c"}


def test_contexts_keep_each_distinct_call_once_naming_the_first():
    files = {"helpers": "/p/helpers.py"}
    calls = [
        ("b.py", [_call(3, "cuda:0")], files.get),
        ("a.py", [_call(9, "cuda:0"), _call(4, "cuda:1")], files.get),
    ]
    got = callers.contexts(calls, {"/p/helpers.py", "/p/a.py", "/p/b.py"}, {"a.py": "/p/a.py", "b.py": "/p/b.py"})
    vias = sorted((c["args"][0]["device"][0], c["via"]["path"], c["via"]["line"]) for c in got["/p/helpers.py"])
    assert vias == [("cuda:0", "a.py", 9), ("cuda:1", "a.py", 4)]


def test_contexts_only_for_other_files_of_the_run_and_at_most_a_few_per_function():
    files = {"helpers": "/p/helpers.py"}
    many = [_call(i, f"cuda:{i}") for i in range(callers.MAX_CONTEXTS + 3)] + [_call(99, "cuda:0", "other")]
    got = callers.contexts([("a.py", many, files.get)], {"/p/helpers.py"}, {"a.py": "/p/a.py"})
    funcs = [c["func"] for c in got["/p/helpers.py"]]
    assert funcs.count("fit") == callers.MAX_CONTEXTS and funcs.count("other") == 1
    assert callers.contexts([("a.py", many, files.get)], set(), {"a.py": "/p/a.py"}) == {}  # helpers.py not linted
    own = callers.contexts([("helpers.py", many, files.get)], {"/p/helpers.py"}, {"helpers.py": "/p/helpers.py"})
    assert own == {}  # a file's calls of its own functions are the same-file analysis's


def test_the_devices_a_model_of_another_file_keeps_are_read_at_the_call(project, capsys):
    # `model.devices[0]`: the list ShardedMLP's __init__ keeps, as main.py built it (summary attrs).
    (project / "main.py").write_text(MAIN.format(device="model.devices[0]"))
    found = lint(capsys, "--no-cache", ".")
    assert [f[:3] for f in found] == [("utils.py", 8, "MP008")]
    assert "`utils.train_one_epoch(model, loader, model.devices[0], opt)` at main.py:11)" in found[0][3]
    (project / "main.py").write_text(MAIN.format(device="model.devices[-1]"))
    assert lint(capsys, "--no-cache", ".") == []


def test_a_summary_keeps_only_device_attributes_no_other_method_assigns():
    source = (
        "import torch.nn as nn\n\n\nclass Net(nn.Module):\n"
        "    def __init__(self, devices, width=8):\n"
        '        super().__init__()\n        self.devices = devices\n        self.head = "cuda:1"\n'
        '        self.width = width\n        self.spare = ["cuda:0", "cuda:1"]\n\n'
        "    def reset(self):\n        self.spare = None\n"
    )
    attrs = analysis.summarize("m.py", source, "m")["classes"]["Net"]["attrs"]
    assert attrs == {"devices": {"param": "devices"}, "head": {"const": "cuda:1"}}


# A method of a class of another file: the instance rebuilt, in the callee, from the arguments the
# caller built it with (devices/callers.py, _callee).
TRAINER_CASE = Path(__file__).parent / "fixtures" / "cases" / "F_trainer_method_module_pkg_bad"


@pytest.fixture
def trainer_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    for name in ("model.py", "trainer.py", "main.py"):
        (tmp_path / name).write_text((TRAINER_CASE / name).read_text())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_method_of_another_files_class_runs_with_the_instances_arguments(trainer_project, capsys):
    found = lint(capsys, "--no-cache", ".")
    assert [f[:3] for f in found] == [("trainer.py", 16, "MP008")]
    assert "`self.criterion` gets `logits` on cuda:1" in found[0][3] and "`labels` on cuda:0" in found[0][3]
    assert "(when called by `trainer.train_epoch(...)` at main.py:11)" in found[0][3]
    assert lint(capsys, "--no-cache", "trainer.py") == []  # linted alone: no caller


def test_an_instance_changed_after_it_was_built_gives_its_methods_no_context(trainer_project, capsys):
    main = (trainer_project / "main.py").read_text()
    changed = main.replace("    trainer.train_epoch(", '    trainer.device = "cuda:1"\n    trainer.train_epoch(')
    (trainer_project / "main.py").write_text(changed)
    assert lint(capsys, "--no-cache", ".") == []


def test_a_loss_module_crosses_as_a_loss_and_alone_makes_no_context():
    interp = Interp(cst.parse_module(""))
    loss = Obj("loss", None, extra={T.CLASS_DIM: Const("CrossEntropyLoss")})
    enc = devices_callers.encode(interp, loss)
    assert enc == {"loss": {"class_dim": "CrossEntropyLoss", "weights": {}}}
    assert not devices_callers.known(enc)  # where nothing is: no call is worth running for it alone
    back = devices_callers.decode(enc, "criterion")
    assert isinstance(back, Obj) and back.kind == "loss"
    assert list(back.extra) == [T.CLASS_DIM] and back.extra[T.CLASS_DIM].value == "CrossEntropyLoss"
    weighted = Obj("loss", None, extra={"weight": Obj("tensor", frozenset({"cuda:1"}))})
    assert devices_callers.known(devices_callers.encode(interp, weighted))


def test_an_instance_moved_after_it_was_built_gives_its_methods_no_context(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        '        self.enc = nn.Linear(4, 4).to("cuda:0")\n\n    def encode(self, x):\n        return self.enc(x)\n'
    )
    call = '    return net.encode(torch.randn(2, 4, device="cuda:1"))\n'
    main = "import torch\n\nfrom model import Net\n\n\ndef main():\n    net = Net()\n{moved}" + call
    (tmp_path / "main.py").write_text(main.format(moved=""))
    monkeypatch.chdir(tmp_path)
    found = lint(capsys, "--no-cache", ".")
    assert [f[:3] for f in found] == [("model.py", 10, "MP001")] and "main.py:8" in found[0][3]
    (tmp_path / "main.py").write_text(main.format(moved='    net = net.to("cuda:1")\n'))
    assert lint(capsys, "--no-cache", ".") == []  # built on cuda:0, then moved whole: encode meets x there


def test_a_class_whose_methods_change_its_state_gives_them_no_context(trainer_project, capsys):
    trainer = (trainer_project / "trainer.py").read_text()
    setter = "    def use(self, device):\n        self.device = device\n\n    def train_epoch("
    (trainer_project / "trainer.py").write_text(trainer.replace("    def train_epoch(", setter))
    assert lint(capsys, "--no-cache", ".") == []  # main.py may have called use() first
    mover = (
        "    def place(self):\n        self.model.to(self.device)\n        self.to(self.device)\n\n    def train_epoch("
    )
    (trainer_project / "trainer.py").write_text(trainer.replace("    def train_epoch(", mover))
    assert lint(capsys, "--no-cache", ".") == []


def test_a_helper_module_that_appears_later_gets_the_calls_made_before(tmp_path, monkeypatch, capsys):
    # pkg/main.py calls `utils.train_one_epoch`, a module outside its package (so not among the modules
    # its own imports consult) that does not exist yet: its calls are not placed nor kept, but the cached
    # result depends on `utils`, so the run after utils.py appears analyses main.py again and hands it on.
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "model.py").write_text(MODEL)
    (tmp_path / "pkg" / "main.py").write_text(
        MAIN.format(device="devices[0]").replace("from model import", "from pkg.model import")
    )
    monkeypatch.chdir(tmp_path)
    assert lint(capsys, ".") == []
    (tmp_path / "utils.py").write_text(UTILS)
    modules.resolve_in.cache_clear()  # a new run is a new process: nothing remembers that utils.py was missing
    found = lint(capsys, ".")
    assert [(p, line, code) for p, line, code, _ in found] == [("utils.py", 8, "MP008")]
    assert "at pkg/main.py:11" in found[0][3]
    assert lint(capsys, "--no-cache", ".") == found


# A class of a file that names no device (an evaluator, a trainer), given the split model and the
# devices by its builder: its module is summarised (lint/modules.py, _acts_on_argument), so that
# its methods run with what the builder gave it.
SCORER_CASE = Path(__file__).parent / "fixtures" / "cases" / "F_scorer_given_its_devices_pkg_bad"


def test_a_class_that_keeps_what_it_is_given_and_uses_it_is_summarised():
    kept_and_called = "class T:\n    def __init__(self, model):\n        self.model = model\n\n    def step(self, x):\n        return self.model(x)\n"
    kept_and_moved_to = "class T:\n    def __init__(self, dev):\n        self.dev = dev\n\n    def step(self, y):\n        return y.to(self.dev)\n"
    kept_only = "class T:\n    def __init__(self, model):\n        self.model = model\n\n    def name(self):\n        return type(self.model)\n"
    not_given = "class T:\n    def __init__(self):\n        self.model = make()\n\n    def step(self, x):\n        return self.model(x)\n"
    assert modules.moves_by_argument(kept_and_called, "T") and modules.moves_by_argument(kept_and_moved_to, "T")
    assert not modules.moves_by_argument(kept_only, "T") and not modules.moves_by_argument(not_given, "T")


def test_a_trainer_of_a_file_that_names_no_device_runs_with_the_split_model_it_was_given(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "model.py").write_text((SCORER_CASE / "twotower.py").read_text())
    (tmp_path / "trainer.py").write_text(
        "import torch.nn.functional as F\n\n\nclass Trainer:\n    def __init__(self, model, opt):\n"
        "        self.model = model\n        self.opt = opt\n\n    def step(self, tokens, tags):\n"
        "        scores = self.model(tokens)\n        loss = F.cross_entropy(scores.flatten(0, 1), tags.flatten())\n"
        "        loss.backward()\n        self.opt.step()\n"
    )
    main = (
        "import torch\n\nfrom model import Tagger\nfrom trainer import Trainer\n\n\ndef main():\n    model = Tagger()\n"
        "    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1))\n"
        "    tokens, tags = torch.randint(0, 100, (4, 7)), torch.randint(0, 5, (4, 7))\n    trainer.step(tokens, {tags})\n"
    )
    (tmp_path / "main.py").write_text(main.format(tags="tags"))
    monkeypatch.chdir(tmp_path)
    found = lint(capsys, "--no-cache", ".")
    assert [f[:3] for f in found] == [("trainer.py", 11, "MP008")]
    assert "on cpu (as the caller passed it)" in found[0][3] and "main.py:11" in found[0][3]
    (tmp_path / "main.py").write_text(main.format(tags='tags.to("cuda:1")'))
    assert lint(capsys, "--no-cache", ".") == []
