"""A graph layer on the second GPU unpacks the edge list it is given (`src, dst = edges`): the edges,
made on the first GPU, were never moved there. Views of an input are that input: the missing transfer is at the layer's
call, reported once, not at each use of `src` and `dst` inside."""

import torch
import torch.nn as nn


class Propagate(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x, edges):
        src, dst = edges
        h = self.lin(x)
        return torch.zeros_like(h).index_add_(0, dst, h[src])


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.l0 = Propagate(8).to("cuda:0")
        self.l1 = Propagate(8).to("cuda:1")

    def forward(self, x, edges):
        x = self.l0(x.to("cuda:0"), edges)
        return self.l1(x.to("cuda:1"), edges)  # <- MP001


edges = torch.randint(0, 10, (2, 30), device="cuda:0")
TwoLayer()(torch.randn(10, 8), edges).sum().backward()
