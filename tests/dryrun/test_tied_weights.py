"""A module whose weight is tied to another module's (one Parameter object) and whose partner was placed
on another GPU: the mismatch at its input names the tie, which explains a device its placement never
asked for, and the fix is to keep the tied modules together. Without a tie, the message says nothing of one."""

from dryrun_helpers import codes_at

LM = """
import torch
import torch.nn as nn

class TinyLM(nn.Module):
    def __init__(self, tie):
        super().__init__()
        self.embed = nn.Embedding(32, 8)
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 32, bias=False)
        if tie:
            self.head.weight = self.embed.weight
    def forward(self, ids):
        h = self.body(self.embed(ids))  # <- embed
        return self.head(h.to("cuda:1"))

model = TinyLM(tie=TIE)
model.embed.to("cuda:0"); model.body.to("cuda:0")
model.head.to("cuda:1")   # with the tie: the shared weight moves to cuda:1, under embed too
out = model(torch.randint(0, 32, (2, 5), device="cuda:0"))  # <- call
"""


def test_an_input_mismatch_caused_by_a_tied_weight_names_the_partner(script, dryrun_cli):
    s = script(LM.replace("TIE", "True"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert [c for c, _ in codes_at(report)] == ["MP001"]
    f = report["findings"][0]
    assert "its `weight` is also `model.head.weight` (tied weights" in f["message"]
    assert "keep tied weights together" in f["suggestion"]
    assert set(f["devices"]) == {"cuda:0", "cuda:1"}


def test_without_a_tie_the_placement_is_right_and_nothing_is_said(script, dryrun_cli):
    s = script(LM.replace("TIE", "False"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0 and report["findings"] == [], err
