# Held-out style case written from real-cases.tsv family A; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class LoRA(nn.Module):
    def __init__(self, base, r=4):
        super().__init__()
        self.__dict__["base"] = base
        self.down = nn.Linear(base.in_features, r, bias=False)
        self.up = nn.Linear(r, base.out_features, bias=False)

    def forward(self, x):
        return self.base(x) + self.up(self.down(x))  # <- MP001


layers = nn.ModuleList([nn.Linear(16, 16).to("cuda:0"), nn.Linear(16, 16).to("cuda:1")])
adapters = [LoRA(l).cuda() for l in layers]
h = torch.randn(2, 16)
for i, a in enumerate(adapters):
    h = a(h.to(f"cuda:{i}"))  # <- MP001
h.sum().backward()
