# Held-out style case written from real-cases.tsv family (correct code); markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Tied(nn.Module):
    def __init__(self, v=500, d=32):
        super().__init__()
        self.emb = nn.Embedding(v, d).to("cuda:0")
        self.mid = nn.Linear(d, d).to("cuda:1")

    def forward(self, ids):
        h = self.mid(self.emb(ids.to("cuda:0")).to("cuda:1"))
        return F.linear(h.to("cuda:0"), self.emb.weight)


m = Tied()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(3):
    ids = torch.randint(0, 500, (4, 9))
    logits = m(ids)
    loss = F.cross_entropy(logits.flatten(0, 1), ids.flatten().to(logits.device))
    loss.backward()
    opt.step()
    opt.zero_grad()
