"""The pre-commit hook, through the real `pre-commit try-repo` (it builds this
repository into a fresh virtualenv: needs pip's index, takes a minute the first
time; PRE_COMMIT_HOME keeps that environment between runs)."""

from __future__ import annotations

import os
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
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
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
