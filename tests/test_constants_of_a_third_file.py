"""Device constants of a third file: `fit.py` imports a class from `autoencoder.py`, which places
its parts on constants it imports from `devices.py`. The class's summary is made with those
constants (lint/pipeline.py, _Project.constants_imported), so `fit.py` knows the class is split,
and its cached result goes when `devices.py` changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpcheck import cli

CASE = Path(__file__).parent / "fixtures" / "cases" / "B_dp_split_on_a_third_files_constants_pkg_bad"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    for name in ("devices.py", "autoencoder.py", "fit.py"):
        (tmp_path / name).write_text((CASE / name).read_text())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def lint(capsys: pytest.CaptureFixture[str], *args: str) -> list[tuple[str, int, str]]:
    cli.main(["--jobs", "1", "--output-format", "json", *args])
    return [(d["path"], d["line"], d["code"]) for d in json.loads(capsys.readouterr().out)]


def test_a_class_placed_on_a_third_files_constants_is_split_for_its_importer(project, capsys):
    assert lint(capsys, "--no-cache", ".") == [("fit.py", 9, "MP002")]
    assert lint(capsys, "--no-cache", "fit.py", "autoencoder.py") == [("fit.py", 9, "MP002")]  # devices.py not linted


def test_a_module_imported_whole_gives_its_constants_too(project, capsys):
    auto = (project / "autoencoder.py").read_text()
    auto = auto.replace("from devices import DECODER_DEVICE, ENCODER_DEVICE", "import devices as D")
    auto = auto.replace("(ENCODER_DEVICE)", "(D.ENCODER_DEVICE)").replace("(DECODER_DEVICE)", "(D.DECODER_DEVICE)")
    (project / "autoencoder.py").write_text(auto)
    assert lint(capsys, "--no-cache", ".") == [("fit.py", 9, "MP002")]


def test_editing_the_third_file_changes_the_cached_result(project, capsys):
    assert lint(capsys) == [("fit.py", 9, "MP002")]
    devices = project / "devices.py"
    devices.write_text(devices.read_text().replace('"cuda:1"', '"cuda:0"'))  # both halves on one GPU
    assert lint(capsys) == []
    devices.write_text(
        devices.read_text().replace('DECODER_DEVICE = torch.device("cuda:0")', 'DECODER_DEVICE = "cuda:1"')
    )
    assert lint(capsys) == [("fit.py", 9, "MP002")]


def test_a_name_the_third_file_binds_by_no_device_leaves_the_class_unknown(project, capsys):
    devices = project / "devices.py"
    devices.write_text(devices.read_text().replace('torch.device("cuda:1")', "pick()"))
    assert lint(capsys, "--no-cache", ".") == []
