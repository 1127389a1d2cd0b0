"""MP007 at run time for a split undone before the model ever ran: a device map applied with its root entry last
(round 34's t19: the parts placed on cuda:1 pulled back to cuda:0 by `model.to("cuda:0")`), and a meta model
materialised stage by stage, then its root with `to_empty` recursing (round 34's t26). Placing the root first, or
the root's own tensors only (`recurse=False`), is clean; so is a model moved whole from one GPU to another."""

from dryrun_helpers import codes_at

MAPPED = """
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 64))
ORDER
for _ in range(2):
    x = torch.randn(8, 64)
    for layer in model:
        x = layer(x.to(next(layer.parameters()).device))
    x.sum().backward()
"""

ROOT_LAST = 'model[1].to("cuda:1")\nmodel[2].to("cuda:1")\nmodel.to("cuda:0")  # <- root'
ROOT_FIRST = 'model.to("cuda:0")\nmodel[1].to("cuda:1")\nmodel[2].to("cuda:1")'
MOVED_WHOLE = 'model.to("cuda:1")\nmodel.to("cuda:0")'


def test_a_device_map_applied_with_its_root_entry_last_undoes_the_split(script, dryrun_cli):
    s = script(MAPPED.replace("ORDER", ROOT_LAST))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err  # (MP007 is an error)
    (f,) = [f for f in report["findings"] if f["code"] == "MP007"]
    assert f["line"] == s.line("root") and f["devices"] == ["cuda:1", "cuda:0"]
    assert "`2`" in f["message"] and "was being split" in f["message"]


def test_the_root_first_then_its_parts_or_a_whole_model_moved_are_clean(script, dryrun_cli):
    for order in (ROOT_FIRST, MOVED_WHOLE):
        status, report, err = dryrun_cli(script(MAPPED.replace("ORDER", order)), "--gpus", "2")
        assert status == 0, err
        assert "MP007" not in [c for c, _ in codes_at(report)], report["findings"]


META = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Parameter(torch.empty(100, 64))
        self.stages = nn.ModuleList(nn.Linear(64, 64) for _ in range(2))

    def forward(self, ids):
        h = nn.functional.embedding(ids.to(self.wte.device), self.wte)
        for stage in self.stages:
            h = stage(h.to(stage.weight.device))
        return h


with torch.device("meta"):
    model = Net()
for stage, dev in zip(model.stages, ["cuda:0", "cuda:1"]):
    stage.to_empty(device=dev)
model.to_empty(device="cuda:0"ROOT)  # <- root
with torch.no_grad():
    for p in model.parameters():
        p.normal_()
model(torch.randint(0, 100, (4, 8))).sum().backward()
"""


def test_to_empty_of_the_root_after_its_stages_collapses_the_split(script, dryrun_cli):
    s = script(META.replace("ROOT", ""))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    (f,) = [f for f in report["findings"] if f["code"] == "MP007"]
    assert f["line"] == s.line("root") and "meta" not in f["message"]


def test_to_empty_of_the_roots_own_tensors_keeps_the_split(script, dryrun_cli):
    status, report, err = dryrun_cli(script(META.replace("ROOT", ", recurse=False")), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
