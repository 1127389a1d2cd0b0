# Held-out style case written from real-cases.tsv family B; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16).to("cuda:0")
        self.b = nn.Linear(16, 4).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


model = Split()
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)  # <- MP002
x = torch.randn(8, 16)
y = model(x)
y.sum().backward()
