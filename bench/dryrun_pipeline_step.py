"""Step time of a 4-stage pipeline under the dry run: what the run-time checks cost per step on a model
whose activation crosses three device boundaries a pass (MP006 follows each crossing's chain and, from the
third, asks the autograd graph how the data leaving was made from what arrived).

    mpcheck dryrun --gpus 4 bench/dryrun_pipeline_step.py
    PYTHONPATH=<other checkout> python -m mpcheck dryrun --gpus 4 bench/dryrun_pipeline_step.py   # to compare

Prints the median of steps 6 to 30 (forward, backward, SGD step) in milliseconds, on one CPU thread. Run
two checkouts alternately, several times each: a shared machine moves the figure by about 1 ms.
"""

import time

import torch
import torch.nn as nn

torch.set_num_threads(1)


class Stage(nn.Module):
    def __init__(self, d: int, blocks: int):
        super().__init__()
        self.layers = nn.Sequential(
            *[nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d)) for _ in range(blocks)]
        )

    def forward(self, x):
        return self.layers(x)


class Pipe(nn.Module):
    def __init__(self, d: int = 64, blocks: int = 6):
        super().__init__()
        self.stages = nn.ModuleList(Stage(d, blocks).to(f"cuda:{i}") for i in range(4))

    def forward(self, x):
        for i, stage in enumerate(self.stages):
            x = stage(x.to(f"cuda:{i}"))
        return x


model = Pipe()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
times = []
for _ in range(30):
    start = time.perf_counter()
    loss = model(torch.randn(8, 64, device="cuda:0")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - start)
later = sorted(times[5:])
print(f"median step {1000 * later[len(later) // 2]:.2f} ms")
