"""MP011 at run time: the same unchanged data moved to the same device again, and big enough for the
repeat to cost more than a copy's launch (REPEAT_MIN_BYTES, rules/MP011-repeated-transfer.md)."""

import pytest
import torch
from dryrun_helpers import codes_at

from mpcheck.runtime.checks.thresholds import REPEAT_MIN_BYTES

BEAM_REORDER = """
import torch

devices = ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
layers = [torch.nn.Linear(16, 16, device=d) for d in devices]
cache = [torch.randn(8, 4, 16, device=d) for d in devices]      # one layer's keys per device
for step in range(3):                                           # generation steps
    with torch.no_grad():
        cache = [layer(p) for layer, p in zip(layers, cache)]   # the model's step
    beam_idx = torch.tensor([1, 0, 3, 2, 5, 4, 7, 6])           # a 64-byte index
    cache = [p.index_select(0, beam_idx.to(p.device)) for p in cache]  # <- reorder
"""

FAN_OUT = """
import torch

devices = ["cuda:0", "cuda:1"]
branches = [torch.nn.Linear(256, 8, device=d) for d in devices]
scale = torch.ones(1, 256)                                      # a tiny constant, fanned out each step
for step in range(3):
    x = torch.randn(128, 256)                                   # 128 KiB, a new batch each step
    outs = [b(x.to(d) * scale.to(d)) for b, d in zip(branches, devices)]  # <- fanout
    total = sum(o.to("cuda:0").sum() for o in outs)
"""


def test_tiny_index_moved_to_each_layers_device_is_not_a_finding(script, dryrun_cli):
    s = script(BEAM_REORDER)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_fan_out_to_several_devices_is_not_a_finding(script, dryrun_cli):
    s = script(FAN_OUT)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_the_threshold_is_configurable(script, dryrun_cli, monkeypatch):
    # 0 reports every repeat: the tiny copies above are repeats by the definition (the same
    # unchanged data to the same device again), only too small to warn about by default.
    monkeypatch.setenv("MPCHECK_REPEAT_MIN_BYTES", "0")
    s = script(BEAM_REORDER)
    _, report, _ = dryrun_cli(s, "--gpus", "2")
    assert set(codes_at(report)) == {("MP011", s.line("reorder"))}  # one finding per target device
    s = script(FAN_OUT, name="fanout.py")
    _, report, _ = dryrun_cli(s, "--gpus", "2")
    assert set(codes_at(report)) == {("MP011", s.line("fanout"))}  # `scale`, never the new batch


def test_a_large_constant_moved_again_is_reported(script, dryrun_cli):
    s = script(f"""
import torch

table = torch.randn({REPEAT_MIN_BYTES // 4})                     # exactly the threshold in float32
layer = torch.nn.Linear(4, 4, device="cuda:1")
for step in range(3):
    t = table.to("cuda:1")  # <- repeat
    layer(torch.randn(2, 4, device="cuda:1"))                   # the model's step
""")
    _, report, _ = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP011", s.line("repeat"))]
    (f,) = report["findings"]
    assert "the same unchanged data (a float32 tensor of shape (16384,)) was already moved to cuda:1" in f["message"]


# Each slice of a host data set is moved once per epoch: new data at every step, the same data only once
# per pass over the set (several optimizer steps later). Not a repeat "on every step"; a table moved at
# every iteration of a loop with two optimizers (a GAN's) is, although each iteration runs two steps.
EPOCHS = """
import torch
import torch.nn as nn

models = [nn.Linear(128, 10).to(f"cuda:{{i}}") for i in range(2)]
opts = [torch.optim.SGD(m.parameters(), 0.1) for m in models]
X = torch.randn(1024, 128)
X_val = torch.randn(512, 128)
table = torch.randn(256, 128)                          # 128 KiB, never changes
for epoch in range(2):
    for xb in {batches}:
        for m, o in zip(models, opts):
            dev = next(m.parameters()).device
            loss = m(xb.to(dev)).pow(2).mean()         # <- batch
            o.zero_grad()
            loss.backward()
            o.step()
    {every_iteration}
    with torch.no_grad():
        val = models[0](X_val.to("cuda:0")).sum()      # <- val
"""


def test_data_moved_once_per_epoch_is_not_a_repeat(script, dryrun_cli):
    for i, batches in enumerate(("(X[s:s + 256] for s in range(0, 1024, 256))", "X.split(256)")):
        s = script(EPOCHS.format(batches=batches, every_iteration=""), name=f"epochs{i}.py")
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert status == 0, err
        assert report["findings"] == [], batches


def test_a_table_moved_at_every_iteration_of_two_optimizers_is_reported(script, dryrun_cli):
    s = script(
        EPOCHS.format(batches="X.split(256)", every_iteration="pass").replace(
            "            loss = m(xb.to(dev)).pow(2).mean()         # <- batch",
            "            loss = (m(xb.to(dev)) + table.to(dev)[:1, :10]).pow(2).mean()  # <- table",
        )
    )
    _, report, _ = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) and set(codes_at(report)) == {("MP011", s.line("table"))}, codes_at(report)


# An EMA kept on another GPU copies every parameter there after each optimizer step: new data each time,
# since the optimizer has just updated it in place. Optimizers update with in-place ops over lists of
# tensors (foreach, fused: PyTorch's default on CUDA), which PyTorch bumps no version counter for under a
# dispatch mode such as the dry run's (runtime/capture/list_versions.py): the parameter looked unchanged.
EMA_ON_ANOTHER_GPU = """
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).to("cuda:1")
ema = [p.detach().clone().to("cuda:0") for p in model.parameters()]
opt = torch.optim.{optimizer}(model.parameters(), lr=1e-3, {how})
for step in range(3):
    loss = model(torch.randn(8, 256, device="cuda:1")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        for e, p in zip(ema, model.parameters()):
            e.lerp_(p.to(e.device), 0.01)  # <- ema
"""


