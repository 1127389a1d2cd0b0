# Held-out style case written from real-cases.tsv family J; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 8).to("cuda:1"))


def forward(x):
    return model[1](model[0](x.to("cuda:0")).to("cuda:1"))


def grad_norm(params):
    norms = [p.grad.norm(2) for p in params if p.grad is not None]
    return torch.norm(torch.stack(norms), 2)  # <- MP001


forward(torch.randn(4, 8)).sum().backward()
print(grad_norm(model.parameters()))
