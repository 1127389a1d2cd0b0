# Held-out style case written from real-cases.tsv family D; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(16, 32, batch_first=True)

    def init_hidden(self, b):
        return (torch.zeros(1, b, 32).cuda(), torch.zeros(1, b, 32).cuda())  # <- MP004

    def forward(self, x):
        out, _ = self.rnn(x, self.init_hidden(x.shape[0]))
        return out


class Seq2(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(16, 16).to("cuda:0")
        self.enc = Enc().to("cuda:1")

    def forward(self, x):
        return self.enc(self.pre(x.to("cuda:0")).to("cuda:1"))


Seq2()(torch.randn(4, 7, 16)).sum().backward()
