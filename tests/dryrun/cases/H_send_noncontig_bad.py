# Held-out style case written from real-cases.tsv family H; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class P(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 24).to("cuda:0")
        self.b = nn.Linear(24, 8).to("cuda:1")

    def forward(self, x):
        h = self.a(x).transpose(0, 1)
        h = h.to("cuda:1")  # <- MP012
        return self.b(h.view(-1, 24))


P()(torch.randn(6, 8, device="cuda:0")).sum().backward()
