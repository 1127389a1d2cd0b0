"""A copy into a tensor writes where that tensor is (runtime/virtual/ops.py): a GPU's data copied into a
host buffer (`host.copy_(h)`, `ring[i].copy_(h)`, `host[:] = h`) leaves the buffer on the host, so a later
`torch.cat` with host tensors is fine, and each such copy is one transfer to the host. Pinned staging
buffers made by any factory (`empty_like(m, pin_memory=True)`) run: page-locked memory means nothing
without a GPU. Found on correct programs of the dry-run precision round 13."""

import pytest

PROGRAM = """
import torch
import torch.nn as nn

class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3).to("cuda:0")
        self.b = nn.Linear(3, 3).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))

model = Split()
ring = torch.zeros(4, 3)
host = torch.empty(3)
staging = torch.empty_like(host, pin_memory=True)
history = torch.zeros(1, 3)
for step in range(4):
    stats = model(torch.randn(2, 3)).detach().mean(0)
    COPY
    history = torch.cat([history, ring.mean(0, keepdim=True)])  # host tensors only
assert host.device.type == "cpu" and ring.device.type == "cpu" and staging.device.type == "cpu"
print(history.shape)
"""


@pytest.mark.parametrize(
    "copy",
    [
        "ring[step].copy_(stats, non_blocking=True)",
        "ring[step] = stats",
        "host.copy_(stats); ring[step] = host",
        "staging.copy_(stats, non_blocking=True); ring[step].copy_(staging)",
    ],
)
@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_a_gpu_copied_into_a_host_buffer_leaves_it_on_the_host(script, dryrun_cli, copy, backing):
    s = script(PROGRAM.replace("COPY", copy))
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", backing)
    assert status == 0, err
    assert report["findings"] == []
    if copy.startswith("ring[step] ="):
        return  # (an assignment through a view is not in the transfer ledger: the program's own asserts ran)
    to_host = [p["count"] for p in report["transfers"]["by_pair"] if (p["src"], p["dst"]) == ("cuda:1", "cpu")]
    assert sum(to_host) >= 4  # every step's copy is a transfer to the host (the buffer never became a GPU's)
