"""Two stages built as nn.Sequential containers and a head: the hop between the stages is missing.
One finding, at the stage call; the second stage runs on as if the hop were there, so the head (on
the second stage's device) is not reported as a consequence."""

import torch
import torch.nn as nn


class Residual(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return x + self.lin(self.norm(x))


def stage(width, depth, device):
    return nn.Sequential(*[Residual(width) for _ in range(depth)]).to(device)


class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0 = stage(16, 2, "cuda:0")
        self.s1 = stage(16, 2, "cuda:1")
        self.head = nn.Linear(16, 3).to("cuda:1")

    def forward(self, x):
        h = self.s0(x.to("cuda:0"))
        h = self.s1(h)  # <- MP001
        return self.head(h.mean(0, keepdim=True).expand_as(h))


model = TwoStage()
y = torch.randint(0, 3, (4,), device="cuda:1")
nn.functional.cross_entropy(model(torch.randn(4, 16)), y).backward()
