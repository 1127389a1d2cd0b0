"""Caller contexts several files deep (devices/callers.py, lint/callers.py): a helper two files away
from the call that made the devices known runs with them and its finding names the whole chain;
an instance is followed into its methods only while the calling function leaves it as built
(devices/as_built.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import pytest

from mpcheck import codes
from mpcheck.devices.as_built import Uses
from tests.test_callers import lint

CASES = Path(__file__).parent / "fixtures" / "cases"
DEEP = CASES / "F_helper_two_files_deep_pkg_bad"
TRAINER = CASES / "F_trainer_method_module_pkg_bad"


def _copy(case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(case, tmp_path / "p")
    (tmp_path / "p" / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    monkeypatch.chdir(tmp_path / "p")
    return tmp_path / "p"


@pytest.fixture
def deep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return _copy(DEEP, tmp_path, monkeypatch)


def test_a_helper_two_files_away_reports_naming_the_chain_outermost_first(deep, capsys):
    found = lint(capsys, "--no-cache", ".")
    assert [f[:3] for f in found] == [("utils.py", 9, "MP008")]
    message = found[0][3]
    assert "`outputs` on cuda:1" in message and "`targets` on cuda:0" in message
    assert (
        "(when called through `engine.train(...)` at main.py:12 -> `utils.step(model, batch, device)` at engine.py:9)"
        in message
    )


def test_each_level_needs_its_files_in_the_run(deep, capsys):
    assert lint(capsys, "--no-cache", "engine.py", "utils.py", "model.py") == []  # no caller of engine.train
    assert lint(capsys, "--no-cache", "main.py", "utils.py", "model.py") == []  # engine.py not linted: not run


def test_an_unknown_device_at_the_middle_level_stays_unknown(deep, capsys):
    engine = (deep / "engine.py").read_text()
    # engine.py passes a device of its own making, unknown to the linter: utils.step learns nothing of it.
    (deep / "engine.py").write_text(
        engine.replace("utils.step(model, batch, device)", "utils.step(model, batch, pick())")
    )
    assert lint(capsys, "--no-cache", ".") == []


def test_editing_the_outermost_caller_changes_the_innermost_files_cached_result(deep, capsys):
    assert [f[:3] for f in lint(capsys, ".")] == [("utils.py", 9, "MP008")]
    assert [f[:3] for f in lint(capsys, ".")] == [("utils.py", 9, "MP008")]  # from the cache
    main = (deep / "main.py").read_text()
    (deep / "main.py").write_text(main.replace("devices[0], opt)", "devices[-1], opt)"))
    assert lint(capsys, ".") == []  # utils.py and engine.py unchanged: their contexts changed
    (deep / "main.py").write_text("\n" + main)
    found = lint(capsys, ".")
    assert [f[:3] for f in found] == [("utils.py", 9, "MP008")] and "at main.py:13 ->" in found[0][3]


def test_no_context_deeper_than_the_limit(deep, capsys, monkeypatch):
    # main -> engine -> utils -> steps -> losses: the loss line is 4 calls from main.py.
    (deep / "utils.py").write_text(
        "import steps\n\n\ndef step(model, batch, device):\n    return steps.inner(model, batch, device)\n"
    )
    (deep / "steps.py").write_text(
        "import losses\n\n\ndef inner(model, batch, device):\n    inputs, targets = batch\n"
        "    return losses.ce(model(inputs.to(device)), targets.to(device))\n"
    )
    (deep / "losses.py").write_text(
        "import torch.nn.functional as F\n\n\ndef ce(outputs, targets):\n    return F.cross_entropy(outputs, targets)\n"
    )
    assert codes.CALLER_DEPTH == 3
    assert lint(capsys, "--no-cache", ".") == []
    monkeypatch.setattr(codes, "CALLER_DEPTH", 4)  # the limit is what stops it
    assert [f[:3] for f in lint(capsys, "--no-cache", ".")] == [("losses.py", 5, "MP008")]
    monkeypatch.setattr(codes, "CALLER_DEPTH", 3)
    # One level shorter (main -> engine -> utils -> steps), the same loss is found in steps.py.
    (deep / "steps.py").write_text(
        "import torch.nn.functional as F\n\n\ndef inner(model, batch, device):\n    inputs, targets = batch\n"
        "    return F.cross_entropy(model(inputs.to(device)), targets.to(device))\n"
    )
    found = lint(capsys, "--no-cache", ".")
    assert [f[:3] for f in found] == [("steps.py", 6, "MP008")]
    assert (
        "main.py:12 -> `utils.step(model, batch, device)` at engine.py:9 -> `steps.inner(model, batch, device)` at utils.py:5"
        in (found[0][3])
    )


@pytest.fixture
def trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return _copy(TRAINER, tmp_path, monkeypatch)


@pytest.mark.parametrize(
    "between",
    [
        "configure(trainer)",  # a function of another file may set trainer.device
        "log(trainer)",  # or of this file: whatever it does, the trainer was passed
        "trainers = [trainer]",  # stored: changed through the list
        "model.to('cuda:0')",  # the model it holds, moved whole
        "model.stage2.to('cuda:0')",  # one of its stages moved
        "model.parallelize()",  # a method of the model that may place its parts anew
        "prepare(model)",  # the model passed to another function
    ],
)
def test_an_instance_or_its_model_that_may_have_changed_gives_no_context(trainer, capsys, between):
    main = (trainer / "main.py").read_text()
    main = main.replace(
        "from trainer import Trainer\n", "from setup import configure, prepare\nfrom trainer import Trainer\n"
    )
    main += "\n\ndef log(t):\n    print(t)\n"
    (trainer / "setup.py").write_text(
        'def configure(trainer):\n    trainer.device = "cuda:1"\n\n\ndef prepare(model):\n    model.to("cuda:0")\n'
    )
    (trainer / "main.py").write_text(main)
    assert [f[:3] for f in lint(capsys, "--no-cache", ".")] == [("trainer.py", 16, "MP008")]
    (trainer / "main.py").write_text(
        main.replace("    trainer.train_epoch(", f"    {between}\n    trainer.train_epoch(")
    )
    assert [f for f in lint(capsys, "--no-cache", ".") if f[0] == "trainer.py"] == []


def test_an_attribute_changed_after_the_call_in_a_loop_gives_no_context(trainer, capsys):
    main = (trainer / "main.py").read_text()
    looped = main.replace("    trainer.train_epoch(", "    for _ in range(2):\n        trainer.train_epoch(")
    (trainer / "main.py").write_text(looped.replace("lr=0.1))\n", 'lr=0.1))\n        trainer.device = "cuda:1"\n'))
    assert lint(capsys, "--no-cache", ".") == []


def test_reads_of_the_instance_and_of_its_model_keep_it_as_built(trainer, capsys):
    main = (trainer / "main.py").read_text()
    reads = "    print(trainer.device, model.stage1)\n    model.eval()\n    trainer.train_epoch("
    (trainer / "main.py").write_text(main.replace("    trainer.train_epoch(", reads))
    assert [f[:3] for f in lint(capsys, "--no-cache", ".")] == [("trainer.py", 16, "MP008")]


def _judge(source: str, name: str, strict: bool = False) -> bool:
    module = cst.parse_module(source)
    func = module.body[0]
    assert isinstance(func, cst.FunctionDef)
    return Uses(func).as_built(name, strict=strict)


def test_as_built_judges_each_use():
    assert _judge("def f():\n    t = T()\n    t.run()\n    x = t.device\n", "t")
    assert not _judge("def f(t):\n    t.run()\n", "t")  # a parameter: built, maybe changed, elsewhere
    assert not _judge("def f():\n    t = T()\n    g(t)\n", "t")
    assert _judge("def f():\n    t = T()\n    t.run()\n    return t\n", "t")  # nothing of f runs after it
    assert not _judge("def f():\n    t = T()\n    yield t\n    t.run()\n", "t")  # the consumer may change it
    assert not _judge("def f():\n    t = T()\n    u = t\n", "t")
    assert not _judge("def f():\n    t = T()\n    t.a.b = 1\n", "t")
    assert not _judge("def f():\n    t = T()\n    del t.a\n", "t")
    assert not _judge("def f():\n    t = T()\n    t.layers[0].cuda()\n", "t")
    assert _judge("def f():\n    m = M()\n    m(x)\n    m.parameters()\n", "m", strict=True)
    assert not _judge("def f():\n    m = M()\n    m.parallelize()\n", "m", strict=True)
    assert _judge(
        "def f():\n    m = M()\n    m.parallelize()\n", "m"
    )  # the receiver's own methods: judged in its class
