"""An encoder on cuda:0, a decoder on cuda:1 that concatenates a skip connection: the skip is passed
unmoved. One missing transfer, one finding at the call that let it in: the decoder's own layers,
after the concatenation, must not be reported again (the dry run goes on as the fix would have it)."""

import torch
import torch.nn as nn


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 8)
        self.mix = nn.Linear(16, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, h, skip):
        h = self.up(h)
        h = torch.cat([skip, h], dim=-1)
        return self.out(torch.relu(self.mix(h)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 8).to("cuda:0")
        self.dec = Decoder().to("cuda:1")

    def forward(self, x):
        skip = self.enc(x.to("cuda:0"))
        return self.dec(skip.to("cuda:1"), skip)  # <- MP001


net = Net()
net(torch.randn(3, 4)).sum().backward()
