# Held-out style case written from real-cases.tsv family A; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.temb = nn.Linear(d, d)

    def forward(self, h, t, ctx):
        return self.lin(h) + self.temb(t) + ctx["bias"]  # <- MP001


class Pipe(nn.Module):
    def __init__(self, n=4, d=16):
        super().__init__()
        ngpu = torch.cuda.device_count()
        self.blocks = nn.ModuleList(Block(d).to(f"cuda:{i * ngpu // n}") for i in range(n))

    def forward(self, h, t, ctx):
        for b in self.blocks:
            dev = b.lin.weight.device
            h = b(h.to(dev), t, ctx)  # <- MP001
        return h


p = Pipe()
t = torch.randn(2, 16, device="cuda:0")
out = p(torch.randn(2, 16, device="cuda:0"), t, {"bias": torch.zeros(16, device="cuda:0")})
out.sum().backward()
