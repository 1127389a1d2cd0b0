"""Reporters, on hand-made findings: text, full, json, sarif, github, statistics, colour."""

from __future__ import annotations

import json

from mpcheck.finding import Finding, Fix
from mpcheck.report import ReportContext, render
from mpcheck.report.statistics import render as statistics

A = Finding(
    code="MP002",
    name="split-model-in-data-parallel",
    path="src/train.py",
    line=4,
    column=6,
    end_line=4,
    end_column=27,
    message="DataParallel on SplitNet, which spans cuda:0 and cuda:1",
    devices=("cuda:0", "cuda:1"),
    modules=("SplitNet",),
    suggestion="drop DataParallel",
)
B = Finding(
    code="MP007",
    name="collapse-split-model",
    path="src/train.py",
    line=5,
    column=7,
    message="collapses, 100%: a,b",
    severity="warning",
    fix=Fix(5, 17, 5, 24, ""),
)
SOURCES = {"src/train.py": "import torch\n\n\ndp = nn.DataParallel(SplitNet())\nnet = SplitNet().cuda()\n"}


def test_text():
    out = render("text", [A, B])
    assert out.splitlines() == [
        "src/train.py:4:6: MP002 DataParallel on SplitNet, which spans cuda:0 and cuda:1",
        "src/train.py:5:7: MP007 collapses, 100%: a,b",
        "Found 2 findings (1 fixable with --fix).",
    ]
    assert render("text", []) == ""


def test_full_has_source_caret_devices_and_help():
    out = render("full", [A], ReportContext(sources=SOURCES))
    lines = out.splitlines()
    assert lines[0] == "src/train.py:4:6: MP002 DataParallel on SplitNet, which spans cuda:0 and cuda:1"
    assert lines[2] == "4 | dp = nn.DataParallel(SplitNet())"
    assert lines[3] == "  |      " + "^" * 21
    assert "  devices: cuda:0, cuda:1" in lines and "  help: drop DataParallel" in lines


def test_json():
    data = json.loads(render("json", [A, B]))
    assert [d["code"] for d in data] == ["MP002", "MP007"]
    first = data[0]
    assert {k: first[k] for k in ("code", "name", "path", "line", "column", "end_line", "end_column", "severity")} == {
        "code": "MP002",
        "name": "split-model-in-data-parallel",
        "path": "src/train.py",
        "line": 4,
        "column": 6,
        "end_line": 4,
        "end_column": 27,
        "severity": "error",
    }
    assert data[1]["end_line"] == 5 and data[1]["end_column"] == 7  # defaults to the start
    assert data[1]["fix"]["replacement"] == "" and data[1]["fix"]["safe"] is True
    assert Finding.from_dict(data[0]) == A  # the cache stores findings this way


def test_sarif_2_1_0_shape():
    info = {"MP002": ("split-model-in-data-parallel", "error", "Summary two.", "# MP002 ...\n")}
    doc = json.loads(render("sarif", [A, B], ReportContext(rule_info=info)))
    assert doc["version"] == "2.1.0" and "sarif-2.1.0" in doc["$schema"]
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert run["tool"]["driver"]["name"] == "mpcheck"
    assert [r["id"] for r in rules] == ["MP002", "MP007"]
    assert rules[0]["shortDescription"]["text"] == "Summary two."
    assert rules[0]["help"]["markdown"].startswith("# MP002")
    assert rules[1]["defaultConfiguration"]["level"] == "warning"  # not in rule_info: from the finding
    res = run["results"]
    assert [r["level"] for r in res] == ["error", "warning"]
    for r in res:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        loc = r["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] == "src/train.py"
        assert all(v >= 1 for v in loc["region"].values())
    # The message is the text format's: it carries the advice, the suggestion is not repeated.
    assert res[0]["message"]["text"] == A.message
    assert render("sarif", [], ReportContext())  # an empty run is still a valid document
    assert json.loads(render("sarif", []))["runs"][0]["results"] == []


def test_sarif_absolute_paths_become_relative_to_root(tmp_path):
    f = Finding(code="MP002", name="n", path=str(tmp_path / "a" / "b.py"), line=1, column=1, message="m")
    doc = json.loads(render("sarif", [f], ReportContext(root=str(tmp_path))))
    assert doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "a/b.py"


def test_github_annotations_escape():
    out = render("github", [A, B]).splitlines()
    assert out[0] == (
        "::error file=src/train.py,line=4,col=6,endLine=4,endColumn=27,"
        "title=MP002 (split-model-in-data-parallel)::MP002 DataParallel on SplitNet, which spans cuda:0 and cuda:1"
    )  # the message alone, as in the text format: the suggestion (already in a rule's message) is not repeated
    assert out[1].startswith("::warning file=src/train.py,line=5,")
    assert out[1].endswith("::MP007 collapses, 100%25: a,b")
    weird = Finding(code="MP001", name="n", path="a,b:c.py", line=1, column=1, message="two\nlines")
    assert render("github", [weird]).startswith("::error file=a%2Cb%3Ac.py,") and "two%0Alines" in render(
        "github", [weird]
    )


def test_statistics():
    out = statistics([A, B, B])
    assert out.splitlines() == ["2  MP007  collapse-split-model [*]", "1  MP002  split-model-in-data-parallel"]
    assert statistics([]) == ""


def test_statistics_json():
    assert json.loads(statistics([A, B, B], "json")) == [
        {"code": "MP007", "name": B.name, "count": 2, "fixable": True},
        {"code": "MP002", "name": A.name, "count": 1, "fixable": False},
    ]
    assert json.loads(statistics([], "json")) == []


def test_colour_only_when_on():
    plain = render("text", [A], ReportContext(color=False))
    coloured = render("text", [A], ReportContext(color=True))
    assert "\x1b[" not in plain and "\x1b[" in coloured
    assert coloured.replace("\x1b[0m", "").count("MP002") == 1


def test_colour_wanted(monkeypatch):
    from mpcheck.report.colour import wanted

    class Stream:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert wanted("auto", Stream(True)) and not wanted("auto", Stream(False))
    assert wanted("always", Stream(False)) and not wanted("never", Stream(True))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wanted("auto", Stream(True))
