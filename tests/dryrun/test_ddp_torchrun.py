"""DDP with device_ids on a split model, written for torchrun (NCCL, the env:// rendezvous, LOCAL_RANK from the
environment): caught at the wrap under the dry run as on real GPUs. The dry run is torchrun's only process:
NCCL runs as gloo, the rendezvous variables are set for the program and restored after it."""

import os

from dryrun_helpers import codes_at

TORCHRUN_DDP = """
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

class TwoDeviceReplica(nn.Module):
    def __init__(self):
        super().__init__()
        self.front = nn.Linear(16, 32).to("cuda:0")
        self.back = nn.Linear(32, 16).to("cuda:1")

    def forward(self, x):
        return self.back(torch.relu(self.front(x.to("cuda:0"))).to("cuda:1"))

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
model = DistributedDataParallel(TwoDeviceReplica(), {wrap_args})  # <- wrap
model(torch.randn(4, 16)).sum().backward()
print("rank", dist.get_rank(), "of", dist.get_world_size())
"""


def test_ddp_with_device_ids_around_a_split_model_under_torchrun_style_setup(script, dryrun_cli):
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    before = {k: os.environ.get(k) for k in keys}
    s = script(TORCHRUN_DDP.format(wrap_args="device_ids=[local_rank]"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["stopped"] is None, report["stopped"]
    assert codes_at(report) == [("MP002", s.line("wrap"))]
    assert "device_ids=None" in report["findings"][0]["suggestion"]
    assert any("gloo" in lim["message"] for lim in report["limits"])
    # the rendezvous variables were the dry run's, not the caller's
    assert {k: os.environ.get(k) for k in keys} == before


def test_ddp_without_device_ids_under_torchrun_style_setup_is_silent(script, dryrun_cli):
    s = script(TORCHRUN_DDP.format(wrap_args="device_ids=None"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["stopped"]) == (0, None)
    assert report["findings"] == []
