"""Suppression comments: per line, per statement, per file; through the whole CLI too."""

from __future__ import annotations

import textwrap

import pytest
from lint_fakes import fake_rules, write  # noqa: F401  (fixture)

from mpcheck import cli
from mpcheck.finding import Finding
from mpcheck.lint.noqa import ALL, file_noqa, filter_findings, line_noqa


def f(line, code="MP003"):
    return Finding(code=code, name="x", path="a.py", line=line, column=1, message="m")


@pytest.mark.parametrize(
    "line, expected",
    [
        ("x = 1", None),
        ("x = 1  # noqa", ALL),
        ("x = 1  #noqa:MP003", {"MP003"}),
        ("x = 1  # noqa: MP001,MP003", {"MP001", "MP003"}),
        ("x = 1  # noqa: MP001, MP003 because reasons", {"MP001", "MP003"}),
        ("x = 1  # NOQA: mp003", {"MP003"}),
        ("x = 1  # noqa: E501, MP003", {"E501", "MP003"}),
        ("x = 1  # not a noqa", None),
    ],
)
def test_line_noqa(line, expected):
    got = line_noqa(line)
    assert got == (expected if expected in (None, ALL) else frozenset(expected))


def test_on_the_reported_line():
    src = "a = 1  # noqa: MP003\nb = 2  # noqa: MP001\nc = 3  # noqa\nd = 4\n"
    kept = filter_findings(src, [f(1), f(2), f(3), f(4), f(3, "MP101")])
    assert [(x.line, x.code) for x in kept] == [(2, "MP003"), (4, "MP003")]


def test_first_or_last_line_of_a_multiline_statement():
    src = textwrap.dedent(
        """\
        model = nn.DataParallel(  # noqa: MP002
            net,
            device_ids=[0, 1],
        )
        other = wrap(
            net,
            ids=[0, 1],
        )  # noqa: MP003
        third = wrap(
            net,  # unrelated comment
            ids=[0, 1],
        )
        """
    )
    kept = filter_findings(src, [f(3, "MP002"), f(2, "MP003"), f(6, "MP003"), f(7, "MP003"), f(11, "MP003")])
    assert [(x.line, x.code) for x in kept] == [(2, "MP003"), (11, "MP003")]


def test_a_block_is_not_one_statement():
    # A noqa on a `with` header covers the header, not every line of its body.
    src = textwrap.dedent(
        """\
        with torch.cuda.device(1):  # noqa
            a = b.cuda()
            c = d.cuda()
        class Net(  # noqa: MP007
            nn.Module,
        ):
            x = 1
        """
    )
    kept = filter_findings(src, [f(1), f(2), f(3), f(5, "MP007"), f(7, "MP007")])
    assert [x.line for x in kept] == [2, 3, 7]


def test_file_level():
    assert file_noqa("x = 1\n# mpcheck: noqa\n") == ALL
    assert file_noqa("#mpcheck:noqa: MP001, MP003\n") == {"MP001", "MP003"}
    assert file_noqa("x = 1  # mpcheck: noqa\n") is None  # only on a line of its own
    assert filter_findings("# mpcheck: noqa\nx\n", [f(2)]) == []
    kept = filter_findings("# mpcheck: noqa: MP003\nx\n", [f(2), f(2, "MP001")])
    assert [x.code for x in kept] == ["MP001"]


def test_noqa_in_the_cli(tmp_path, monkeypatch, capsys, fake_rules):
    write(
        tmp_path,
        {
            "a.py": "a = x.cuda()  # noqa: MP901\nb = x.cuda()  # noqa: MP902\nc = x.cuda()\n"
            "d = f(\n    x.cuda(),\n)  # noqa\n",
            "b.py": "# mpcheck: noqa\nm = x.cuda()\n",
            "c.py": "# mpcheck: noqa: MP903\nm = x.cuda().half()\n",
        },
    )
    monkeypatch.chdir(tmp_path)
    code = cli.main(["--no-cache", "--output-format", "json"])
    import json

    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [(d["path"], d["line"], d["code"]) for d in out] == [
        ("a.py", 2, "MP901"),
        ("a.py", 3, "MP901"),
        ("c.py", 2, "MP901"),
    ]
    assert "b.py" not in fake_rules["analyze"]  # a file-level noqa file is never analysed
