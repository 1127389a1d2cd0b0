import json
import re
import textwrap

import pytest

torch = pytest.importorskip("torch")

_MARK = re.compile(r"#\s*<-\s*(\w+)")


class Script:
    """A user program written to a temp file; `# <- tag` comments name the lines tests expect."""

    def __init__(self, path, marks):
        self.path = path
        self.marks = marks

    def line(self, tag):
        return self.marks[tag]


@pytest.fixture
def script(tmp_path):
    def write(body, name="train.py"):
        text = textwrap.dedent(body).lstrip("\n")
        marks = {}
        for i, line in enumerate(text.splitlines(), 1):
            m = _MARK.search(line)
            if m:
                marks[m.group(1)] = i
        path = tmp_path / name
        path.write_text(text)
        return Script(path, marks)

    return write


@pytest.fixture
def dryrun_cli(tmp_path, capsys):
    """Run `mpcheck dryrun [opts] script` in-process; return (status, json report, stderr)."""
    from mpcheck.runtime.commands.dryrun import main

    def run(script, *opts):
        out = tmp_path / "report.json"
        status = main([*opts, "--output-format", "json", "-o", str(out), str(script.path)])
        err = capsys.readouterr().err
        report = json.loads(out.read_text()) if out.exists() else None
        return status, report, err

    return run
