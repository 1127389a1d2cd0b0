"""Assumed GPU counts across files: a class of another file whose devices come from
`torch.cuda.device_count()` is summarised once per assumed count (devices/summary.py,
`counts`), an importer takes the summary of its own count (devices/summarized.py), and
the calls it makes under a count reach the callee's run under that count only
(rules/gpucounts.py: counted_calls, for_count), through the real rules and CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_callers import lint

from mpcheck import analysis
from mpcheck.lint import callers

CASE = Path(__file__).parent / "fixtures" / "cases" / "F_helper_module_count_pkg_bad"
MODEL = (CASE / "model.py").read_text()
UTILS = (CASE / "utils.py").read_text()
MAIN = (CASE / "main.py").read_text()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "utils.py").write_text(UTILS)
    (tmp_path / "main.py").write_text(MAIN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def where(found: list[tuple[str, int, str, str]]) -> list[tuple[str, int, str]]:
    return [(p, line, code) for p, line, code, _ in found]


def test_a_class_is_summarised_per_assumed_count_where_its_devices_depend_on_it():
    summary = analysis.summarize("model.py", MODEL.replace("n >= 2", "n >= 4"), "model", (2, 4, 8))
    assert "attrs" not in summary["classes"]["ChainNet"]  # the count unknown: so are the devices
    assert summary["counts"]["2"]["classes"]["ChainNet"] == {"refused": True}  # its assert fails with 2
    four = summary["counts"]["4"]["classes"]["ChainNet"]
    assert four["attrs"]["devices"] == {"list": [{"device": f"cuda:{i}"} for i in range(4)]}
    assert four["out"] == ["cuda:3"]
    assert summary["counts"]["8"]["classes"]["ChainNet"]["out"] == ["cuda:7"]


def test_a_summary_without_a_count_question_has_no_counts():
    fixed = MODEL.replace("n = torch.cuda.device_count()", "n = 2")
    assert "counts" not in analysis.summarize("model.py", fixed, "model", (2, 4, 8))
    assert "counts" not in analysis.summarize("model.py", MODEL, "model")  # no counts assumed


def test_the_helper_reports_under_every_count_naming_the_call(project, capsys):
    found = lint(capsys, "--no-cache", ".")
    assert where(found) == [("utils.py", 10, "MP008")]
    message = found[0][3]
    assert message.startswith("With 2 GPUs (likewise with 4 or 8): `criterion` gets `logits` on cuda:1")
    assert "`labels` on cuda:0" in message and "main.py:12" in message


def test_the_helper_linted_alone_has_no_callers(project, capsys):
    assert lint(capsys, "--no-cache", "utils.py") == []


def test_the_device_the_logits_end_on_reports_nothing(project, capsys):
    (project / "main.py").write_text(MAIN.replace("model.devices[0]", "model.devices[-1]"))
    assert lint(capsys, "--no-cache", ".") == []


def test_a_mismatch_that_one_allowed_count_lacks_is_not_reported(project, capsys):
    # devices[1] is the last device with 2 GPUs: the labels meet the logits there.
    (project / "main.py").write_text(MAIN.replace("model.devices[0]", "model.devices[1]"))
    assert lint(capsys, "--no-cache", ".") == []


def test_the_class_files_bound_on_the_count_limits_the_counts_the_finding_needs(project, capsys):
    (project / "model.py").write_text(MODEL.replace("n >= 2", "n >= 4"))
    (project / "main.py").write_text(MAIN.replace("model.devices[0]", "model.devices[1]"))
    found = lint(capsys, "--no-cache", ".")
    assert where(found) == [("utils.py", 10, "MP008")]
    assert found[0][3].startswith("With 4 GPUs (the fewest the code allows; likewise with 8): ")


def test_the_importers_own_bound_combines_with_the_class_files(project, capsys):
    # The class allows 2 GPUs, the script does not: the finding needs 4 and 8 only.
    bounded = MAIN.replace(
        "    model = ChainNet()\n", "    assert torch.cuda.device_count() >= 4\n    model = ChainNet()\n"
    )
    (project / "main.py").write_text(bounded.replace("model.devices[0]", "model.devices[1]"))
    found = lint(capsys, "--no-cache", ".")
    assert where(found) == [("utils.py", 10, "MP008")]
    assert found[0][3].startswith("With 4 GPUs (the fewest the code allows; likewise with 8): ")


def test_editing_the_class_file_changes_the_cached_run(project, capsys):
    assert where(lint(capsys, ".")) == [("utils.py", 10, "MP008")]
    assert where(lint(capsys, ".")) == [("utils.py", 10, "MP008")]  # from the cache
    # The head now on the first device: the logits meet the labels there under every count.
    moved = MODEL.replace("to(self.devices[-1])", "to(self.devices[0])")
    (project / "model.py").write_text(moved.replace("self.head(x)", "self.head(x.to(self.devices[0]))"))
    assert lint(capsys, ".") == []
    (project / "model.py").write_text(MODEL)
    assert where(lint(capsys, ".")) == [("utils.py", 10, "MP008")]


def test_other_gpu_counts_give_other_summaries_and_findings(project, capsys):
    # With 1 GPU only, the class refuses the count: nothing is left to report.
    assert lint(capsys, "--no-cache", "--gpus", "1", ".") == []
    found = lint(capsys, "--no-cache", "--gpus", "4", ".")
    assert where(found) == [("utils.py", 10, "MP008")] and "cuda:3" in found[0][3]


def test_contexts_keep_the_count_of_the_run_that_made_the_call():
    call = {"module": "utils", "func": "f", "args": [{"device": ["cuda:3"]}], "kwargs": {}, "line": 3, "code": "f(x)"}
    made = [
        {**call, "gpus": 4, "allowed": [4, 8]},
        {**call, "args": [{"device": ["cuda:7"]}], "gpus": 8, "allowed": [4, 8]},
    ]
    got = callers.contexts([("main.py", made, lambda m: "/p/utils.py")], {"/p/utils.py"}, {"main.py": "/p/main.py"})
    assert [(c["gpus"], c["allowed"], c["args"]) for c in got["/p/utils.py"]] == [
        (4, [4, 8], [{"device": ["cuda:3"]}]),
        (8, [4, 8], [{"device": ["cuda:7"]}]),
    ]


def test_a_module_constant_built_from_the_count_is_known_under_each_count(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "devs.py").write_text(
        'import torch\n\nDEVICES = [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]\n'
    )
    main = (
        "import torch\nimport torch.nn as nn\n\nfrom devs import DEVICES\n\n\ndef main():\n"
        "    head = nn.Linear(4, 4).to(DEVICES[-1])\n    x = torch.randn(2, 4, device=DEVICES[{k}])\n    return head(x)\n"
    )
    (tmp_path / "main.py").write_text(main.format(k=0))
    monkeypatch.chdir(tmp_path)
    summary = analysis.summarize("devs.py", (tmp_path / "devs.py").read_text(), "devs", (2, 4, 8))
    assert "DEVICES" not in summary["constants"] and len(summary["counts"]["4"]["constants"]["DEVICES"]["list"]) == 4
    found = lint(capsys, "--no-cache", ".")
    assert where(found) == [("main.py", 10, "MP001")] and found[0][3].startswith("With 2 GPUs (likewise with 4 or 8)")
    (tmp_path / "main.py").write_text(main.format(k=-1))
    assert lint(capsys, "--no-cache", ".") == []


def test_imports_resolve_from_the_working_folder_below_another_project(tmp_path, monkeypatch, capsys):
    # A repository of scripts without packages, inside a folder whose pyproject.toml is another
    # project's: `from parallel.model import ChainNet` resolves from where mpcheck runs.
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'outer'\n")
    repo = tmp_path / "repo"
    for rel, text in {
        "parallel/model.py": MODEL,
        "training/utils.py": UTILS,
        "training/scripts/main.py": MAIN.replace("from model import", "from parallel.model import").replace(
            "from utils import", "from training.utils import"
        ),
    }.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    monkeypatch.chdir(repo)
    assert where(lint(capsys, "--no-cache", "--isolated", ".")) == [("training/utils.py", 10, "MP008")]


GPUS_AT_TOP = """import torch
import torch.nn as nn

