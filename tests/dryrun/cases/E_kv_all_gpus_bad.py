# Held-out style case written from real-cases.tsv family E; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)

    def forward(self, x, kv):
        return self.lin(x) + kv.mean()


layers = nn.ModuleList([Layer().to(f"cuda:{i // 2}") for i in range(4)])
devs = ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
kv = [torch.randn(8, 64, device=d) for d in devs]
with torch.no_grad():
    for step in range(4):
        x = torch.randn(8, 64, device="cuda:0")
        for i, layer in enumerate(layers):
            x = x.to(devs[i])
            # The cache moves unchanged, there and back (MP005). No activation crosses per layer at run time:
            # x crosses once; each cache tensor's moves are round trips, not a chain (the linter says MP006).
            kv = [k.to(devs[i]) for k in kv]  # <- MP005
            x = layer(x, kv[i])
