# Held-out style case written from real-cases.tsv family F; markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn
import torch.nn.functional as F


class TwoGPU(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 64), nn.ReLU()).to("cuda:0")
        self.fc = nn.Linear(64, 10).to("cuda:1")

    def forward(self, x):
        return self.fc(self.body(x).to("cuda:1"))


def train_step(model, opt, x, y, device):
    x, y = x.to(device), y.to(device)
    logits = model(x)
    loss = F.cross_entropy(logits, y)  # <- MP008
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


model = TwoGPU()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    train_step(model, opt, torch.randn(8, 20), torch.randint(0, 10, (8,)), torch.device("cuda:0"))
