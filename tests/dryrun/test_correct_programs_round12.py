"""Correct programs of a twelfth round (written in many styles and run under `mpcheck dryrun`, each also
run on a real GPU with every stage on cuda:0) that once gave a false finding or stopped the dry run, each
beside the bug of its family that must still be reported."""

from dryrun_helpers import codes_at

# torch.jit.script / trace: once an AttributeError in mpcheck's hooks (torch.jit's modules keep their
# buffers in no dict), then a trace check that compared the real tensors' devices with the labelled ones.
SCRIPTED = """
import torch
import torch.nn as nn

enc = torch.jit.script(nn.Sequential(nn.Linear(4, 8), nn.ReLU()).to("cuda:0"))
head = torch.jit.trace(nn.Linear(8, 3).to("cuda:1"), torch.randn(2, 8, device="cuda:1"))
y = torch.randint(0, 3, (5,), device="cuda:1")
loss = nn.functional.cross_entropy(head(enc(torch.randn(5, 4, device="cuda:0")).to(HOP)), y)  # <- loss
loss.backward()
"""


def test_torchscript_stages_run_as_their_eager_code(script, dryrun_cli):
    status, report, err = dryrun_cli(script(SCRIPTED.replace("HOP", '"cuda:1"')), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
    assert any("torch.jit.script" in str(limit) for limit in report["limits"])
    s = script(SCRIPTED.replace("HOP", '"cuda:0"'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1 and ("MP001", s.line("loss")) in codes_at(report)


# Tensors built from values: w.new_tensor(data) copies onto w's device; torch.tensor of 0-dim tensors on
# two GPUs is a CPU tensor of their values; result_type / is_same_size read metadata only.
FROM_VALUES = """
import torch
import torch.nn as nn

head = nn.Linear(8, 4).to("cuda:1")
w = head.weight.new_tensor(1.0 / torch.tensor([50.0, 20.0, 20.0, 10.0]))
l_a, l_b = torch.tensor(1.0, device="cuda:0"), torch.tensor(2.0, device="cuda:1")
history = torch.zeros(2)
history += torch.tensor([l_a, l_b])
kind = torch.result_type(w, torch.ones(2)), torch.is_same_size(w, torch.ones(4))
bad = w + torch.ones(4)  # <- bad
"""


def test_tensors_built_from_values_on_other_devices_are_legal(script, dryrun_cli):
    s = script(FROM_VALUES)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("bad"))], report["findings"]


# An EMA teacher updated through `.data` (an alias with a version counter of its own), and random masks
# drawn from constant probabilities each step: their data changes, so their copies are no repeats.
CHANGING = """
import torch
import torch.nn as nn

online = nn.Linear(256, 64).to("cuda:0")
target = nn.Linear(256, 64).to("cuda:1")
opt = torch.optim.SGD(online.parameters(), lr=0.1)
for step in range(3):
    keep = torch.bernoulli(torch.full((4096, 4), 0.9))
    kept = keep.to("cuda:0") * online.weight[:1, :4]  # used whole where it arrived (only reduced: MP016)
    loss = online(torch.randn(8, 256, device="cuda:0")).pow(2).mean() + kept.mean() * 0
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        for pt, po in zip(target.parameters(), online.parameters()):
            pt.mul_(0.99).add_(po.data.to(pt.device), alpha=0.01)
        frozen = REPEAT
"""


def test_data_that_changes_unseen_by_its_version_counter_is_no_repeat(script, dryrun_cli):
    status, report, err = dryrun_cli(script(CHANGING.replace("REPEAT", "None")), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), report["findings"]
    s = script(CHANGING.replace("REPEAT", 'torch.ones(4096, 64).to("cuda:1")  # <- repeat'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP011", s.line("repeat")) in codes_at(report)


# Dense features both towers need (DLRM): sent to cuda:0, then on to cuda:1, and read on cuda:0 after.
BOTH_TOWERS = """
import torch
import torch.nn as nn

a = nn.Linear(256, 8).to("cuda:0")
b = nn.Linear(256, 8).to("cuda:1")
for step in range(2):
    x0 = torch.randn(128, 256).to("cuda:0")
    x1 = x0.to("cuda:1")  # <- detour
    out = USE + b(x1).to("cuda:0")
"""


def test_a_copy_read_where_it_landed_after_a_second_copy_is_no_detour(script, dryrun_cli):
    status, report, err = dryrun_cli(script(BOTH_TOWERS.replace("USE", "a(x0)")), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), report["findings"]
    s = script(BOTH_TOWERS.replace("USE", "0"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP005", s.line("detour")) in codes_at(report)


# Predictions moved to the targets' GPU that a refiner there reads too: the move is needed (no MP014).
REFINED = """
import torch
import torch.nn as nn
import torch.nn.functional as F

head = nn.Conv2d(8, 21, 1).to("cuda:1")
refine = nn.Conv2d(21, 21, 3, padding=1).to("cuda:0")
z = torch.randn(2, 8, 64, 64, device="cuda:1")
y = torch.randint(0, 21, (2, 64, 64), device="cuda:0")
coarse0 = head(z).to("cuda:0")  # <- move
REFINE
loss = F.cross_entropy(fine, y) + F.cross_entropy(coarse0, y)
"""


def test_predictions_a_layer_on_the_targets_gpu_reads_too_are_no_mp014(script, dryrun_cli):
    status, report, err = dryrun_cli(script(REFINED.replace("REFINE", "fine = refine(coarse0)")), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), report["findings"]
    s = script(REFINED.replace("REFINE", "fine = coarse0"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP014", s.line("move")) in codes_at(report)


# BatchNorm's running statistics, changed by its kernel in every training forward without a version bump,
# copied to another GPU each step (a monitor): no repeat of unchanged data. A plain buffer still is.
RUNNING_STATS = """
import torch
import torch.nn as nn

bn = nn.BatchNorm1d(20000).to("cuda:0")
bn.register_buffer("fixed", torch.ones(20000, device="cuda:0"))
for step in range(3):
    bn(torch.randn(8, 20000, device="cuda:0") * (step + 1))
    mean1 = bn.running_mean.to("cuda:1")
    MOVE
"""


def test_running_statistics_copied_each_step_are_no_repeat(script, dryrun_cli):
    status, report, err = dryrun_cli(script(RUNNING_STATS.replace("MOVE", "pass")), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), report["findings"]
    s = script(RUNNING_STATS.replace("MOVE", 'fixed1 = bn.fixed.to("cuda:1")  # <- repeat'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP011", s.line("repeat")) in codes_at(report)
