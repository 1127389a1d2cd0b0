"""A small language model split by hand over two GPUs, with the mistakes that
mpcheck finds (run `mpcheck examples/`). Each one is a pattern from a real bug
report; the comment above it says what is wrong."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 8, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        h = self.norm(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(x)


class SplitLM(nn.Module):
    """Embedding and the first half of the blocks on cuda:0, the rest and the head on cuda:1."""

    def __init__(self, vocab=32000, dim=512, depth=8, max_len=1024):
        super().__init__()
        self.devices = ["cuda:0", "cuda:1"]
        half = depth // 2
        self.embed = nn.Embedding(vocab, dim).to(self.devices[0])
        self.blocks = nn.ModuleList(
            [Block(dim).to(self.devices[0] if i < half else self.devices[1]) for i in range(depth)]
        )
        self.head = nn.Linear(dim, vocab).to(self.devices[1])
        self.register_buffer("causal", torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), 1))

    def forward(self, ids, labels=None):
        ids = ids.to(self.devices[0])
        n = ids.shape[1]
        # The mask is copied from the CPU on every call (MP011); it is built on
        # cuda:0 and never follows the activations to cuda:1 (MP001).
        mask = self.causal[:n, :n].to(self.devices[0])
        h = self.embed(ids)
        for i, block in enumerate(self.blocks):
            if i == len(self.blocks) // 2:
                h = h.to(self.devices[1])
            h = block(h, mask)
        logits = self.head(h)
        if labels is None:
            return logits
        # The labels stay on the input's device while the logits are on cuda:1 (MP008).
        labels = labels.to(ids.device)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


if __name__ == "__main__":
    # Tiny sizes and random tokens, three steps (the mask is copied on every call): run it
    # on two GPUs, or anywhere with `mpcheck dryrun --gpus 2 examples/split_model.py`.
    vocab, seq = 64, 16
    model = SplitLM(vocab=vocab, dim=32, depth=2, max_len=seq)
    for _ in range(3):
        ids, labels = torch.randint(vocab, (2, seq)), torch.randint(vocab, (2, seq))
        model(ids, labels).backward()
