"""MP005's GPU detour at run time: data copied from the host (or a GPU) to one GPU, unused there, then on to
another device unchanged is reported at the second copy (from 64 KiB); read on the first GPU, or copied
straight to the GPU that uses it, it is not."""

from dryrun_helpers import codes_at

PROGRAM = """
import torch
import torch.nn as nn

class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(64, 64).to("cuda:0")
        self.second = nn.Linear(64, 1).to("cuda:1")

    def forward(self, x):
        h = self.first(x.to("cuda:0"))  # <- second
        return self.second(h.to("cuda:1"))

model = TwoStage()
for _ in range(3):
    x, y = torch.randn(ROWS, 64), torch.randn(ROWS, 1)
    x, y = x.to(STAGED), y.to("cuda:1")  # <- first
    USE
    nn.functional.mse_loss(model(x), y).backward()
"""


def _run(script, dryrun_cli, rows=1024, staged='"cuda:1"', use="pass"):
    s = script(PROGRAM.replace("ROWS", str(rows)).replace("STAGED", staged).replace("USE", use))
    return s, dryrun_cli(s, "--gpus", "2")


def test_a_batch_staged_on_the_wrong_gpu_is_a_detour_at_its_second_copy(script, dryrun_cli):
    s, (status, report, err) = _run(script, dryrun_cli)
    assert status == 0, err  # a performance finding: the step runs
    assert codes_at(report) == [("MP005", s.line("second"))]
    f = report["findings"][0]
    assert f["message"].startswith(
        "GPU detour: this data (a float32 tensor of shape (1024, 64), 256 KiB) was copied cpu -> cuda:1"
    )
    assert f":{s.line('first')}, not used there, and goes on to cuda:0" in f["message"], f["message"]
    assert f["devices"] == ["cpu", "cuda:1", "cuda:0"]


def test_staged_on_the_gpu_that_uses_it_or_read_there_or_small_is_silent(script, dryrun_cli):
    for kwargs in ({"staged": '"cuda:0"'}, {"use": "x.sum()"}, {"rows": 16}):
        _, (status, report, err) = _run(script, dryrun_cli, **kwargs)
        assert status == 0, err
        assert report["findings"] == [], kwargs


PIPELINE = """
import torch
import torch.nn as nn

DEVICES = ["cuda:0", "cuda:1", "cuda:2"]

class Pipeline(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleList(nn.Linear(64, 64).to(d) for d in DEVICES)

    def forward(self, x, y):
        for dev, stage in zip(DEVICES, self.stages):
            x = stage(x.to(dev))
            y = y.to(dev)  # <- hop
        return nn.functional.mse_loss(x, y)

model = Pipeline()
for _ in range(2):
    model(torch.randn(1024, 64), torch.randn(1024, 64)).backward()
"""


def test_targets_carried_through_every_stage_are_a_detour_from_the_second_gpu_on(script, dryrun_cli):
    s = script(PIPELINE)
    status, report, err = dryrun_cli(s, "--gpus", "3")
    assert status == 0, err
    # One finding per detour: host -> cuda:0 -> cuda:1 (the first hop's), cuda:0 -> cuda:1 -> cuda:2.
    assert codes_at(report) == [("MP005", s.line("hop"))] * 2
    by_devices = {tuple(f["devices"]): f["message"] for f in report["findings"]}
    assert set(by_devices) == {("cpu", "cuda:0", "cuda:1"), ("cuda:0", "cuda:1", "cuda:2")}
    message = by_devices[("cuda:0", "cuda:1", "cuda:2")]
    assert message.startswith("GPU detour: this data (a float32 tensor of shape (1024, 64), 256 KiB) was copied ")
    assert "one cuda:0 -> cuda:2 copy would do" in message
    # Read on each stage (a residual target), no copy is wasted.
    read = PIPELINE.replace("y = y.to(dev)  # <- hop", "y = y.to(dev)\n            x = x + 0 * y.sum()")
    s = script(read)
    status, report, err = dryrun_cli(s, "--gpus", "3")
    assert status == 0, err
    assert [c for c, _ in codes_at(report) if c == "MP005"] == []


RELAY_SERVICE = """
import torch
import torch.nn as nn

class DeviceAware(nn.Module):
    # runs on its own GPU and hands the output back on the caller's device
    def __call__(self, x, *args, **kwargs):
        out = super().__call__(x.to(self.device), *args, **kwargs)  # <- on
        return out.to(x.device)  # <- back

class Stage(DeviceAware):
    def __init__(self, device):
        super().__init__()
        self.device = torch.device(device)
        self.lin = nn.Linear(256, 256).to(device)

    def forward(self, x):
        return self.lin(x)

stages = [Stage(d) for d in ("cuda:0", "cuda:1", "cuda:2")]
with torch.inference_mode():
    for _ in range(2):
        h = torch.randn(512, 256, device="cuda:0")
        for s in stages:
            h = s(h)
        WORK
"""


