# Held-out style case written from real-cases.tsv family C; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn
from torch.nn.parallel import replicate, scatter, parallel_apply, gather

net = nn.Sequential(nn.Linear(8, 8).to("cuda:0"), nn.ReLU(), nn.Linear(8, 2).to("cuda:1"))
devices = [0, 1]
x = torch.randn(4, 8, device="cuda:0")
replicas = replicate(net, devices)  # <- MP003
inputs = scatter(x, devices)
outs = parallel_apply(replicas[: len(inputs)], inputs)
print(gather(outs, 0).shape)
