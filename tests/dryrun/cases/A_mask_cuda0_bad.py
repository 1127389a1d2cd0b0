# Held-out style case written from real-cases.tsv family A; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Attn(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q = nn.Linear(d, d)

    def forward(self, x, mask):
        s = self.q(x) @ x.transpose(-1, -2)
        return (s.masked_fill(mask, -1e4)).softmax(-1) @ x


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.devs = [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]
        self.layers = nn.ModuleList(Attn(32).to(self.devs[i % len(self.devs)]) for i in range(n))

    def forward(self, x):
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1).to(self.devs[0])
        for layer in self.layers:
            x = x.to(next(layer.parameters()).device)  # <- MP006
            x = layer(x, mask)  # <- MP001
        return x


m = Model(4)
out = m(torch.randn(2, 8, 32))
out.sum().backward()
