"""The encoder-decoder of A_skip_into_decoder_bad with the skip connection moved to the decoder's GPU: runs
clean."""

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
        return self.dec(skip.to("cuda:1"), skip.to("cuda:1"))


net = Net()
net(torch.randn(3, 4)).sum().backward()
