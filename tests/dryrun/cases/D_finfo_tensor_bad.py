# Held-out style case written from real-cases.tsv family D; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = nn.Linear(16, 16)

    def forward(self, x):
        w = self.k(x) @ x.transpose(1, 2)
        floor = torch.tensor(torch.finfo(w.dtype).min)
        w = torch.max(w, floor.cuda())  # <- MP004
        return w.softmax(-1) @ x


torch.cuda.set_device(0)
blocks = nn.ModuleList([Block().to("cuda:0"), Block().to("cuda:1")])
h = torch.randn(2, 4, 16, device="cuda:0")
for i, b in enumerate(blocks):
    h = b(h.to(f"cuda:{i}"))
h.sum().backward()
