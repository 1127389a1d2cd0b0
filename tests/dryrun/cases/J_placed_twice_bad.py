# Held-out style case written from real-cases.tsv family J; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class MP(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub1 = nn.Linear(10, 10).cuda(0)
        self.sub2 = nn.Linear(10, 10)  # <- MP001
        self.sub1.cuda(1)

    def forward(self, x):
        x = self.sub1(x.cuda(0))  # <- MP001
        return self.sub2(x.cuda(1))


MP()(torch.randn(3, 10)).sum().backward()
