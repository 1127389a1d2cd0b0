"""MP009: a device index past the last GPU is reported at the line that names it, before CUDA's
"invalid device ordinal" (the dry run never creates a virtual cuda:2 with --gpus 2); devices that exist,
and a torch.device made but never used, stay silent."""

import pytest
from dryrun_helpers import codes_at

STAGES = """
import torch
import torch.nn as nn

device_map = {"stage0": 1, "stage1": 0}  # ids not ascending
stages = nn.ModuleList([nn.Linear(8, 8).to(f"cuda:{device_map[f'stage{i}']}") for i in range(2)])
"""


def test_next_stage_computed_as_k_plus_one_lands_on_a_gpu_that_does_not_exist(script, dryrun_cli):
    s = script(
        STAGES
        + """
h = torch.randn(4, 8).to("cuda:1")
for i, stage in enumerate(stages):
    h = stage(h)
    k = device_map[f"stage{i}"]
    h = h.to(f"cuda:{k + 1}")  # <- hop
print("finished")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP009", s.line("hop"))]
    f = report["findings"][0]
    assert f["devices"] == ["cuda:2"]
    assert "cuda:2 does not exist: this run has 2 GPUs (cuda:0..cuda:1)" in f["message"]
    assert "finished" not in err
    assert "invalid device ordinal" in report["stopped"]
    assert report["limits"] == []  # the program's bug, not a limit of the dry run


@pytest.mark.parametrize(
    "line",
    [
        "x = torch.zeros(4, device=torch.device('cuda', 2))",
        "x = torch.randn(4).cuda(2)",
        "x = torch.randn(4).to(2)",
        "x = torch.randn(4).to(device='cuda:2', dtype=torch.float16)",
        "m = nn.Linear(4, 4).to('cuda:2')",
        "m = nn.Linear(4, 4).cuda(2)",
        "x = torch.randn(4).new_empty(4, device='cuda:3')",
    ],
)
def test_every_way_of_placing_on_a_missing_gpu(script, dryrun_cli, line):
    s = script(f"import torch\nimport torch.nn as nn\n{line}  # <- place\n")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP009", s.line("place"))], err


def test_devices_that_exist_and_unused_device_objects_stay_silent(script, dryrun_cli):
    s = script(
        """
import torch
import torch.nn as nn
planned = [torch.device("cuda", i) for i in range(4)]  # made, never used past the real count
n = torch.cuda.device_count()
stages = [nn.Linear(8, 8).to(planned[i]) for i in range(n)]
h = torch.randn(4, 8)
for i, stage in enumerate(stages):
    h = stage(h.to(f"cuda:{i}"))
h = h.cuda().to("cuda") + torch.zeros(8, device=torch.device("cuda", 0))
print("finished")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
