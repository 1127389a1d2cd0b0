# Held-out style case written from real-cases.tsv family I; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class EncDec(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Embedding(100, 32).to("cuda:0")
        self.dec = nn.GRU(32, 32, batch_first=True).to("cuda:1")
        self.out = nn.Linear(32, 100).to("cuda:1")

    def forward(self, src, tgt):
        mem = self.enc(src.to("cuda:0")).mean(1, keepdim=True).to("cuda:1")
        h, _ = self.dec(self.enc(tgt.to("cuda:0")).to("cuda:1") + mem)
        return self.out(h)

    @torch.no_grad()
    def generate(self, src, steps=3):
        mem = self.enc(src.to("cuda:0")).mean(1, keepdim=True)
        tok = torch.zeros(src.shape[0], 1, dtype=torch.long, device="cuda:0")
        h = None
        for _ in range(steps):
            x = self.enc(tok).to("cuda:1")
            o, h = self.dec(x + mem, h)  # <- MP001
            tok = self.out(o).argmax(-1).to("cuda:0")
        return tok


m = EncDec()
src = torch.randint(0, 100, (2, 5))
m(src, src).sum().backward()
print(m.generate(src))
