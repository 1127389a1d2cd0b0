"""[tool.mpcheck]: discovery, keys, selection layers, errors that name the culprit."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpcheck.config import DEFAULT_EXCLUDE, ConfigError, Layer, expand_codes, find_pyproject, gpu_counts, resolve

KNOWN = ("MP000", "MP001", "MP002", "MP003", "MP101", "MP102")


def settings_for(tmp_path: Path, table: str, cli: Layer | None = None, **kw):
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n[tool.mpcheck]\n{table}\n")
    return resolve(cli or Layer(), KNOWN, start=tmp_path, **kw)


def test_defaults_select_everything(tmp_path):
    s = resolve(Layer(), KNOWN, start=tmp_path)
    assert s.codes == frozenset(KNOWN)
    assert s.exclude == DEFAULT_EXCLUDE
    assert s.config_path is None


def test_prefixes_and_all():
    assert expand_codes(["MP1"], KNOWN, "x") == {"MP101", "MP102"}
    assert expand_codes(["mp00"], KNOWN, "x") == {"MP000", "MP001", "MP002", "MP003"}
    assert expand_codes(["ALL"], KNOWN, "x") == set(KNOWN)
    assert expand_codes(["MP"], KNOWN, "x") == set(KNOWN)
    with pytest.raises(ConfigError, match="MP2"):
        expand_codes(["MP2"], KNOWN, "x")


def test_config_layer_then_cli_layer(tmp_path):
    s = settings_for(tmp_path, "select = ['MP0']\nignore = ['MP003']\nextend-select = ['MP101']")
    assert s.codes == {"MP000", "MP001", "MP002", "MP101"}
    # A select on the command line replaces the config's selection (and its ignore) ...
    s = settings_for(tmp_path, "select = ['MP0']\nignore = ['MP003']", Layer(select=["MP003", "MP102"]))
    assert s.codes == {"MP003", "MP102"}
    # ... while --ignore / --extend-select adjust it.
    s = settings_for(tmp_path, "select = ['MP0']", Layer(ignore=["MP001"], extend_select=["MP102"]))
    assert s.codes == {"MP000", "MP002", "MP003", "MP102"}


def test_exclude_replaces_extend_exclude_adds(tmp_path):
    s = settings_for(tmp_path, "extend-exclude = ['gen/']")
    assert s.exclude == DEFAULT_EXCLUDE + ("gen/",)
    s = settings_for(tmp_path, "exclude = ['only/']", Layer(extend_exclude=["more"]))
    assert s.exclude == ("only/", "more")


def test_per_file_ignores(tmp_path):
    s = settings_for(tmp_path, "[tool.mpcheck.per-file-ignores]\n'tests/*' = ['MP1']\n'conftest.py' = ['MP002']")
    assert s.codes_for("tests/test_a.py") == {"MP000", "MP001", "MP002", "MP003"}
    assert s.codes_for("sub/conftest.py") == frozenset(KNOWN) - {"MP002"}
    assert s.codes_for("src/model.py") == frozenset(KNOWN)


@pytest.mark.parametrize(
    "table, message",
    [
        ("selekt = ['MP001']", "'selekt'"),
        ("select = ['MP001', 'MP999']", "'MP999'"),
        ("ignore = ['E501']", "'E501'"),
        ("select = 'MP001'\nfoo = 1\nbar = 2", "'bar', 'foo'"),
        ("select = [1, 2]", "'select' must be a list of strings"),
        ("per-file-ignores = ['a']", "per-file-ignores"),
        ("per-file-ignores = { 'a.py' = ['XX1'] }", "'XX1'"),
        ("select = [", "invalid TOML"),
    ],
)
def test_errors_name_the_culprit_and_the_file(tmp_path, table, message):
    with pytest.raises(ConfigError) as info:
        settings_for(tmp_path, table)
    assert message in str(info.value)
    assert str(tmp_path / "pyproject.toml") in str(info.value)


def test_unknown_code_on_command_line(tmp_path):
    with pytest.raises(ConfigError, match="'MP404'.*known codes"):
        resolve(Layer(ignore=["MP404"]), KNOWN, start=tmp_path)


def test_nearest_pyproject_with_table_wins(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.mpcheck]\nselect = ['MP1']\n")
    sub = tmp_path / "pkg" / "sub"
    sub.mkdir(parents=True)
    (tmp_path / "pkg" / "pyproject.toml").write_text("[project]\nname = 'inner'\n")  # no [tool.mpcheck]
    s = resolve(Layer(), KNOWN, start=sub)
    assert s.config_path == tmp_path / "pyproject.toml"
    assert s.codes == {"MP101", "MP102"}
    # The cache lives beside the nearest pyproject.toml, with or without the table.
    assert s.project_root == tmp_path / "pkg"
    assert find_pyproject(sub / "file.py", with_tool_table=False) == tmp_path / "pkg" / "pyproject.toml"


def test_isolated_ignores_the_file(tmp_path):
    s = settings_for(tmp_path, "select = ['MP1']", use_config=False)
    assert s.codes == frozenset(KNOWN) and s.config_path is None


def test_gpus_default_config_and_command_line(tmp_path):
    assert resolve(Layer(), KNOWN, start=tmp_path).gpus == (2, 4, 8)
    assert settings_for(tmp_path, "gpus = [8, 2]").gpus == (2, 8)  # sorted, as a set
    # The command line replaces the config's list.
    assert settings_for(tmp_path, "gpus = [8, 2]", Layer(gpus=gpu_counts("4", "--gpus"))).gpus == (4,)


@pytest.mark.parametrize("value", ["[]", "[0]", "[2, 17]", "['two']", "[true]", "2.5", "{ a = 1 }"])
def test_bad_gpus_are_an_error_that_says_what_is_expected(tmp_path, value):
    with pytest.raises(ConfigError) as info:
        settings_for(tmp_path, f"gpus = {value}")
    assert "'gpus' must be a non-empty list of GPU counts from 1 to 16" in str(info.value)
    assert str(tmp_path / "pyproject.toml") in str(info.value)


@pytest.mark.parametrize("arg, ok", [("2,4", (2, 4)), (" 8 ", (8,)), ("2,x", None), ("0", None), ("", None)])
def test_gpus_on_the_command_line(arg, ok):
    if ok is None:
        with pytest.raises(ConfigError, match="--gpus"):
            gpu_counts(arg, "--gpus")
    else:
        assert gpu_counts(arg, "--gpus") == ok
