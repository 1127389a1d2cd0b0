"""The training script for examples/split_model.py, with the mistakes people make
around a split model (run `mpcheck examples/`)."""

import torch
import torch.nn as nn

from split_model import SplitLM


def main(loader, steps=100, **sizes):
    model = SplitLM(**sizes)
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


if __name__ == "__main__":
    # Random tokens and tiny sizes, two steps: enough for the mistakes above to
    # happen. Run it on two GPUs, or anywhere with `mpcheck dryrun --gpus 2 examples/train.py`.
    vocab, seq = 64, 16
    batches = [
        (torch.randint(vocab, (2, seq), device="cuda:0"), torch.randint(vocab, (2, seq), device="cuda:0"))
        for _ in range(2)
    ]
    main(batches, steps=1, vocab=vocab, dim=32, depth=2, max_len=seq)