@pytest.mark.parametrize("how", ["foreach=True", "fused=True", "foreach=False"])
@pytest.mark.parametrize("optimizer", ["AdamW", "SGD"])
def test_parameters_updated_by_the_optimizer_are_new_data_each_step(script, dryrun_cli, optimizer, how):
    s = script(EMA_ON_ANOTHER_GPU.format(optimizer=optimizer, how=how))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
    # ...and the same copy without the optimizer's update between the steps is a repeat.
    frozen = script(EMA_ON_ANOTHER_GPU.format(optimizer=optimizer, how=how).replace("opt.step()", "pass"), name="f.py")
    _, report, _ = dryrun_cli(frozen, "--gpus", "2")
    assert set(codes_at(report)) == {("MP011", frozen.line("ema"))}


def test_lists_written_in_place_bump_their_versions_under_a_dispatch_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    from mpcheck.runtime.capture.list_versions import call_keeping_versions

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return call_keeping_versions(func, args, kwargs or {})

    a, b = torch.zeros(3), torch.zeros(3)
    with Passing():
        torch._foreach_add_([a, b, a], 1.0)  # `a` listed twice: bumped twice, as without a mode
        a.add_(1.0)
        torch._foreach_add([a, b], 1.0)  # out of place: nothing written
    plain_a, plain_b = torch.zeros(3), torch.zeros(3)
    torch._foreach_add_([plain_a, plain_b, plain_a], 1.0)
    plain_a.add_(1.0)
    torch._foreach_add([plain_a, plain_b], 1.0)
    assert (a._version, b._version) == (plain_a._version, plain_b._version)
    assert torch.equal(a, plain_a) and torch.equal(b, plain_b)


# Session 44 (precision round 32, c08 and c02): a data set of two batches kept in a list and walked epoch after
# epoch by one optimizer; each batch is moved once per pass, two steps apart (the first two steps counted as one
# round, so it looked moved at every step). Then two models evaluated on the same validation batches, once each
# at the end: a copy once per batch.
TWO_BATCHES = """
import torch
import torch.nn as nn

model = nn.Linear(128, 10).to("cuda:0")
opt = torch.optim.SGD(model.parameters(), 0.1)
other = nn.Linear(128, 10).to("cuda:0")
train = [torch.randn(256, 128) for _ in range(2)]       # 128 KiB each
table = torch.randn(256, 128)
for epoch in range(3):
    for xb in train:
        loss = (model(xb.to("cuda:0")) + EXTRA).pow(2).mean()   # <- batch
        opt.zero_grad()
        loss.backward()
        opt.step()
val = [torch.randn(256, 128) for _ in range(2)]
with torch.no_grad():
    for m in (model, other):
        for xb in val:
            m(xb.to("cuda:0")).sum()                  # <- val
"""


def test_a_data_set_walked_epoch_after_epoch_and_evaluated_twice_is_not_a_repeat(script, dryrun_cli):
    s = script(TWO_BATCHES.replace("EXTRA", "0"), name="two_batches.py")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_a_table_moved_at_every_step_of_one_optimizer_is_reported(script, dryrun_cli):
    src = TWO_BATCHES.replace("EXTRA", 'table.to("cuda:0")[:1, :10]').replace("# <- batch", "# <- table")
    s = script(src, name="table_every_step.py")
    _, report, _ = dryrun_cli(s, "--gpus", "2")
    assert set(codes_at(report)) == {("MP011", s.line("table"))}, codes_at(report)


SCENES = """
import torch
import torch.nn as nn


def scene(gen, size=64):
    masks = torch.zeros(4, size, size, dtype=torch.long)
    ys, xs = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    for i in range(4):
        cy, cx = torch.randint(8, size - 8, (2,), generator=gen).tolist()  # drawn data, read as numbers
        masks[i][(ys - cy) ** 2 + (xs - cx) ** 2 < 64] = 1 + i
    WHOLE
    return masks


head = nn.Conv2d(1, 2, 1).to("cuda:1")
gen = torch.Generator().manual_seed(0)
for step in range(3):
    masks = scene(gen).to("cuda:1")  # <- move
    head(masks[:, None].float()).sum().backward()
"""


def test_masks_drawn_through_numbers_read_off_random_data_are_new_data_each_step(script, dryrun_cli):
    # (probe38 t16's good program) each row of the mask is written through a view (`masks[i][hit] = c`) at places
    # drawn at random and read as Python numbers; the last write to the whole tensor must not take it for a constant
    for whole in ("masks[:, :2] = 255", "pass"):
        s = script(SCENES.replace("WHOLE", whole))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert (status, report["findings"]) == (0, []), (whole, err)


def test_a_mask_built_from_constants_in_place_and_moved_every_step_is_still_reported(script, dryrun_cli):
    built = SCENES.replace(
        "        cy, cx = torch.randint(8, size - 8, (2,), generator=gen).tolist()  # drawn data, read as numbers\n", ""
    ).replace("(ys - cy) ** 2 + (xs - cx) ** 2 < 64", "(ys - 32) ** 2 + (xs - 32) ** 2 < 64 * (i + 1)")
    s = script(built.replace("WHOLE", "masks[:, :2] = 255").replace("masks[i][", "masks[i, "))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP011", s.line("move"))]
