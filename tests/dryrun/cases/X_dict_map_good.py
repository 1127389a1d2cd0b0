# Held-out style case written from real-cases.tsv family (correct code); markers: what the dry run must report (code at line), nothing else.
import torch
import torch.nn as nn

DEVICE_MAP = {"embed": "cuda:0", "encoder": "cuda:0", "decoder": "cuda:1", "lm_head": "cuda:1"}


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(300, 48)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(48, 4, 96, batch_first=True), 2)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(48, 4, 96, batch_first=True), 2)
        self.lm_head = nn.Linear(48, 300)
        for name, dev in DEVICE_MAP.items():
            getattr(self, name).to(dev)

    def forward(self, src, tgt):
        mem = self.encoder(self.embed(src.to("cuda:0")))
        dec_in = self.embed(tgt.to("cuda:0")).to("cuda:1")
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device="cuda:1")
        out = self.decoder(dec_in, mem.to("cuda:1"), tgt_mask=causal)
        return self.lm_head(out)


model = Seq2Seq()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(2):
    src, tgt = torch.randint(0, 300, (2, 10)), torch.randint(0, 300, (2, 7))
    logits = model(src, tgt)
    loss = nn.functional.cross_entropy(logits.transpose(1, 2), tgt.to("cuda:1"))
    loss.backward()
    opt.step()
    opt.zero_grad()
