# Held-out style case written from real-cases.tsv family (correct code); markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.rnn = nn.LSTM(16, 32, batch_first=True)

    def forward(self, x):
        h0 = torch.zeros(1, x.shape[0], 32, device=self.emb.weight.device)
        c0 = torch.zeros_like(h0)
        out, (h, c) = self.rnn(self.emb(x), (h0, c0))
        return out, (h, c)


class Dec(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(32, 32, batch_first=True)
        self.out = nn.Linear(32, 50)

    def forward(self, y, h):
        o, h = self.rnn(y, h)
        return self.out(o), h


enc, dec = Enc().to("cuda:0"), Dec().to("cuda:1")
opt = torch.optim.Adam(list(enc.parameters()) + list(dec.parameters()))
crit = nn.CrossEntropyLoss().to("cuda:1")
for _ in range(2):
    src = torch.randint(0, 50, (3, 7), device="cuda:0")
    tgt = torch.randint(0, 50, (3, 7))
    out, (h, c) = enc(src)
    logits, _ = dec(out.to("cuda:1"), h.to("cuda:1"))
    loss = crit(logits.reshape(-1, 50), tgt.view(-1).cuda(1))
    loss.backward()
    opt.step()
    opt.zero_grad()
