"""The shipped examples/ must show findings at once (the README's first command),
each one a mistake the example's comments describe, and nothing else."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
_CLI = [sys.executable, "-c", "import sys; from mpcheck.cli import main; sys.exit(main())"]


def test_examples_give_the_commented_findings(tmp_path):
    proc = subprocess.run(
        [*_CLI, "--output-format", "json", "--no-cache", str(EXAMPLES)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    found = sorted((Path(f["path"]).name, f["code"]) for f in json.loads(proc.stdout))
    # Every code named in a comment of the examples, in the file that names it.
    promised = sorted(
        (p.name, code)
        for p in EXAMPLES.glob("*.py")
        for line in p.read_text().splitlines()
        if line.lstrip().startswith("#")
        for code in re.findall(r"MP\d{3}", line)
    )
    assert found == promised


def test_the_readme_shows_what_the_first_command_prints():
    """The README's sample output is the real output of `mpcheck examples/`, word for word."""
    root = EXAMPLES.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"What the first command prints:\n\n```\n(.*?)```", readme, re.S)
    assert shown, "the README lost its sample output"
    proc = subprocess.run(
        [*_CLI, "--no-cache", "--color", "never", "examples/"], capture_output=True, text=True, cwd=root
    )
    assert proc.returncode == 1, proc.stderr
    assert shown.group(1) == proc.stdout
