# Held-out style case written from real-cases.tsv family (correct code); markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Offloaded(nn.Module):
    """Embedding kept on the CPU (too big), the rest on two GPUs."""

    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(10000, 64, mode="mean")
        self.mlp0 = nn.Sequential(nn.Linear(64, 64), nn.ReLU()).to("cuda:0")
        self.mlp1 = nn.Linear(64, 2).to("cuda:1")

    def forward(self, idx, offsets):
        e = self.emb(idx, offsets)
        h = self.mlp0(e.to("cuda:0", non_blocking=True))
        return self.mlp1(h.to("cuda:1"))


m = Offloaded()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(3):
    idx = torch.randint(0, 10000, (20,))
    offsets = torch.tensor([0, 5, 10, 15])
    y = torch.randint(0, 2, (4,), device="cuda:1")
    loss = nn.functional.cross_entropy(m(idx, offsets), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(loss.item())
