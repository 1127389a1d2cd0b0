"""The graph layers of A_unpacked_index_input_bad with the edge list moved to the second GPU: the layer
unpacks it there, and the program runs clean."""

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
        return self.l1(x.to("cuda:1"), edges.to("cuda:1"))


edges = torch.randint(0, 10, (2, 30), device="cuda:0")
TwoLayer()(torch.randn(10, 8), edges).sum().backward()
