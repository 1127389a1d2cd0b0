"""MP005 at run time: a round trip that only starts a loop (a beam's sequences copied to the last stage's GPU,
sent back to the first stage by the model's forward on the first step, then grown on the last stage's GPU so
that the same line moves new data on every later step) is taken back; a round trip made on every pass, or
once with nothing after it, stays."""

from dryrun_helpers import codes_at

BEAMS = """
import torch
import torch.nn as nn


class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 8).to("cuda:0")
        self.head = nn.Linear(8, 100).to("cuda:1")

    def forward(self, ids):
        ids = ids.to("cuda:0")  # <- back
        return self.head(self.embed(ids).to("cuda:1"))[:, -1]


model = TwoStage()
prompt = torch.randint(1, 100, (2, 5), device="cuda:0")
seqs = prompt.repeat_interleave(3, dim=0).to("cuda:1")
for _ in range(STEPS):
    token = model(seqs).argmax(-1, keepdim=True)
    seqs = GROW
"""


def test_a_copy_that_starts_a_growing_loop_is_no_round_trip(script, dryrun_cli):
    s = script(BEAMS.replace("STEPS", "4").replace("GROW", "torch.cat([seqs, token], dim=1)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, [])


def test_a_round_trip_on_every_pass_or_on_one_pass_alone_is_reported(script, dryrun_cli):
    for steps, grow in (("4", "seqs"), ("1", "torch.cat([seqs, token], dim=1)")):
        s = script(BEAMS.replace("STEPS", steps).replace("GROW", grow))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert ("MP005", s.line("back")) in codes_at(report), (steps, grow)


# Session 44 (precision round 32, c12): after training, a tied copy brought back once to check it against its
# original costs once; the same trip inside the training loop is reported at the next step.
TIED = """
import torch
import torch.nn as nn

enc = nn.Embedding(1000, 64).to("cuda:0")
mirror = torch.empty(1000, 64, device="cuda:1")
opt = torch.optim.SGD(enc.parameters(), 0.1)
for step in range(STEPS):
    loss = enc(torch.randint(0, 1000, (32,), device="cuda:0")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    mirror.copy_(enc.weight.detach())
    INSIDE
same = torch.equal(mirror.to("cuda:0"), enc.weight)  # <- check
"""


def test_a_round_trip_once_after_training_is_silent_and_one_per_step_is_reported(script, dryrun_cli):
    s = script(TIED.replace("STEPS", "3").replace("INSIDE", "pass"), name="tied_end.py")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
    inside = 'assert torch.equal(mirror.to("cuda:0"), enc.weight.detach())  # <- inside'
    s = script(TIED.replace("STEPS", "3").replace("INSIDE", inside), name="tied_steps.py")
    _, report, _ = dryrun_cli(s, "--gpus", "2")
    assert ("MP005", s.line("inside")) in codes_at(report), codes_at(report)