GPUS = [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]


class Deep(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.first = nn.Linear(d, d).to(GPUS[0])
        self.head = nn.Linear(d, 10).to(GPUS[-1])

    def forward(self, x):
        return self.head(self.first(x.to(GPUS[0])).to(GPUS[-1]))
"""


def test_a_class_reading_a_module_level_list_built_from_the_count_is_summarised_per_count():
    summary = analysis.summarize("model.py", GPUS_AT_TOP, "model", (2, 4))
    assert summary["classes"]["Deep"]["split"] is None  # the count unknown: so are the devices
    assert summary["counts"]["2"]["classes"]["Deep"]["split"] == [["first", "cuda:0"], ["head", "cuda:1"]]
    assert summary["counts"]["4"]["classes"]["Deep"]["out"] == ["cuda:3"]
    # The list in a third file, imported by the class's module (lint/pipeline.py, constants_imported).
    config = GPUS_AT_TOP.split("\n\n\nclass")[0] + "\nLAST = GPUS[-1]\n"
    model = GPUS_AT_TOP.replace(GPUS_AT_TOP.split("\n\n\nclass")[0], "import torch.nn as nn\n\nfrom config import GPUS")
    constants = analysis.constants_of(analysis.summarize("config.py", config, "config", (2, 4)))
    assert constants["counts"]["2"]["constants"]["LAST"] == {"device": "cuda:1"}
    imported = analysis.summarize("model.py", model, "model", (2, 4), project={"config": constants})
    assert imported["counts"]["2"]["classes"]["Deep"] == summary["counts"]["2"]["classes"]["Deep"]
