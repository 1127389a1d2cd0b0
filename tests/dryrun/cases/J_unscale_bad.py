# Held-out style case written from real-cases.tsv family J; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 1).to("cuda:1"))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scale = torch.tensor(1024.0, device="cuda:0")
for _ in range(2):
    x = torch.randn(4, 8, device="cuda:0")
    loss = model[1](model[0](x).to("cuda:1")).mean()
    (loss * scale.to("cuda:1")).backward()
    for p in model.parameters():
        p.grad.mul_(1.0 / scale)  # <- MP001
    opt.step()
    opt.zero_grad()
