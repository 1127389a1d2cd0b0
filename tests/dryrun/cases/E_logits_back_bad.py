# Held-out style case written from real-cases.tsv family E; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn
import torch.nn.functional as F


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32000, 256).to("cuda:0")
        self.body = nn.Linear(256, 256).to("cuda:0")
        self.head = nn.Linear(256, 32000).to("cuda:1")

    def forward(self, ids):
        return self.head(self.body(self.emb(ids)).to("cuda:1"))


lm = LM()
opt = torch.optim.AdamW(lm.parameters())
for _ in range(3):
    ids = torch.randint(0, 32000, (8, 128), device="cuda:0")
    logits = lm(ids)
    loss = F.cross_entropy(logits.to("cuda:0").flatten(0, 1), ids.flatten())  # <- MP014
    loss.backward()
    opt.step()
    opt.zero_grad()
