"""CUDA_VISIBLE_DEVICES on virtual GPUs: a program that sets it sees the GPUs it leaves, renumbered from
cuda:0, so a hard-coded index past them is MP009 as on real GPUs; the value mpcheck was started with
describes the real machine and leaves `--gpus` as asked."""

import pytest
from dryrun_helpers import codes_at

from mpcheck.runtime.virtual.visible import visible_count

PROGRAM = """
import os
os.environ["CUDA_VISIBLE_DEVICES"] = "{spec}"
import torch
from torch import nn
assert torch.cuda.device_count() == {count}
a = nn.Linear(8, 8).to("cuda:0")
b = nn.Linear(8, 8).to("cuda:2")  # <- third
"""


@pytest.fixture(autouse=True)
def _restore_visible(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # put back whatever the programs set


@pytest.mark.parametrize(
    ("spec", "machine", "count"),
    [("0,2", 4, 2), ("3", 4, 1), ("0,5,1", 4, 1), ("1,1,2", 4, 1), ("", 4, 0), ("-1", 4, 0), ("GPU-8a1b", 4, None)],
)
def test_visible_count_reads_the_list_as_cuda_does(spec, machine, count):
    assert visible_count(spec, machine) == count


def test_a_program_that_hides_gpus_gets_fewer_and_an_index_past_them_is_mp009(script, dryrun_cli):
    s = script(PROGRAM.format(spec="0,2", count=2))
    status, report, err = dryrun_cli(s, "--gpus", "4")
    assert status == 1
    assert codes_at(report) == [("MP009", s.line("third"))], err
    assert any("CUDA_VISIBLE_DEVICES='0,2'" in n and "2 of the 4" in n for n in report["notes"])
    assert "AssertionError" not in (report["stopped"] or "")  # the program saw 2 GPUs
    assert sorted(report["memory"]) == ["cuda:0", "cuda:1"]  # the hidden ones are not in the estimate


def test_a_program_that_leaves_every_gpu_visible_is_unchanged(script, dryrun_cli):
    s = script(PROGRAM.format(spec="0,1,2,3", count=4))
    status, report, err = dryrun_cli(s, "--gpus", "4")
    assert status == 0 and report["findings"] == [], err
    assert sorted(report["memory"]) == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert not any("CUDA_VISIBLE_DEVICES" in n for n in report["notes"])


def test_the_value_mpcheck_was_started_with_is_the_real_machines(script, dryrun_cli, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a shared server's one GPU
    s = script(
        """
import torch
from torch import nn
assert torch.cuda.device_count() == 4
nn.Linear(8, 8).to("cuda:3")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "4")
    assert status == 0 and report["findings"] == [], err
