# Held-out style case written from real-cases.tsv family B; markers: what the dry run must report (code at line), nothing else.
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ.setdefault("MASTER_ADDR", "localhost")
os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1)


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16).to("cuda:0")
        self.b = nn.Linear(16, 4).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


model = DDP(Split(), device_ids=[0])  # <- MP002
out = model(torch.randn(8, 16))
out.sum().backward()
dist.destroy_process_group()
