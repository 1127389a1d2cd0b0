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


def test_replicas_of_a_split_model_stop_where_cuda_stops_them(script, dryrun_cli):
    # CUDA's broadcast refuses tensors off device_ids[0] ("All tensors must be on devices[0]"): the
    # program ends at replicate on real GPUs, so the dry run reports MP003 there and runs no replica (whose
    # forward, every weight on one GPU, would give mismatches that are only its consequences).
    s = script(
        SPLIT
        + """
replicas = P.replicate(model, [0, 1])  # <- call
outs = P.parallel_apply(replicas, [(torch.randn(2, 16),), (torch.randn(2, 16),)])
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP003", s.line("call"))]
    assert report["stopped"].endswith("All tensors must be on devices[0]: 0")
    assert f":{s.line('call')}:" in report["stopped"]


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
replicas = P.replicate(net, [0, 1])  # DataParallel's own use: a single-device module
pieces = P.scatter(torch.randn(4, 16), [0, 1])  # a batch cut for replicas of a single-device model
branches = [nn.Linear(16, 16).to("cuda:0"), nn.Linear(16, 16).to("cuda:1")]
x = torch.randn(4, 16)
outs = P.parallel_apply(branches, [x.to("cuda:0"), x.to("cuda:1")])
assert [str(o.device) for o in outs] == ["cuda:0", "cuda:1"]
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["findings"] == [] and not report["stopped"], err


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
out = model(torch.randn(8, 16).to("cuda:0"))
assert str(out.device) == "cuda:0" and out.shape == (8, 16)
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["findings"] == [] and not report["stopped"], err


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


def test_a_hand_written_data_parallel_step_on_a_single_device_model_runs_to_its_end(script, dryrun_cli):
    """DataParallel's collectives (torch.nn.parallel.comm) are CUDA kernels; on virtual GPUs each is the
    copies it makes, so a step fed by hand runs to its end, its pieces land where CUDA puts them, and the
    ledger counts their copies."""
    s = script(
        """
import torch
import torch.nn as nn
import torch.nn.parallel as P
import torch.nn.parallel.comm as comm

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to("cuda:0")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.arange(64.0).reshape(8, 8).to("cuda:0"), torch.randn(8, 2, device="cuda:0")
replicas = P.replicate(model, [0, 1])
pieces = P.scatter(x, [0, 1])
assert [str(p.device) for p in pieces] == ["cuda:0", "cuda:1"] and [p.shape[0] for p in pieces] == [4, 4]
assert [str(r[0].weight.device) for r in replicas] == ["cuda:0", "cuda:1"]
out = P.gather([r(p) for r, p in zip(replicas, pieces)], 0)
assert str(out.device) == "cuda:0" and out.shape == (8, 2)
nn.functional.mse_loss(out, y).backward()
opt.step()
copies = comm.broadcast(torch.ones(3, device="cuda:0"), [0, 1])
total = comm.reduce_add([c * (i + 1) for i, c in enumerate(copies)], 1)
assert str(total.device) == "cuda:1" and total.tolist() == [3.0, 3.0, 3.0]
uneven = comm.scatter(x, [0, 1], chunk_sizes=[2, 6])
assert [p.shape[0] for p in uneven] == [2, 6] and torch.equal(comm.gather(uneven, 0, -1), x.cpu())
print("finished")
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0 and report["findings"] == [], err
    assert not report.get("stopped"), report.get("stopped")
    moved = (
        {(r["src"], r["dst"]) for r in report["transfers"]["by_site"]}
        if "by_site" in report.get("transfers", {})
        else None
    )
    assert moved is None or ("cuda:0", "cuda:1") in moved


def test_a_parallel_primitive_to_a_gpu_that_does_not_exist_is_mp009_at_the_call(script, dryrun_cli):
    s = script(
        """
import torch
from torch.nn.parallel import gather, scatter

parts = scatter(torch.randn(8, 4, device="cuda:0"), [0, 1])
out = gather([p * 2 for p in parts], 2)  # <- gather
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP009", s.line("gather")) in codes_at(report), err
