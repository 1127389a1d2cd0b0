# Held-out style case written from real-cases.tsv family D; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Stage(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        pos = torch.arange(x.shape[1]).cuda()  # <- MP004 MP019
        return self.lin(x) + pos[None, :, None].float()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.s0 = Stage(16).to("cuda:0")
        self.s1 = Stage(16).to("cuda:1")

    def forward(self, x):
        x = self.s0(x.to("cuda:0"))
        return self.s1(x.to("cuda:1"))


net = Net()
net(torch.randn(2, 5, 16)).mean().backward()
