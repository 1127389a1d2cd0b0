"""Which files a run checks: folders, .gitignore, default excludes, explicit paths."""

from __future__ import annotations

import os

import pytest
from lint_fakes import write

from mpcheck.config import Layer, resolve
from mpcheck.lint.files import discover, missing_paths

KNOWN = ("MP000", "MP001")


def found(tmp_path, args, layer=None):
    old = os.getcwd()
    os.chdir(tmp_path)  # without [tool.mpcheck], patterns are relative to the working folder
    try:
        settings = resolve(layer or Layer(), KNOWN, start=tmp_path)
        return [f.path for f in discover(args, settings)]
    finally:
        os.chdir(old)


@pytest.fixture
def tree(tmp_path):
    (tmp_path / ".git").mkdir()
    return write(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'x'\n",
            "a.py": "",
            "pkg/b.py": "",
            "pkg/notes.txt": "",
            "pkg/data.json": "",
            ".git/hooks/x.py": "",
            ".venv/lib/site.py": "",
            "myenv/pyvenv.cfg": "home = /usr\n",
            "myenv/lib/mod.py": "",
            "lib/site-packages/dep.py": "",
            "pkg/__pycache__/b.py": "",
            "build/lib/a.py": "",
            "dist/a.py": "",
            "node_modules/x.py": "",
            ".tox/py/x.py": "",
            ".nox/py/x.py": "",
            ".eggs/x.py": "",
            "demo.egg-info/x.py": "",
        },
    )


def test_default_excludes(tree):
    assert found(tree, ["."]) == ["a.py", os.path.join("pkg", "b.py")]


def test_no_argument_means_the_current_folder_in_the_cli_sense(tree):
    assert found(tree, ["pkg"]) == [os.path.join("pkg", "b.py")]


def test_gitignore_at_every_level_with_negation(tree):
    write(
        tree,
        {
            ".gitignore": "generated/\n*_pb2.py\n",
            "generated/g.py": "",
            "pkg/api_pb2.py": "",
            "pkg/sub/.gitignore": "*.py\n!keep.py\n",
            "pkg/sub/drop.py": "",
            "pkg/sub/keep.py": "",
            "pkg/sub/deeper/also_dropped.py": "",
        },
    )
    assert found(tree, ["."]) == ["a.py", os.path.join("pkg", "b.py"), os.path.join("pkg", "sub", "keep.py")]


def test_parent_gitignore_applies_when_walking_a_subfolder(tree):
    write(tree, {".gitignore": "pkg/gen/\n", "pkg/gen/x.py": "", "pkg/c.py": ""})
    assert found(tree, ["pkg"]) == [os.path.join("pkg", "b.py"), os.path.join("pkg", "c.py")]


def test_explicit_paths_are_always_checked(tree):
    write(tree, {".gitignore": "ignored.py\n", "ignored.py": ""})
    assert found(tree, ["ignored.py", "build/lib/a.py", ".venv/lib/site.py"]) == [
        "ignored.py",
        os.path.join("build", "lib", "a.py"),
        os.path.join(".venv", "lib", "site.py"),
    ]
    # An excluded folder named explicitly is walked too.
    assert found(tree, ["dist"]) == [os.path.join("dist", "a.py")]


def test_non_python_files_are_skipped_quietly(tree):
    assert found(tree, ["pkg/notes.txt", "pkg/data.json"]) == []


def test_missing_paths_are_named_and_the_rest_is_found(tree, monkeypatch):
    monkeypatch.chdir(tree)
    assert missing_paths(["a.py", "nope.py", "pkg", "gone/"]) == ["nope.py", "gone/"]
    assert found(tree, ["a.py", "nope.py"]) == ["a.py"]


def test_git_ignored_folder_named_explicitly_is_walked(tree):
    write(
        tree,
        {
            ".gitignore": ".venv/\nvendored/\n*_pb2.py\n",
            ".venv/lib/python3.11/site-packages/torch/nn/mod.py": "",
            ".venv/lib/python3.11/site-packages/torch/nn/api_pb2.py": "",
            ".venv/lib/python3.11/site-packages/torch/__pycache__/x.py": "",
            "vendored/pkg/x.py": "",
            "vendored/pkg/gen/.gitignore": "*.py\n",
            "vendored/pkg/gen/y.py": "",
        },
    )
    torch = os.path.join(".venv", "lib", "python3.11", "site-packages", "torch")
    # Only what the other patterns, the default excludes and nested .gitignore files skip is skipped.
    assert found(tree, [torch]) == [os.path.join(torch, "nn", "mod.py")]
    assert found(tree, ["vendored"]) == [os.path.join("vendored", "pkg", "x.py")]
    assert found(tree, ["vendored/pkg"]) == [os.path.join("vendored", "pkg", "x.py")]
    # Walked from above, the ignored folders stay skipped.
    assert found(tree, ["."]) == ["a.py", os.path.join("pkg", "b.py")]


def test_exclude_patterns(tree):
    write(tree, {"pkg/gen/x.py": "", "tests/test_x.py": ""})
    assert found(tree, ["."], Layer(extend_exclude=["pkg/gen", "test_*.py"])) == ["a.py", os.path.join("pkg", "b.py")]
    # --exclude replaces the defaults: build/ comes back.
    got = found(tree, ["."], Layer(exclude=["tests/", ".git", ".venv", "myenv"]))
    assert os.path.join("build", "lib", "a.py") in got and os.path.join("tests", "test_x.py") not in got


def test_each_file_once_in_a_stable_order(tree):
    assert found(tree, ["a.py", ".", "a.py"]) == ["a.py", os.path.join("pkg", "b.py")]
