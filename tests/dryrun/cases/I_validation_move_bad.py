# Held-out style case written from real-cases.tsv family I; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(10, 20).to("cuda:0")
        self.b = nn.Linear(20, 3).to("cuda:1")

    def forward(self, x):
        return self.b(F.relu(self.a(x)).to("cuda:1"))


def train(model, batches):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in batches:
        out = model(x.to("cuda:0"))
        loss = F.cross_entropy(out, y.to("cuda:1"))
        loss.backward()
        opt.step()


@torch.no_grad()
def validate(model, batches):
    correct = 0
    for x, y in batches:
        out = model(x)  # <- MP001
        correct += (out.argmax(1).cpu() == y).sum().item()
    return correct


m = Split()
data = [(torch.randn(4, 10), torch.randint(0, 3, (4,))) for _ in range(3)]
train(m, data)
print(validate(m, data))
