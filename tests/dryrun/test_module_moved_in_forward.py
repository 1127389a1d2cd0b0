"""MP011 for a module moved inside forward to whichever GPU asks for it (module_moves.py): its weights cross
on every call, reported once at the moving line. A move that changes nothing, a lazy placement made once,
and a module offloaded to the host and back stay silent."""

SHARED = """
import torch
import torch.nn as nn


class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(64, 64).to("cuda:0")
        self.a = nn.Linear(64, 64).to("cuda:0")
        self.b = nn.Linear(64, 64).to("cuda:1")

    def embed(self, x, device):
        {move}
        return self.shared(x.to(next(self.shared.parameters()).device)).to(device)

    def forward(self, x):
        h = self.a(self.embed(x, "cuda:0"))
        return self.b(h.to("cuda:1") + self.embed(x, "cuda:1"))


model = TwoStage()
for _ in range(3):
    model(torch.randn(4, 64)).sum().backward()
"""


def _run(script, dryrun_cli, move):
    s = script(SHARED.replace("{move}", move))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    return s, report


def test_a_module_moved_to_each_stages_gpu_in_forward_is_one_mp011_at_the_move(script, dryrun_cli):
    s, report = _run(script, dryrun_cli, "self.shared.to(device)  # <- move")
    (f,) = report["findings"]
    assert (f["code"], f["line"], f["devices"]) == ("MP011", s.line("move"), ["cuda:0", "cuda:1"])
    assert f["modules"] == ["model.shared"] and "16.2 KiB" in f["message"]
    assert f["extra"]["count"] >= 3  # every call after the first moves it twice


def test_a_move_to_where_it_is_or_to_the_host_and_back_is_silent(script, dryrun_cli):
    _, report = _run(script, dryrun_cli, 'self.shared.to("cuda:0")')
    assert report["findings"] == []
    _, report = _run(script, dryrun_cli, 'self.shared.to("cpu").to("cuda:0")  # offloaded between uses')
    assert report["findings"] == []


# An early-exit loop that calls each stage itself, outside any forward, and moves one shared exit head to
# the GPU of the stage it follows: between module calls, once the model has run, the weights still cross.
EARLY_EXIT = """
import torch
import torch.nn as nn

stages = [nn.Linear(64, 64).to("cuda:0"), nn.Linear(64, 64).to("cuda:1")]
head = nn.Linear(64, 1000).to("cuda:1")
placed = nn.Linear(64, 64)
placed.to("cuda:0")
placed.to("cuda:1")  # placement changed before any forward pass: silent
with torch.no_grad():
    for _ in range(3):
        h = torch.randn(4, 64)
        for s in stages:
            h = s(h.to(next(s.parameters()).device))
            MOVE
            head(h).softmax(-1)
"""


def test_a_head_moved_between_stage_calls_once_the_model_ran_is_mp011(script, dryrun_cli):
    s = script(EARLY_EXIT.replace("MOVE", "head.to(h.device)  # <- move"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP011", s.line("move"))]
    fixed = script(EARLY_EXIT.replace("MOVE", "h = h.to('cuda:1')"))
    status, report, err = dryrun_cli(fixed, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
