"""MP005's GPU detour at run time: data copied from the host to one GPU, unused there, then on to another
GPU unchanged is reported at the second copy (from 64 KiB); read on the first GPU, or copied straight to
the GPU that uses it, it is not."""

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
