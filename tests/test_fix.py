"""`--fix` and `--diff` with the real rules: a fix is offered only where it is right
(the value is a tensor, every visit of the line needs the same device), the fixer
re-lints each fix in memory and refuses one that leaves its finding or adds one,
and the report after `--fix` is what a fresh run over the fixed files finds.

Regression cases (issue 9, "Fixes that break code"): the MP001 fix inside a loop
over blocks on two devices (it added an MP001, an MP006 and an MP011), and a
`.to()` appended to a Python list of tensors (an AttributeError at run time).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from mpcheck import cli
from mpcheck.finding import Finding, Fix
from mpcheck.lint.fix import fix_sources

CASES = Path(__file__).parent / "fixtures" / "cases"

# Blocks 0-1 on cuda:0, 2-3 on cuda:1; the mask never follows the activations.
# `mask.to('cuda:1')` at the call inside the loop would break blocks 0-1.
LOOP_OVER_BLOCKS = """
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ff = nn.Linear(dim, dim)

    def forward(self, x, mask):
        return self.ff(x) * mask


class Stack(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(dim, dim).to("cuda:0" if i < 2 else "cuda:1") for i in range(4)])

    def forward(self, x):
        mask = torch.ones(8, device="cuda:0")
        h = x.to("cuda:0")
        for i, block in enumerate(self.blocks):
            if i == 2:
                h = h.to("cuda:1")
            h = torch.add(block(h), mask)
        return h
"""

# The encoder returns a list of skip features; the decoder on cuda:1 uses them as
# they are. The finding is right, but `skips.to('cuda:1')` would be an AttributeError.
LIST_OF_TENSORS = """
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

    def forward(self, x):
        feats = []
        for d in self.down:
            x = d(x)
            feats.append(x)
        return x, feats


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(4, 4)

    def forward(self, x, skips):
        for s in skips:
            x = self.up(x) + s
        return x


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = Encoder().to("cuda:0")
        self.dec = Decoder().to("cuda:1")

    def forward(self, x):
        h, downsampling_features = self.enc(x.to("cuda:0"))
        return self.dec(h.to("cuda:1"), downsampling_features)
"""

# The first block runs on the CPU, where the model does not check a second argument
# (lengths and indices may live there): no re-lint would see `mask.to('cuda:1')` go
# wrong there (the CPU block would get a cuda:1 mask), only the record of every
# visit's device does.
CPU_AND_GPU_BLOCKS = """
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff = nn.Linear(8, 8)

    def forward(self, x, mask):
        return self.ff(x) * mask


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block().to(d) for d in ("cpu", "cuda:1")])

    def forward(self, x):
        mask = x.to("cuda:0").sigmoid()
        h = x
        for i, blk in enumerate(self.blocks):
            if i == 1:
                h = h.to("cuda:1")
            h = blk(h, mask)
        return h
"""


# Runnable under the dry run: `scale` stays on cuda:0, the upper layer is on cuda:1.
RUNNABLE_SCALE = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lower = nn.Linear(8, 8).to("cuda:0")
        self.upper = nn.Linear(8, 8).to("cuda:1")

    def forward(self, x):
        x = x.to("cuda:0")
        scale = torch.ones(8, device=x.device)
        h = self.lower(x) * scale
        h = h.to("cuda:1")
        return self.upper(h) * scale


net = Net()
print(net(torch.randn(2, 8)).sum().item())
"""

# One Stage class for both stages: the mismatch is inside Stage.forward, which runs
# once on cuda:0 (fine) and once on cuda:1 (the bug); `mask.to('cuda:1')` there
# would break the first stage.
SHARED_STAGE = """
import torch
import torch.nn as nn


class Stage(nn.Module):
    def __init__(self, device):
        super().__init__()
        self.ff = nn.Linear(8, 8).to(device)

    def forward(self, x, mask):
        return self.ff(x) * mask


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lower = Stage("cuda:0")
        self.upper = Stage("cuda:1")

    def forward(self, x):
        x = x.to("cuda:0")
        mask = torch.ones(8, device=x.device)
        h = self.lower(x, mask)
        return self.upper(h.to("cuda:1"), mask)
"""


def run_cli(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys, *args) -> tuple[list[dict], str]:
    code, out, err = run_cli(capsys, "--no-cache", "--output-format", "json", *args)
    assert code in (0, 1), err
    return json.loads(out or "[]"), err


def _keys(findings: list[dict]) -> Counter:
    return Counter((f["path"], f["line"], f["code"], f["message"]) for f in findings)


