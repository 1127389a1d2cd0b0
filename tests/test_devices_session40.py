"""Session 40: stage-building loops over the GPUs that set each pass's device. A bare `.cuda()` made before the
pass's `set_device(gpu)` lands one GPU behind (MP004 at the placement); a module placed with a bare `.cuda()`
right after a loop that set each device before placing its stage joins the last stage, as the idiom means."""

from __future__ import annotations

from lint_helpers import lines

STAGES = """
import argparse
import torch
import torch.nn as nn


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage-gpus", type=int, nargs="+", default=[0, 1])
    return ap.parse_args()


class Net(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.stages = nn.ModuleList()
        for i, gpu in enumerate(args.stage_gpus):
            PASS
        self.head = nn.Linear(16, 4).cuda()  # <- head

    def forward(self, x):
        for stage in self.stages:
            x = stage(x.to(next(stage.parameters()).device))
        return self.head(x.to(self.head.weight.device))


model = Net(parse_args())
print(model(torch.randn(2, 16)))
"""

SET_THEN_PLACE = "torch.cuda.set_device(gpu)\n            self.stages.append(nn.Linear(16, 16).cuda())"
PLACE_THEN_SET = "self.stages.append(nn.Linear(16, 16).cuda())  # <- early\n            torch.cuda.set_device(gpu)"


def _line(src: str, mark: str) -> int:
    return next(i for i, text in enumerate(src.splitlines(), 1) if f"# <- {mark}" in text)


def test_a_module_placed_bare_after_a_set_then_place_loop_joins_the_last_stage():
    src = STAGES.replace("PASS", SET_THEN_PLACE)
    assert lines(src, "MP004") == []


def test_a_bare_cuda_before_the_pass_sets_its_device_is_one_gpu_behind():
    src = STAGES.replace("PASS", PLACE_THEN_SET)
    got = lines(src, "MP004")
    assert _line(src, "early") in got


def test_a_set_device_that_is_not_the_loop_variable_is_no_pass_device():
    # The pass places on its own GPU, then restores GPU 0: nothing is placed one GPU behind (and the head after
    # the loop lands on cuda:0, where a process that never called set_device puts it too).
    src = STAGES.replace(
        "PASS", "self.stages.append(nn.Linear(16, 16).cuda(gpu))\n            torch.cuda.set_device(0)"
    )
    assert lines(src, "MP004") == []


def test_a_loop_that_sets_the_device_without_placing_after_it_still_leaves_the_later_bare_cuda_reported():
    # set_device(gpu) with nothing placed index-less right after it: the head's bare `.cuda()` lands on the
    # last GPU of a loop that built nothing there the same way, as before.
    src = STAGES.replace(
        "PASS", "torch.cuda.set_device(gpu)\n            self.stages.append(nn.Linear(16, 16).to(f'cuda:{gpu}'))"
    )
    assert lines(src, "MP004") == [_line(src, "head")]


def test_a_triple_quoted_json_literal_counts_for_the_pre_filter():
    # Round 27's t09: a run configuration as a multi-line JSON string, read with json.loads.
    from mpcheck.lint.livetext import LiveText

    assert LiveText('RUN = json.loads("""{\n  "device": "cuda:0",\n  "lr": 0.5\n}""")\n').has("cuda")
    assert LiveText("RUN = json.loads('''[\n  \"cuda:0\"\n]''')\n").has("cuda")
    assert not LiveText('def f():\n    """Put the {cuda} stages first."""\n').has("cuda")


UPDATE_BN = """
import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, update_bn
from torch.utils.data import DataLoader, TensorDataset

DEVICES = ["cuda:0", "cuda:1"]


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).to(DEVICES[0])
        self.head = nn.Sequential(nn.Flatten(), nn.LazyLinear(10)).to(DEVICES[1])

    def forward(self, x):
        return self.head(self.trunk(x).to(DEVICES[1]))


loader = DataLoader(TensorDataset(torch.randn(16, 3, 8, 8), torch.randint(0, 10, (16,))), batch_size=4)
swa = AveragedModel(Split())
update_bn(loader, swa, device=WHERE)  # <- call
"""


def test_update_bn_moves_each_batch_to_its_device_argument():
    # Round 27's t01: the output GPU given where the trunk's was meant.
    bad = UPDATE_BN.replace("WHERE", "DEVICES[-1]")
    assert lines(bad, "MP001") == [_line(bad, "call")]
    assert lines(UPDATE_BN.replace("WHERE", "DEVICES[0]"), "MP001") == []
    assert lines(UPDATE_BN.replace("WHERE", "torch.device('cuda', 0)"), "MP001") == []
