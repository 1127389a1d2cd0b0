"""DataParallel around one stage that lives on cuda:1 with device_ids starting elsewhere (by default
every GPU, from cuda:0): PyTorch fails at forward with a device_ids[0] message; the dry run reports MP002
at the wrap. DataParallel with device_ids starting on the module's GPU, or a single id, stays silent."""

import pytest
from dryrun_helpers import codes_at

STAGES = """
import torch
import torch.nn as nn

stage0 = nn.Linear(16, 16).to("cuda:0")
stage1 = nn.Linear(16, 4).to("cuda:1")
"""


@pytest.mark.parametrize("wrap", ["nn.DataParallel(stage1)", "nn.DataParallel(stage1, device_ids=[0, 1])"])
def test_stage_on_cuda1_wrapped_with_device_ids_from_cuda0(script, dryrun_cli, wrap):
    s = script(
        STAGES
        + f"""
stage1 = {wrap}  # <- wrap
out = stage1(stage0(torch.randn(8, 16).to("cuda:0")).to("cuda:1"))
print("went on")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP002", s.line("wrap"))]
    f = report["findings"][0]
    assert f["devices"] == ["cuda:1", "cuda:0"]
    assert "device_ids[0] (cuda:0)" in f["message"]
    assert "device_ids=[1, ...]" in f["suggestion"]


@pytest.mark.parametrize(
    "wrap",
    [
        "nn.DataParallel(stage1, device_ids=[1, 0])",
        "nn.DataParallel(stage1, device_ids=[1])",
        "nn.DataParallel(stage1, device_ids=['cuda:1', 'cuda:0'])",
        "nn.DataParallel(stage1, device_ids=[0])",  # a single id: DataParallel moves the module there
    ],
)
def test_device_ids_that_start_on_the_stage_or_a_single_id_are_silent(script, dryrun_cli, wrap):
    s = script(STAGES + f"stage1 = {wrap}\nprint('went on')\n")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["findings"] == [], err


def test_a_model_on_cuda0_in_default_data_parallel_is_silent(script, dryrun_cli):
    s = script(STAGES + "model = nn.DataParallel(stage0)\nmodel(torch.randn(8, 16)).sum().backward()\n")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
