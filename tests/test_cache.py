"""The result cache: hits, invalidation on edit, on config change, on a
dependency's edit; JSON on disk, atomic, beside the nearest pyproject.toml."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from lint_fakes import make_project, write

from mpcheck import cli
from mpcheck.lint import rulemeta

MODEL = "class Split(nn.Module):  # split\n    pass\n"


@pytest.fixture
def project(tmp_path, monkeypatch, fake_rules):
    return make_project(
        tmp_path,
        monkeypatch,
        {
            "pkg/model.py": MODEL + "net = Split().cuda()\n",
            "pkg/train.py": "from pkg.model import Split\ndp = DataParallel(Split())\n",
            "pkg/other.py": "y = z.cuda()\n",
        },
    )


def lint(capsys, calls, *args):
    calls["analyze"].clear()
    code = cli.main(["--jobs", "1", "--output-format", "json", *args])
    out = json.loads(capsys.readouterr().out)
    return (
        code,
        [(d["path"].replace("\\", "/"), d["line"], d["code"]) for d in out],
        sorted(p.replace("\\", "/") for p in calls["analyze"]),
    )


def test_second_run_comes_from_the_cache(project, capsys, fake_rules):
    code1, found1, analysed1 = lint(capsys, fake_rules)
    assert analysed1 == ["pkg/model.py", "pkg/other.py", "pkg/train.py"]
    code2, found2, analysed2 = lint(capsys, fake_rules)
    assert analysed2 == []
    assert (code2, found2) == (code1, found1)
    assert ("pkg/train.py", 2, "MP902") in found2
    folder = project / ".mpcheck_cache"
    stored = [p for p in folder.iterdir() if p.name.startswith("results-")]
    assert len(stored) == 1
    data = json.loads(stored[0].read_text())  # plain JSON, never pickle
    assert len(data["results"]) == 3
    assert not [p for p in folder.iterdir() if p.name.startswith(".mpcheck-tmp-")]


def test_edit_invalidates_that_file_only(project, capsys, fake_rules):
    lint(capsys, fake_rules)
    (project / "pkg/other.py").write_text("y = z.cuda()\nw = v.cuda()\n")
    _, found, analysed = lint(capsys, fake_rules)
    assert analysed == ["pkg/other.py"]
    assert ("pkg/other.py", 2, "MP901") in found


def test_config_change_invalidates(project, capsys, fake_rules):
    (project / "pkg/train.py").write_text("from pkg.model import Split\ndp = DataParallel(Split())\nx = y.cuda()\n")
    lint(capsys, fake_rules)
    # The key is the effective config per file: train.py loses MP901 and is re-analysed;
    # model.py and other.py are left with no rule at all and are not even parsed.
    _, found, analysed = lint(capsys, fake_rules, "--ignore", "MP901")
    assert analysed == ["pkg/train.py"]
    assert found == [("pkg/train.py", 2, "MP902")]
    (project / "pyproject.toml").write_text("[project]\nname = 'demo'\n[tool.mpcheck]\nignore = ['MP901']\n")
    _, found, analysed = lint(capsys, fake_rules)
    assert analysed == []  # same effective config as the run before: cached
    assert found == [("pkg/train.py", 2, "MP902")]
    _, found, analysed = lint(capsys, fake_rules, "--select", "MP901")
    assert analysed == ["pkg/model.py", "pkg/other.py", "pkg/train.py"]
    assert [f[2] for f in found] == ["MP901", "MP901", "MP901"]


def test_dependency_edit_invalidates_the_dependant(project, capsys, fake_rules):
    lint(capsys, fake_rules)
    # model.py no longer declares a split class: train.py's finding must go away.
    (project / "pkg/model.py").write_text(MODEL.replace("  # split", "") + "net = Split().cuda()\n")
    _, found, analysed = lint(capsys, fake_rules)
    assert analysed == ["pkg/model.py", "pkg/train.py"]  # not other.py
    assert not [f for f in found if f[2] == "MP902"]


def test_new_mpcheck_version_does_not_trust_the_old_cache(project, capsys, fake_rules, monkeypatch):
    lint(capsys, fake_rules)
    monkeypatch.setattr(rulemeta, "_FINGERPRINT", "test-fake-2")
    _, _, analysed = lint(capsys, fake_rules)
    assert len(analysed) == 3


def test_corrupt_cache_is_ignored_and_rewritten(project, capsys, fake_rules):
    _, found1, _ = lint(capsys, fake_rules)
    for p in (project / ".mpcheck_cache").glob("*.json"):
        p.write_text("{not json")
    code, found2, analysed = lint(capsys, fake_rules)
    assert code == 1 and found2 == found1 and len(analysed) == 3
    _, _, analysed = lint(capsys, fake_rules)
    assert analysed == []


def test_no_cache_writes_nothing(project, capsys, fake_rules):
    lint(capsys, fake_rules, "--no-cache")
    assert not (project / ".mpcheck_cache").exists()


def test_cache_beside_nearest_pyproject_else_cwd(tmp_path, monkeypatch, capsys, fake_rules):
    write(
        tmp_path,
        {"proj/pyproject.toml": "[project]\nname='p'\n", "proj/src/a.py": "x.cuda()\n", "loose/b.py": "x.cuda()\n"},
    )
    monkeypatch.chdir(tmp_path / "proj" / "src")
    lint(capsys, fake_rules, "a.py")
    assert (tmp_path / "proj" / ".mpcheck_cache").is_dir()
    assert not (tmp_path / "proj" / "src" / ".mpcheck_cache").exists()
    monkeypatch.chdir(tmp_path / "loose")
    lint(capsys, fake_rules, "b.py")
    assert (tmp_path / "loose" / ".mpcheck_cache").is_dir()


def test_cached_run_does_not_import_libcst(tmp_path):
    from mpcheck.rules import rules_by_code

    assert rules_by_code(), "no rule registered: nothing would be parsed and this test would prove nothing"
    write(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname='p'\n",
            "model.py": "import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.a = torch.nn.Linear(2, 2).to('cuda:0')\n",
            "train.py": "from model import Net\nnet = Net().cuda()\nm = torch.nn.DataParallel(net)\n",
        },
    )
    script = "import sys, mpcheck.cli\ncode = mpcheck.cli.main(['.'])\nprint('libcst' in sys.modules, code)\n"

    def run():
        return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)

    first = run()
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1].startswith("True")
    second = run()
    assert second.stdout.splitlines()[-1] == "False " + first.stdout.splitlines()[-1].split()[1], second.stderr


def test_file_without_rule_words_is_remembered_until_it_changes(project, capsys, fake_rules):
    write(project, {"pkg/plain.py": "x = 1\n"})
    lint(capsys, fake_rules)
    stored = json.loads(next((project / ".mpcheck_cache").glob("results-*.json")).read_text())
    assert str(project / "pkg" / "plain.py") in stored["irrelevant"]
    assert str(project / "pkg" / "model.py") not in stored["irrelevant"]
    # An edit changes size and mtime: the file is read, pre-filtered and analysed again.
    (project / "pkg/plain.py").write_text("x = y.cuda()\n")
    _, found, analysed = lint(capsys, fake_rules)
    assert analysed == ["pkg/plain.py"] and ("pkg/plain.py", 1, "MP901") in found
    # Another selection has other words: the remembered verdict does not apply.
    (project / "pkg/plain2.py").write_text("m = model.half()\n")
    lint(capsys, fake_rules, "--select", "MP901")
    _, found, analysed = lint(capsys, fake_rules)
    assert ("pkg/plain2.py", 1, "MP903") in found


def test_real_rules_dependant_invalidated_across_files(tmp_path):
    """With the real rules: train.py's MP002 depends on model.py's class; editing model.py
    so that the class is no longer split must drop the (cached) finding."""
    from mpcheck.rules import rules_by_code

    assert "MP002" in rules_by_code()
    model = (
        "import torch.nn as nn\n\n\nclass SplitNet(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.a = nn.Linear(4, 4).to('cuda:0')\n        self.b = nn.Linear(4, 4).to('cuda:1')\n"
    )
    write(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname='p'\n",
            "model.py": model,
            "train.py": "import torch.nn as nn\nfrom model import SplitNet\n\nnet = nn.DataParallel(SplitNet())\n",
        },
    )

    def run():
        return subprocess.run(
            [sys.executable, "-m", "mpcheck", "--select", "MP002", "."],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    first = run()
    assert first.returncode == 1 and first.stdout.startswith("train.py:4:"), first.stdout + first.stderr
    assert run().stdout == first.stdout  # from the cache
    (tmp_path / "model.py").write_text(model.replace("cuda:1", "cuda:0"))
    third = run()
    assert (third.returncode, third.stdout) == (0, "All checks passed (2 files).\n"), third.stdout + third.stderr


def test_placements_imported_by_name_reach_a_file_without_rule_words_and_its_cached_verdict(tmp_path):
    """With the real rules: model.py names no GPU itself and imports its placements from config.py. It is
    linted for config.py's constants; while config.py placed nothing on a GPU, the cache remembered model.py
    as a file no rule can fire on, and editing config.py alone must undo that verdict."""
    model = (
        "import torch.nn as nn\n\nfrom config import first, second\n\n\nclass Net(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.a = nn.Linear(4, 4).to(first)\n"
        "        self.b = nn.Linear(4, 4).to(second)\n\n    def forward(self, x):\n        return self.b(self.a(x))\n"
    )
    write(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname='p'\n",
            "config.py": 'first = "cpu"\nsecond = "cpu"\n',
            "model.py": model,
        },
    )

    def run():
        return subprocess.run(
            [sys.executable, "-m", "mpcheck", "."], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    first = run()
    assert (first.returncode, first.stdout) == (0, "All checks passed (2 files).\n"), first.stdout + first.stderr
    stored = json.loads(next((tmp_path / ".mpcheck_cache").glob("results-*.json")).read_text())
    assert str(tmp_path / "model.py") in stored["irrelevant"]
    (tmp_path / "config.py").write_text('import torch\n\nfirst = torch.device("cuda:0")\nsecond = "cuda:1"\n')
    second = run()
    assert second.returncode == 1 and second.stdout.startswith("model.py:13:"), second.stdout + second.stderr
    assert run().stdout == second.stdout  # from the cache


def test_placements_read_off_a_module_imported_whole_reach_a_file_without_rule_words_and_its_cached_verdict(
    tmp_path,
):
    """As above, with config.py imported whole (`import config`, `config.first`) and a settings class
    (`from settings import S`, `S.second`): while config.py and settings.py place nothing on a GPU,
    model.py is remembered as a file no rule can fire on; editing them alone must undo that verdict."""
    model = (
        "import torch.nn as nn\n\nimport config\nfrom settings import S\n\n\nclass Net(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.a = nn.Linear(4, 4).to(config.first)\n"
        "        self.b = nn.Linear(4, 4).to(S.second)\n\n    def forward(self, x):\n        return self.b(self.a(x))\n"
    )
    write(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname='p'\n",
            "config.py": 'first = "cpu"\n',
            "settings.py": 'class S:\n    second = "cpu"\n',
            "model.py": model,
        },
    )

    def run():
        return subprocess.run(
            [sys.executable, "-m", "mpcheck", "."], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    first = run()
    assert (first.returncode, first.stdout) == (0, "All checks passed (3 files).\n"), first.stdout + first.stderr
    stored = json.loads(next((tmp_path / ".mpcheck_cache").glob("results-*.json")).read_text())
    deps = {dep for dep, *_ in stored["irrelevant"][str(tmp_path / "model.py")][3]}
    assert deps == {str(tmp_path / "config.py"), str(tmp_path / "settings.py")}
    (tmp_path / "settings.py").write_text('class S:\n    second = "cuda:1"\n')
    second = run()
    assert (second.returncode, second.stdout) == (0, "All checks passed (3 files).\n"), second.stdout + second.stderr
    (tmp_path / "config.py").write_text('import torch\n\nfirst = torch.device("cuda:0")\n')
    third = run()
    assert third.returncode == 1 and third.stdout.startswith("model.py:14:"), third.stdout + third.stderr
    assert run().stdout == third.stdout  # from the cache


@pytest.mark.parametrize(
    ("model", "train"),
    [
        (  # a class that places its parts, imported by name
            "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.a = nn.Linear(4, 4).to('cuda:0')\n        self.b = nn.Linear(4, 4).cuda(1)\n\n"
            "    def forward(self, x):\n        return self.b(self.a(x.to('cuda:0')).to('cuda:1'))\n",
            "import torch\n\nfrom model import Net\n\ny = Net()(torch.randn(2, 4))\nloss = (y - torch.randn(2, 4)).sum()\n",
        ),
        (  # a function that returns a tensor on a named GPU, imported by name
            "import torch\n\n\ndef features(n):\n    # on the second GPU\n    return torch.zeros(n, 4, device='cuda:1')\n",
            "import torch\n\nfrom model import features\n\nloss = (features(2) - torch.randn(2, 4)).sum()\n",
        ),
        (  # a function that returns a model it placed, read off the module imported whole
            "import torch.nn as nn\n\n\ndef build():\n    return nn.Linear(4, 4).to('cuda:1')\n",
            "import torch\n\nimport model as m\n\nnet = m.build()\nout = net(torch.randn(2, 4))\n",
        ),
    ],
    ids=["class", "function", "module-attribute"],
)
def test_devices_of_an_imported_class_or_function_reach_a_file_without_rule_words(tmp_path, model, train):
    """train.py names no device: its devices come from what it imports by name. Its verdict follows model.py:
    once model.py places nothing on a GPU (a comment or a docstring saying `cuda` does not count), train.py
    is a file no rule can fire on again, from the cache too."""
    write(tmp_path, {"pyproject.toml": "[project]\nname='p'\n", "model.py": model, "train.py": train})

    def run():
        return subprocess.run(
            [sys.executable, "-m", "mpcheck", "."], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    first = run()
    assert first.returncode == 1 and first.stdout.startswith("train.py:"), first.stdout + first.stderr
    assert "MP001" in first.stdout and "cuda:1" in first.stdout
    assert run().stdout == first.stdout  # from the cache
    cpu_only = model.replace("'cuda:0'", "'cpu'").replace(".cuda(1)", ".cpu()  # .cuda(1) later")
    (tmp_path / "model.py").write_text(cpu_only.replace("'cuda:1'", "'cpu'"))
    second = run()
    assert (second.returncode, second.stdout) == (0, "All checks passed (2 files).\n"), second.stdout + second.stderr
    stored = json.loads(next((tmp_path / ".mpcheck_cache").glob("results-*.json")).read_text())
    assert str(tmp_path / "train.py") in stored["irrelevant"]


def test_a_relevant_files_prefilter_verdict_is_kept_while_it_and_its_deps_are_unchanged(tmp_path):
    from mpcheck.lint.cache import ResultCache

    dep = tmp_path / "config.py"
    dep.write_text("first = 'cuda:1'\n")
    st = dep.stat()
    train = str(tmp_path / "train.py")
    (tmp_path / "train.py").write_text("x = 1\n")
    cache = ResultCache(tmp_path / "c", "fp")
    codes = frozenset({"MP001", "MP005"})
    deps = [[str(dep), st.st_mtime_ns, st.st_size]]
    cache.mark_codes(train, (1, 2), "sig", deps, codes, frozenset({"MP001"}))
    cache.save()
    again = ResultCache(tmp_path / "c", "fp")
    assert again.known_codes(train, (1, 2), "sig", codes) == {"MP001"}
    assert again.known_codes(train, (1, 3), "sig", codes) is None  # the file changed
    assert again.known_codes(train, (1, 2), "other", codes) is None  # other rule words
    assert again.known_codes(train, (1, 2), "sig", frozenset({"MP001"})) is None  # other rules asked
    dep.write_text("first = 'cuda:0'  # changed\n")
    assert again.known_codes(train, (1, 2), "sig", codes) is None  # a module it imports changed
    cache.mark_codes("/x/all.py", (1, 2), "*", [], codes, codes)
    assert cache.known_codes("/x/all.py", (1, 2), "*", codes) is None  # a rule without words: never stored
