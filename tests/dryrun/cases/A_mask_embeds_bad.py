# Held-out style case written from real-cases.tsv family A; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)

    def forward(self, x, mask):
        return self.attn(x, x, x, attn_mask=mask)[0] + x


class LM(nn.Module):
    def __init__(self, d=32, n=4):
        super().__init__()
        self.embed = nn.Embedding(50, d).to("cuda:0")
        ngpu = torch.cuda.device_count()
        self.layers = nn.ModuleList(Layer(d).to(f"cuda:{i * ngpu // n}") for i in range(n))

    def forward(self, ids):
        h = self.embed(ids.to("cuda:0"))
        t = ids.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=h.device), 1)
        for layer in self.layers:
            h = h.to(layer.attn.in_proj_weight.device)
            h = layer(h, mask)  # <- MP001
        return h


LM()(torch.randint(0, 50, (2, 6))).sum().backward()
