# Held-out style case written from real-cases.tsv family (correct code); markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)

    def forward(self, x, cache):
        q, k, v = self.qkv(x).chunk(3, -1)
        if cache is not None:
            k = torch.cat([cache[0], k], 1)
            v = torch.cat([cache[1], v], 1)
        a = torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, -1) @ v
        return x + self.o(a), (k, v)


class LM(nn.Module):
    def __init__(self, d=32, n=4, vocab=64):
        super().__init__()
        self.devs = [f"cuda:{i * torch.cuda.device_count() // n}" for i in range(n)]
        self.emb = nn.Embedding(vocab, d).to(self.devs[0])
        self.layers = nn.ModuleList(Layer(d).to(dev) for dev in self.devs)
        self.head = nn.Linear(d, vocab).to(self.devs[-1])

    def forward(self, ids, caches=None):
        h = self.emb(ids.to(self.devs[0]))
        new = []
        for i, layer in enumerate(self.layers):
            h, c = layer(h.to(self.devs[i]), None if caches is None else caches[i])
            new.append(c)
        return self.head(h), new


@torch.inference_mode()
def generate(model, ids, n=5):
    logits, caches = model(ids)
    out = [ids]
    for _ in range(n):
        nxt = logits[:, -1:].argmax(-1)
        out.append(nxt.to(ids.device))
        logits, caches = model(nxt, caches)
    return torch.cat(out, 1)


m = LM().eval()
print(generate(m, torch.randint(0, 64, (2, 4))).shape)
