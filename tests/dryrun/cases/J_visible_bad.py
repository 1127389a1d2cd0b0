# Held-out style case written from real-cases.tsv family J; markers: what the dry run must report (code at line), nothing else.
import os
import torch
import torch.nn as nn

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0,2")


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4).to("cuda:0")
        self.b = nn.Linear(4, 4).to("cuda:2")  # <- MP009

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:2"))


M()(torch.randn(2, 4)).sum().backward()
