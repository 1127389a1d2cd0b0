# Held-out style case written from real-cases.tsv family G; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(32, 32).to("cuda:0")
        self.dec = nn.Linear(32, 32).to("cuda:1")

    def forward(self, x):
        return self.dec(self.enc(x.to("cuda:0")).to("cuda:1"))


def build():
    net = Net()
    return net


model = build()
model.cuda()  # <- MP007
opt = torch.optim.Adam(model.parameters())
for _ in range(2):
    model(torch.randn(4, 32)).pow(2).mean().backward()
    opt.step()
