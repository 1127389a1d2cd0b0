# Held-out style case written from real-cases.tsv family D; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn

net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).cuda()
torch.cuda.set_device(1)
x = torch.randn(2, 3, 16, 16).cuda()  # <- MP004
y = net(x)
y.mean().backward()
