"""MP003 at run time: DataParallel's internals (torch.nn.parallel.replicate, data_parallel, and scatter /
gather inside a split model's forward) on a model split over several virtual GPUs, at the call; the
same functions on a single-device model, or parallel_apply over branches each on its own GPU, stay
silent."""

import pytest
from dryrun_helpers import codes_at

SPLIT = """
import torch
import torch.nn as nn
import torch.nn.parallel as P
from torch.nn.parallel import gather, scatter

class HalfNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.left = nn.Linear(16, 16).to("cuda:0")
        self.right = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)).to("cuda:1")
    def forward(self, x):
        chunks = scatter(x, [0, 1])  # <- scatter
        return gather([self.left(chunks[0]), self.right(chunks[1])], target_device=0)

model = HalfNet()
"""


@pytest.mark.parametrize(
    "call",
    [
        "P.replicate(model, [0, 1])",
        "torch.nn.parallel.data_parallel(model, torch.randn(4, 16), device_ids=[0, 1])",
        "torch.nn.parallel.replicate(model, ['cuda:0', 'cuda:1'])",
    ],
)
def test_replicating_a_split_model_is_mp003_at_the_call(script, dryrun_cli, call):
    s = script(SPLIT + f"out = {call}  # <- call\n")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP003", s.line("call"))]
    f = report["findings"][0]
    assert f["devices"] == ["cuda:0", "cuda:1"] and f["modules"] == ["HalfNet"]  # never called: named by its class
    assert "requires every parameter on device_ids[0]" in f["message"]


def test_scatter_inside_a_split_forward_is_mp003_at_the_scatter(script, dryrun_cli):
    s = script(SPLIT + "out = model(torch.randn(4, 16))\n")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP003", s.line("scatter")) in codes_at(report), err
    assert {c for c, _ in codes_at(report)} == {"MP003"}


def test_the_primitives_on_a_single_device_model_and_parallel_apply_over_branches_are_silent(script, dryrun_cli):
    s = script(
        """
import torch
import torch.nn as nn
import torch.nn.parallel as P

net = nn.Linear(16, 16).to("cuda:0")
try:
    replicas = P.replicate(net, [0, 1])  # DataParallel's own use: a single-device module
except RuntimeError as e:
    print("limit:", e)
try:
    pieces = P.scatter(torch.randn(4, 16), [0, 1])  # a batch cut for replicas of a single-device model
except RuntimeError as e:
    print("limit:", e)
branches = [nn.Linear(16, 16).to("cuda:0"), nn.Linear(16, 16).to("cuda:1")]
x = torch.randn(4, 16)
try:
    outs = P.parallel_apply(branches, [x.to("cuda:0"), x.to("cuda:1")])
except RuntimeError as e:
    print("limit:", e)
print("finished")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["findings"] == [], err


def test_scatter_in_a_module_holding_one_replica_per_gpu_is_silent(script, dryrun_cli):
    s = script(
        """
import copy
import torch
import torch.nn as nn
import torch.nn.parallel as P

class Replicated(nn.Module):  # a hand-written DataParallel: the same weights' shapes on each GPU
    def __init__(self, net):
        super().__init__()
        self.copies = nn.ModuleList([copy.deepcopy(net).to(f"cuda:{i}") for i in range(2)])
    def forward(self, x):
        chunks = P.scatter(x, [0, 1])
        return P.gather(P.parallel_apply(list(self.copies), chunks), 0)

model = Replicated(nn.Linear(16, 16))
try:
    model(torch.randn(8, 16).to("cuda:0"))
except RuntimeError as e:
    print("limit:", e)
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["findings"] == [], err


def test_the_primitives_are_restored_after_the_debug_mode():
    import sys

    import torch

    import mpcheck

    homes = [
        (torch.nn.parallel, "replicate"),
        (torch.nn.parallel, "scatter"),
        (torch.nn.parallel, "gather"),
        (torch.nn.parallel, "data_parallel"),
        (sys.modules["torch.nn.parallel.replicate"], "replicate"),
        (sys.modules["torch.nn.parallel.scatter_gather"], "scatter"),
        (sys.modules["torch.nn.parallel.data_parallel"], "data_parallel"),
    ]
    before = [getattr(o, n) for o, n in homes]
    with mpcheck.debug(report=None):
        assert torch.nn.parallel.replicate is not before[0]  # patched while it runs
    assert all(getattr(o, n) is b for (o, n), b in zip(homes, before))
