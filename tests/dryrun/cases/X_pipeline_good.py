# Held-out style case written from real-cases.tsv family (correct code); markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Stage(nn.Module):
    def __init__(self, d, dev):
        super().__init__()
        self.dev = torch.device(dev)
        self.net = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d)).to(self.dev)

    def forward(self, x):
        return self.net(x.to(self.dev, non_blocking=True))


class Model(nn.Module):
    def __init__(self, d=64, vocab=1000):
        super().__init__()
        n = torch.cuda.device_count()
        self.embed = nn.Embedding(vocab, d).to("cuda:0")
        self.stages = nn.ModuleList(Stage(d, f"cuda:{i}") for i in range(n))
        self.head = nn.Linear(d, vocab).to(f"cuda:{n - 1}")

    def forward(self, ids):
        h = self.embed(ids.to("cuda:0"))
        for s in self.stages:
            h = s(h)
        return self.head(h)


model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
scaler = torch.amp.GradScaler("cuda")
for step in range(3):
    ids = torch.randint(0, 1000, (4, 16)).pin_memory()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(ids)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), ids.flatten().to(logits.device, non_blocking=True))
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
model.eval()
with torch.no_grad():
    out = model(torch.randint(0, 1000, (2, 8)))
    print(out.argmax(-1).cpu())
