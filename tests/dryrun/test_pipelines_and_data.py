"""Real training code's shapes under the dry run: a torch.distributed.pipelining schedule whose stages live in
other processes stops with a limit message at its step (not gloo's crash), and data read with a DataLoader
(workers or not, pin_memory, a pinned staging buffer) runs to the end with the program's own bugs still caught."""

import pytest
from dryrun_helpers import codes_at


def test_a_pipelining_schedule_over_other_processes_stops_with_a_limit_at_its_step(script, dryrun_cli):
    s = script("""
import os, tempfile
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.distributed.pipelining import ScheduleGPipe, SplitPoint, pipeline

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
    def forward(self, x):
        return self.b(torch.relu(self.a(x)))

dist.init_process_group("gloo", init_method="file://" + os.path.join(tempfile.mkdtemp(), "s"), rank=0, world_size=1)
device = torch.device(f"cuda:{dist.get_rank()}")
x = torch.randn(4, 8)
pipe = pipeline(Net(), mb_args=(x[:2],), split_spec={"b": SplitPoint.BEGINNING})
schedule = ScheduleGPipe(pipe.build_stage(dist.get_rank(), device), n_microbatches=2)
schedule.step(x.to(device))  # <- step
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1
    assert "Traceback" not in err
    stopped = report["stopped"]
    assert stopped.startswith(f"{s.path}:{s.line('step')}: ScheduleGPipe.step() over 2 pipeline stages")
    assert "beyond the dry run" in stopped and "one process" in stopped


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("pin", [False, True])
def test_a_dataloader_feeding_a_split_model_runs_to_the_end(script, dryrun_cli, workers, pin):
    s = script(f"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

class Pairs(Dataset):
    def __len__(self):
        return 32
    def __getitem__(self, i):
        return {{"x": torch.randn(8), "y": torch.tensor(i % 3)}}

s0, s1 = nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 3).to("cuda:1")
opt = torch.optim.SGD([*s0.parameters(), *s1.parameters()], lr=0.1)
staging = torch.empty(8, 8, pin_memory=True)  # a pinned buffer for host-to-device copies
loader = DataLoader(Pairs(), batch_size=8, shuffle=True, num_workers={workers}, pin_memory={pin})
steps = 0
for batch in loader:
    staging.copy_(batch["x"])
    x = staging.to("cuda:0", non_blocking=True)
    out = s1(s0(x).to("cuda:1"))
    loss = nn.functional.cross_entropy(out, batch["y"].to("cuda:1", non_blocking=True))
    opt.zero_grad()
    loss.backward()
    opt.step()
    steps += 1
assert steps == 4, steps
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["stopped"]) == (0, None), err
    assert report["findings"] == []


def test_a_bug_inside_a_dataloader_loop_is_still_caught(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

s0, s1 = nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 3).to("cuda:1")
loader = DataLoader(TensorDataset(torch.randn(32, 8)), batch_size=8, num_workers=2, pin_memory=True)
for (x,) in loader:
    out = s1(s0(x.to("cuda:0")))  # <- bug
    out.sum().backward()
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("bug"))]
    assert report["findings"][0]["extra"]["count"] == 4
