"""The training script for examples/split_model.py, with the mistakes people make
around a split model (run `mpcheck examples/`)."""

import torch
import torch.nn as nn

from split_model import SplitLM


def main(loader, steps=100):
    model = SplitLM()
    if torch.cuda.device_count() > 1:
        # DataParallel cannot replicate a model whose stages sit on two GPUs (MP002).
        model = nn.DataParallel(model)
    # Moves every stage onto one GPU and undoes the split (MP007).
    model = model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step, (ids, labels) in enumerate(loader):
        loss = model(ids, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == steps:
            break
