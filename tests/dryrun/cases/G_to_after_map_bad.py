# Held-out style case written from real-cases.tsv family G; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Big(nn.Module):
    def __init__(self, device_map):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(32, 32).to(device_map[i]) for i in range(4))
        self.device_map = device_map

    def forward(self, x):
        for i, l in enumerate(self.layers):
            x = l(x.to(self.device_map[i]))
        return x


model = Big({0: "cuda:0", 1: "cuda:0", 2: "cuda:1", 3: "cuda:1"})
model = model.to("cuda")  # <- MP007
print(model(torch.randn(2, 32)).shape)
