# Held-out style case written from real-cases.tsv family I; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, past):
        k = torch.cat([past, x], dim=1) if past is not None else x
        return self.lin(x), k


class Dec(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer().to("cuda:0"), Layer().to("cuda:1")])

    def forward(self, x, cache):
        new = []
        for i, l in enumerate(self.layers):
            x = x.to(f"cuda:{i}")
            x, k = l(x, cache[i] if cache else None)
            new.append(k)
        return x, new


def reorder(cache, beam_idx):
    return [k.index_select(0, beam_idx) for k in cache]  # <- MP001


dec = Dec()
with torch.no_grad():
    x, cache = dec(torch.randn(4, 1, 8), None)
    beam = torch.tensor([0, 0, 1, 1], device="cuda:0")
    cache = reorder(cache, beam)
    x, cache = dec(torch.randn(4, 1, 8), cache)
