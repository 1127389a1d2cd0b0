# Held-out style case written from real-cases.tsv family F; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(32, 32).to("cuda:0")
        self.head = nn.Linear(32, 5).to("cuda:1")

    @property
    def device(self):
        return next(self.parameters()).device

    def forward(self, x):
        return self.head(self.body(x.to(self.device)).to("cuda:1"))


def compute_loss(model, batch):
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits, y.to(model.device))  # <- MP008


net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(2):
    loss = compute_loss(net, (torch.randn(4, 32), torch.randint(0, 5, (4,))))
    loss.backward()
    opt.step()
