# Held-out style case written from real-cases.tsv family A; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Rotary(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self.cache = None

    def forward(self, x):
        if self.cache is None:
            inv = 1.0 / (10000 ** (torch.arange(0, self.dim, 2).float() / self.dim))
            self.cache = torch.outer(torch.arange(x.shape[1]).float(), inv).cuda()
        return x * self.cache.cos().repeat(1, 2)  # <- MP001


class Layer(nn.Module):
    def __init__(self, rot):
        super().__init__()
        self.rot = rot
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(self.rot(x))


rot = Rotary(8)
layers = [Layer(rot).to("cuda:0"), Layer(rot).to("cuda:1")]
x = torch.randn(2, 5, 8)
for i, l in enumerate(layers):
    x = l(x.to(f"cuda:{i}"))
x.sum().backward()