def test_inference_tensors_relayed_through_the_callers_gpu_are_a_detour(script, dryrun_cli):
    # Inference tensors have no version counter: an op that would change one in place is a use of it where it
    # arrived, so unread is unchanged (the stages' outputs come back to cuda:0 only to go on to the next GPU).
    s = script(RELAY_SERVICE.replace("WORK", "print(h.sum().item())"))
    status, report, err = dryrun_cli(s, "--gpus", "3")
    assert status == 0, err
    # (the last stage's output comes back to cuda:0 only to be summed: MP016, data only reduced after its move)
    assert codes_at(report) == [("MP005", s.line("on")), ("MP016", s.line("back"))]
    assert report["findings"][0]["devices"] == ["cuda:1", "cuda:0", "cuda:2"]
    # Used where it came back (a residual on the caller's GPU): each copy is needed.
    used = RELAY_SERVICE.replace("h = s(h)", "h = s(h) + h").replace("WORK", "print(h.sum().item())")
    status, report, err = dryrun_cli(script(used), "--gpus", "3")
    assert (status, report["findings"]) == (0, []), err


def test_a_copy_read_inside_a_call_the_signature_cache_runs_unchecked_is_no_detour(script, dryrun_cli):
    # counts are moved to the encoder's GPU and read there, then sent on to the decoder's: after the first step
    # the model runs unchecked, its reads unseen, and the second move must not look like a detour
    s = script(
        """
        import torch
        import torch.nn as nn

        class VAE(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(512, 64).to("cuda:0")
                self.dec = nn.Linear(32, 512).to("cuda:1")

            def forward(self, counts):
                counts = counts.to("cuda:0")
                mu, logvar = self.enc(torch.log1p(counts)).chunk(2, -1)
                rate = self.dec(mu.to("cuda:1")).softmax(-1) * counts.sum(1, keepdim=True).to("cuda:1")
                return ((rate - counts.to("cuda:1")) ** 2).mean() + logvar.pow(2).mean().to("cuda:1")

        model = VAE()
        for _ in range(4):
            model(torch.rand(64, 512)).backward()
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


RESIDENT = """
import torch
import torch.nn as nn

inputs = torch.randn(512, 64, 64)
stored = inputs.to(STORE)  # <- stored
first = nn.Linear(64, 64).to("cuda:0")
last = nn.Linear(64, 8).to("cuda:1")
for step in range(4):
    idx = torch.randperm(512)[:64]
    x = stored[idx].to("cuda:0")  # <- batch
    out = last(first(x).to("cuda:1")).sum()
    out.backward()
"""


def test_a_dataset_kept_on_the_gpu_that_only_hands_its_rows_on_is_a_detour(script, dryrun_cli):
    # Round 33's t23: a GPU-resident dataset cached on the output stage's GPU, each batch gathered there and
    # copied to the input stage's
    s = script(RESIDENT.replace("STORE", '"cuda:1"'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = [f for f in report["findings"] if f["code"] == "MP005"]
    assert f["line"] == s.line("batch") and f["devices"] == ["cpu", "cuda:1", "cuda:0"]
    assert "rows" in f["message"] and f"train.py:{s.line('stored')}" in f["message"]


def test_a_dataset_kept_where_its_rows_are_used_is_clean(script, dryrun_cli):
    s = script(RESIDENT.replace("STORE", '"cuda:0"'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, [f["code"] for f in report["findings"]]) == (0, []), err


def test_a_dataset_that_is_worked_on_where_it_is_kept_was_needed_there(script, dryrun_cli):
    # normalised where it is stored: that GPU did work on it (the batches still cross, but the data was read)
    s = script(RESIDENT.replace("STORE", '"cuda:1"').replace("for step", "stored = stored - stored.mean(0)\nfor step"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [f for f in report["findings"] if f["code"] == "MP005"] == []


HOST_STACK = """
import torch

for step in range(3):
    hidden = [torch.randn(64, 1024, device=f"cuda:{i // 5}") for i in range(9)]
    STATES
    print(float(states.sum()))
"""


def test_copies_stacked_on_the_host_and_moved_to_a_gpu_are_a_host_detour(script, dryrun_cli):
    # (probe37 t22) hidden states of two GPUs gathered through the host for a probe on cuda:1
    s = script(HOST_STACK.replace("STATES", "states = torch.stack([h.cpu() for h in hidden]).to('cuda:1')  # <- hop"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = [f for f in report["findings"] if f["code"] == "MP005"]
    assert f["line"] == s.line("hop") and "only stacked there" in f["message"]
    for states in (
        "states = torch.stack([h.to('cuda:1') for h in hidden])",  # the fix
        "states = torch.stack([h.cpu() for h in hidden])",  # gathered on the host, and kept there
        "states = torch.stack([h.cpu().clamp(-1, 1) for h in hidden]).to('cuda:1')",  # work on the host first
    ):
        status, report, err = dryrun_cli(script(HOST_STACK.replace("STATES", states)), "--gpus", "2")
        assert status == 0, err
        assert [f for f in report["findings"] if f["code"] == "MP005"] == [], states