def _write(tmp_path: Path, monkeypatch, name: str, text: str) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


# ----------------------------------------------------------- the regression cases


def test_no_fix_inside_a_loop_over_blocks_on_two_devices(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path, monkeypatch, "stack.py", LOOP_OVER_BLOCKS)
    before = path.read_text()
    found, _ = _json(capsys, "stack.py")
    mp001 = [f for f in found if f["code"] == "MP001"]
    assert mp001 and all(f["fix"] is None for f in mp001), mp001
    code, out, _ = run_cli(capsys, "--no-cache", "--fix", "stack.py")
    assert path.read_text() == before
    assert "fixed" not in out and code == 1


def test_no_fix_where_another_visit_of_the_line_is_not_checked(tmp_path, monkeypatch, capsys):
    _write(tmp_path, monkeypatch, "net.py", CPU_AND_GPU_BLOCKS)
    found, _ = _json(capsys, "net.py")
    assert [(f["code"], f["line"], f["fix"]) for f in found] == [("MP001", 25, None)]


def test_the_fixer_refuses_a_fix_that_adds_a_finding(tmp_path, monkeypatch, capsys):
    """The fix the rule used to offer, forced past the rule's checks and the lint-time
    check of the offer: the fixer's own re-lint sees the new mismatch of the blocks
    on cuda:0 and keeps the file as it was."""
    path = _write(tmp_path, monkeypatch, "stack.py", LOOP_OVER_BLOCKS)
    before = path.read_text()
    import mpcheck.lint.fix as fix
    import mpcheck.rules.mp001_missing_transfer as mp001

    monkeypatch.setattr(mp001, "_fixable", lambda ctx, ev, v, there: True)
    found, _ = _json(capsys, "stack.py")
    assert all(f["fix"] is None for f in found)  # the offer is checked when linting
    monkeypatch.setattr(fix, "verified_fixes", lambda path, text, found, recheck: found)
    found, _ = _json(capsys, "stack.py")
    forced = [f for f in found if f["code"] == "MP001" and f["fix"]]
    assert forced and "mask.to('cuda:1')" in forced[0]["fix"]["replacement"]
    code, out, err = run_cli(capsys, "--no-cache", "--fix", "stack.py")
    assert path.read_text() == before
    assert "fix for MP001 not applied: it would add MP001" in err
    assert "fixed" not in out
    code, out, err = run_cli(capsys, "--no-cache", "--diff", "stack.py")
    assert out == "" and code == 0 and "not applied" in err


def test_no_fix_on_a_list_of_tensors(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path, monkeypatch, "unet.py", LIST_OF_TENSORS)
    before = path.read_text()
    found, _ = _json(capsys, "unet.py")
    # The skips are followed into the decoder: the finding is on each skip where it is
    # added, a tensor; nothing is ever appended to the list itself.
    assert [(f["code"], f["line"]) for f in found] == [("MP001", 24)]
    assert "`s`" in found[0]["message"] and "downsampling_features" not in found[0]["message"]
    run_cli(capsys, "--no-cache", "--fix", "unet.py")
    assert "downsampling_features.to(" not in path.read_text()
    assert path.read_text().replace("x = self.up(x) + s.to('cuda:1')", "x = self.up(x) + s") == before


def test_no_fix_inside_a_forward_shared_by_stages_on_two_devices(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path, monkeypatch, "net.py", SHARED_STAGE)
    before = path.read_text()
    found, _ = _json(capsys, "net.py")
    # Reported at the call that passes the mask to the stage on cuda:1, where a fix
    # suits that call only; the forward that both stages share is left as it is.
    assert [(f["code"], f["line"], f["fix"] is not None) for f in found] == [("MP001", 24, True)]
    run_cli(capsys, "--no-cache", "--fix", "net.py")
    after = path.read_text()
    assert "return self.ff(x) * mask\n" in after
    assert after == before.replace(
        'self.upper(h.to("cuda:1"), mask)', "self.upper(h.to(\"cuda:1\"), mask.to('cuda:1'))"
    )
    assert _json(capsys, "net.py")[0] == []


def test_a_fix_on_a_tensor_is_still_offered_and_removes_its_finding(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path, monkeypatch, "net.py", RUNNABLE_SCALE)
    found, _ = _json(capsys, "net.py")
    assert [(f["code"], f["fix"] is not None) for f in found] == [("MP001", True)]
    code, out, _ = run_cli(capsys, "--no-cache", "--fix", "net.py")
    assert "return self.upper(h) * scale.to('cuda:1')" in path.read_text()
    assert code == 0 and "1 fixed" in out
    assert _json(capsys, "net.py")[0] == []


