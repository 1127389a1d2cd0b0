"""A deep copy of a split model moved whole onto one GPU (an EMA, a teacher, a snapshot) undoes no split:
the model being trained keeps its placement, so it is no MP007 (capture/copying.py notes the copies).
The split model itself moved whole still is."""

import copy
import gc
import weakref

import torch.nn as nn
from dryrun_helpers import codes_at

PROGRAM = """
import copy
import torch
import torch.nn as nn

class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 2).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))

model = Split()
MOVE  # <- move
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters()):
            e.mul_(0.9).add_(p.detach().to(e.device), alpha=0.1)
"""


def test_a_deep_copy_moved_whole_is_no_collapse(script, dryrun_cli):
    s = script(PROGRAM.replace("MOVE", 'ema = copy.deepcopy(model).to("cuda:1")'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_the_split_model_moved_whole_still_is(script, dryrun_cli):
    s = script(PROGRAM.replace("MOVE", 'ema = copy.deepcopy(model); model.to("cuda:1")'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert ("MP007", s.line("move")) in codes_at(report), codes_at(report)


def test_a_copy_of_the_copy_and_a_shallow_copy_are_told_apart(script, dryrun_cli):
    # copy.copy shares the parameters: moving it moves the split model's own, a collapse.
    s = script(PROGRAM.replace("MOVE", 'ema = copy.copy(model).to("cuda:1")'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert ("MP007", s.line("move")) in codes_at(report), codes_at(report)


def test_the_note_keeps_no_parameter_alive():
    from mpcheck.runtime.capture import copying

    class Holder:  # the one attribute of a Checker that copying.py writes
        copied_params: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    undo = copying.install(Holder)  # type: ignore[arg-type]
    try:
        net = copy.deepcopy(nn.Linear(4, 4))
        assert len(Holder.copied_params) == 2
        del net
        gc.collect()
        assert len(Holder.copied_params) == 0
    finally:
        undo()
    assert nn.Parameter.__dict__["__deepcopy__"].__qualname__ == "Parameter.__deepcopy__"  # torch's own again
