"""The pre-commit hook, through the real `pre-commit try-repo` and `pre-commit run`
(they build this repository into a fresh virtualenv: needs pip's index, takes a
minute the first time; PRE_COMMIT_HOME keeps that environment between runs); the
README's own snippet, against a copy of this repository tagged by `.ci/release`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

BAD = textwrap.dedent(
    """\
    import torch.nn as nn


    class SplitNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(8, 8).to("cuda:0")
            self.dec = nn.Linear(8, 2).to("cuda:1")


    model = SplitNet().cuda()
    """
)
CLEAN = "import torch\n\nx = torch.zeros(3)\n"


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def test_hook_manifest():
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["id"] == "mpcheck" and hook["entry"] == "mpcheck"
    assert hook["language"] == "python" and hook["types"] == ["python"] and hook["require_serial"] is True


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("precommit")
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    (root / "bad.py").write_text(BAD)
    (root / "clean.py").write_text(CLEAN)
    (root / "notes.md").write_text("# notes\n")
    subprocess.run(["git", "add", "."], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", "init"], cwd=root, check=True, env=env)
    return root, env


def try_repo(git_repo, *files):
    root, env = git_repo
    env = {**env, "PRE_COMMIT_HOME": os.environ.get("PRE_COMMIT_HOME", "/tmp/mpcheck-pre-commit-home")}
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(REPO), "mpcheck", "--verbose", "--files", *files],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def test_hook_fails_on_a_finding(git_repo):
    r = try_repo(git_repo, "bad.py", "clean.py")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Failed" in r.stdout
    assert "bad.py:11:" in r.stdout and "MP007" in r.stdout


def test_hook_passes_on_clean_code(git_repo):
    r = try_repo(git_repo, "clean.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Passed" in r.stdout


def test_hook_with_no_python_file(git_repo):
    r = try_repo(git_repo, "notes.md")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Skipped" in r.stdout or "no files to check" in r.stdout


def readme_snippet() -> dict:
    """The README's pre-commit configuration, as a user would paste it."""
    text = (REPO / "README.md").read_text()
    (block,) = re.findall(r"```yaml\n(repos:.*?)```", text, re.S)
    return yaml.safe_load(block)


def _git(cwd, *args, check=True):
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True, env=env)


def _copy_of_this_repo(dest: Path) -> Path:
    """This working tree (committed or not, less what git ignores) as a fresh git repository."""
    listed = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").stdout
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "snapshot")
    return dest


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A copy of this repository, tagged by the release step."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    copy = _copy_of_this_repo(tmp_path_factory.mktemp("mpcheck-release"))
    r = subprocess.run(["bash", ".ci/release"], cwd=copy, capture_output=True, text=True, env={**os.environ, **GIT_ENV})
    assert r.returncode == 0, r.stdout + r.stderr
    return copy


def test_release_tags_the_version_in_init(released):
    import mpcheck

    assert _git(released, "tag", "--points-at", "HEAD").stdout.split() == [f"v{mpcheck.__version__}"]


def test_release_refuses_a_readme_pinning_another_rev(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    copy = _copy_of_this_repo(tmp_path)
    readme = copy / "README.md"
    readme.write_text(re.sub(r"(?m)^(\s*rev:\s*)\S+", r"\1v9.9.9", readme.read_text()))
    _git(copy, "commit", "-q", "-am", "pin another rev")
    r = subprocess.run(["bash", ".ci/release"], cwd=copy, capture_output=True, text=True, env={**os.environ, **GIT_ENV})
    assert r.returncode == 1 and "v9.9.9" in r.stderr
    assert _git(copy, "tag").stdout == ""


def test_readme_snippet_runs_as_written(released, tmp_path):
    """The snippet with only its URL swapped for the released copy: a wrong rev or hook id fails here."""
    config = readme_snippet()
    (repo,) = config["repos"]
    assert repo["repo"].startswith("https://")  # the URL a user installs from; swapped below
    repo["repo"] = str(released)
    target = tmp_path / "project"
    target.mkdir()
    (target / "bad.py").write_text(BAD)
    (target / "clean.py").write_text(CLEAN)
    (target / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    _git(target, "init", "-q")
    _git(target, "add", "-A")
    env = {
        **os.environ,
        **GIT_ENV,
        "PRE_COMMIT_HOME": os.environ.get("PRE_COMMIT_HOME", "/tmp/mpcheck-pre-commit-home"),
    }

    def run(*files):
        return subprocess.run(
            [sys.executable, "-m", "pre_commit", "run", "--verbose", "--files", *files],
            cwd=target,
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )

    r = run("bad.py", "clean.py")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "bad.py:11:" in r.stdout and "MP007" in r.stdout
    r = run("clean.py")
    assert r.returncode == 0 and "Passed" in r.stdout, r.stdout + r.stderr
