# Held-out style case written from real-cases.tsv family J; markers: what the dry run must report (code at line), nothing else.
import copy
import torch
import torch.nn as nn


class EMA:
    def __init__(self, model, decay=0.99):
        self.shadow = {k: v.detach().clone().to("cuda:0") for k, v in model.state_dict().items()}
        self.decay = decay

    def update(self, model):
        for k, v in model.state_dict().items():
            self.shadow[k].mul_(self.decay).add_(v, alpha=1 - self.decay)  # <- MP001


model = nn.Sequential(nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 8).to("cuda:1"))
ema = EMA(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    x = torch.randn(4, 8, device="cuda:0")
    model[1](model[0](x).to("cuda:1")).sum().backward()
    opt.step()
    ema.update(model)
