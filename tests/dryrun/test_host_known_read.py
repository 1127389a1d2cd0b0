"""MP020 at run time for a number the host already has (checks/host_known.py): a count computed on the GPU only
from labels copied there, read back with `int()` at every step while the host copy is still there, is reported at
the read; the count taken from the host copy is clean, and so are a value that mixes in the model's output, a batch
whose host copy was dropped by the move, and a read made once."""

OHEM = """
import torch
import torch.nn as nn

IGNORE = -1
net = nn.Linear(16, 5).to("cuda:1")
for step in range(STEPS):
    x = torch.randn(64, 16)
    labels = torch.randint(-1, 5, (64,))
    logits = net(x.to("cuda:1"))
    labels_dev = labels.to("cuda:1")
    n_valid = COUNT  # <- read
    loss = nn.functional.cross_entropy(logits, labels_dev.clamp(min=0), reduction="none").topk(max(n_valid, 1))[0]
    loss.mean().backward()
print("done")
"""


def _run(script, dryrun_cli, count, steps=3, text=OHEM):
    s = script(text.replace("COUNT", count).replace("STEPS", str(steps)))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    return s, report["findings"]


def test_a_count_of_uploaded_labels_read_every_step_is_mp020_at_the_read(script, dryrun_cli):
    for count in ("int((labels_dev != IGNORE).sum())", "(labels_dev >= 0).sum().item()"):
        s, findings = _run(script, dryrun_cli, count)
        (f,) = findings
        assert (f["code"], f["line"], f["extra"]["scope"]) == ("MP020", s.line("read"), "host_known")
        assert f["devices"] == ["cuda:1", "cpu"] and f"train.py:{s.line('read') - 1}" in f["message"]


def test_the_host_count_a_mixed_value_a_dropped_host_copy_or_one_read_are_clean(script, dryrun_cli):
    assert _run(script, dryrun_cli, "int((labels != IGNORE).sum())")[1] == []
    assert _run(script, dryrun_cli, "int((logits.argmax(1) == labels_dev).sum())")[1] == []
    dropped = OHEM.replace("labels_dev = labels.to", "labels_dev = labels = labels.to")
    assert _run(script, dryrun_cli, "int((labels_dev != IGNORE).sum())", text=dropped)[1] == []
    assert _run(script, dryrun_cli, "int((labels_dev != IGNORE).sum())", steps=1)[1] == []


SCHEDULE = """
import math
import torch
import torch.nn as nn


class WarmupCosine:
    def __init__(self, optimizer, warmup, total, device="cpu"):
        self.opt, self.warmup, self.total = optimizer, warmup, total
        self.base = [g["lr"] for g in optimizer.param_groups]
        self.t = torch.zeros((), device=device)

    def step(self):
        self.t += 1
        cosine = 0.5 * (1 + torch.cos(math.pi * (self.t - self.warmup) / (self.total - self.warmup)))
        scale = torch.where(self.t < self.warmup, self.t / self.warmup, cosine)
        for group, base in zip(self.opt.param_groups, self.base):
            group["lr"] = base * float(scale)  # <- read


net = nn.Linear(8, 8).to("cuda:1")
opt = torch.optim.SGD(net.parameters(), lr=0.1)
sched = WarmupCosine(opt, 2, 6DEVICE)
for step in range(4):
    net(torch.randn(4, 8, device="cuda:1")).sum().backward()
    opt.step()
    sched.step()
print("done")
"""


def test_a_schedule_counter_kept_on_the_gpu_and_read_every_step_is_mp020(script, dryrun_cli):
    # Round 39's t24: a step counter made by `torch.zeros((), device=...)` and stepped in place is made of constants
    # and numbers alone; reading the scale it gives at every step waits for the GPU for nothing the host lacks.
    s = script(SCHEDULE.replace("DEVICE", ', device="cuda:1"'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = report["findings"]
    assert (f["code"], f["line"], f["extra"]["scope"]) == ("MP020", s.line("read"), "const")
    status, report, err = dryrun_cli(script(SCHEDULE.replace("DEVICE", "")), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