def test_the_fixed_program_runs_under_the_dry_run_without_a_mismatch(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from mpcheck.runtime.commands.dryrun import main as dryrun

    path = _write(tmp_path, monkeypatch, "net.py", RUNNABLE_SCALE)

    def mismatches() -> list[str]:
        report = tmp_path / "report.json"
        dryrun(["--gpus", "2", "--output-format", "json", "-o", str(report), str(path)])
        capsys.readouterr()
        return [f["code"] for f in json.loads(report.read_text())["findings"]]

    assert mismatches() == ["MP001"]  # the bug is real on (virtual) GPUs
    run_cli(capsys, "--no-cache", "--fix", "net.py")
    assert mismatches() == []


# ----------------------------------------------------------- the fixer's own checks


def _finding(line: int, code: str = "MP001", fix: Fix | None = None) -> Finding:
    return Finding(code, "x", "m.py", line, 1, f"finding at {line}", fix=fix)


def test_fixer_keeps_a_fix_only_when_the_relint_agrees(tmp_path):
    text = "a = x\nb = y\nc = z\n"
    target = tmp_path / "m.py"
    target.write_text(text)
    good = _finding(1, fix=Fix(1, 5, 1, 6, "x.to(0)"))
    adds = _finding(2, fix=Fix(2, 5, 2, 6, "y.to(1)"))
    stays = _finding(3, fix=Fix(3, 5, 3, 6, "z.to(2)"))
    findings = [good, adds, stays]

    def recheck(path, new):
        out = [f for f in findings if f is not good or "x.to(0)" not in new]
        if "y.to(1)" in new:
            out = [f for f in out if f is not adds] + [_finding(2, "MP006")]
        return out

    result, texts = fix_sources(
        findings, {"m.py": text}, {"m.py": str(target)}, unsafe=False, write=True, diff=False, recheck=recheck
    )
    assert result.fixed == [good] and result.applied == [good]
    assert target.read_text() == "a = x.to(0)\nb = y\nc = z\n" == texts["m.py"]
    assert any("m.py:2: fix for MP001 not applied: it would add MP006 at line 2" in e for e in result.errors)
    assert any("m.py:3: fix for MP001 not applied: the finding would remain" in e for e in result.errors)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".mpcheck-fix-")]


def test_fixer_writes_nothing_when_no_fix_survives(tmp_path):
    text = "a = x\n"
    target = tmp_path / "m.py"
    target.write_text(text)
    broken = _finding(1, fix=Fix(1, 5, 1, 6, "x.to((0)"))
    unknown = _finding(1, "MP008", fix=Fix(1, 1, 1, 2, "b"))
    result, texts = fix_sources(
        [broken, unknown],
        {"m.py": text},
        {"m.py": str(target)},
        unsafe=False,
        write=True,
        diff=True,
        recheck=lambda path, new: None,
    )
    assert texts == {} and result.fixed == [] and result.diffs == []
    assert target.read_text() == text
    assert any("would not parse" in e for e in result.errors)
    assert any("could not be checked again" in e for e in result.errors)


# ----------------------------------------------------------- every bad fixture


def _bad_cases() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.name.endswith(("_bad.py", "_bad")))


@pytest.mark.parametrize("case", _bad_cases(), ids=lambda p: p.name)
def test_fix_of_every_bad_fixture_removes_its_finding_and_adds_none(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if case.is_dir():
        shutil.copytree(case, tmp_path / case.name, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copyfile(case, tmp_path / case.name)
    before, _ = _json(capsys, case.name)
    offered = [f for f in before if f["fix"] is not None]

    _, diff_err = run_cli(capsys, "--no-cache", "--diff", case.name)[1:]
    reported, fix_err = _json(capsys, "--fix", case.name)
    fresh, _ = _json(capsys, case.name)

    # Every fix a rule offers passes the fixer's checks: none is refused.
    assert "not applied" not in fix_err and "not applied" not in diff_err
    # The report after --fix is what a fresh run over the fixed files finds.
    assert _keys(reported) == _keys(fresh)
    # Each fixed finding is gone, nothing new appeared, and fixed + remaining = before.
    assert not _keys(fresh) - _keys(before)
    assert not _keys(offered) & _keys(fresh)
    assert sum(_keys(before).values()) == len(offered) + len(fresh)
    if offered:
        assert f"Would fix {len(offered)} finding" in diff_err and f"({len(fresh)} would remain)" in diff_err
