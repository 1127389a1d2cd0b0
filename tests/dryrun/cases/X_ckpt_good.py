# Held-out style case written from real-cases.tsv family (correct code); markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.register_buffer("scale", torch.ones(d), persistent=False)

    def forward(self, x):
        return x + self.ff(x) * self.scale


class Net(nn.Module):
    def __init__(self, d=32, n=4):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        for i, b in enumerate(self.blocks):
            b.to(f"cuda:{i * 2 // n}")

    def forward(self, x):
        for b in self.blocks:
            x = x.to(b.scale.device)
            x = checkpoint(b, x, use_reentrant=False)
        return x


net = Net()
ema = [p.detach().clone() for p in net.parameters()]
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(8, 32, device="cuda:0", requires_grad=True)
    net(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        for e, p in zip(ema, net.parameters()):
            e.mul_(0.9).add_(p, alpha=0.1)
