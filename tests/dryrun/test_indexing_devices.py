"""Indexing across devices (runtime/checks/op_check.py `_off`, runtime/virtual/ops.py): a GPU's tensor takes CPU
indices, and any tensor takes a 0-dim index (read as a Python int); a CPU tensor refuses a GPU's indices
("indices should be either on cpu or on the same device as the indexed tensor"): MP001, as a DDPM schedule
left on the host and indexed by timesteps drawn on the GPU (held-out round 14, t03). `x[i]` is where `x` is."""

import pytest

PROGRAM = """
import torch

table = torch.linspace(0.1, 0.9, 100)
gtable = table.to("cuda:0")
t = torch.randint(0, 100, (8,), device="cuda:0")
for step in range(2):
    READ  # <- read
"""


@pytest.mark.parametrize(
    "read",
    [
        "a = gtable[t.cpu()]",  # CPU indices into a GPU's tensor
        "a = table[t[0]]; assert a.device.type == 'cpu'",  # a 0-dim index: an int
        "a = gtable[t]",
        "gtable[t.cpu()] = 0.5",
        "a = table[t.cpu()] + table[t[1]]",
    ],
)
@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_indexing_that_cuda_takes_is_clean(script, dryrun_cli, read, backing):
    if backing == "meta" and ("t[0]" in read or "t[1]" in read):
        pytest.skip("a 0-dim index is read as a value: meta backing stops there, as documented")
    status, report, err = dryrun_cli(script(PROGRAM.replace("READ", read)), "--gpus", "2", "--backing", backing)
    assert (status, report["findings"]) == (0, []), (err, report["findings"])


def test_a_cpu_tensor_indexed_by_gpu_indices_is_mp001(script, dryrun_cli):
    s = script(PROGRAM.replace("READ", "a = table[t]"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP001", s.line("read"))], report["findings"]


SCORES = """
import torch

scores = torch.randn(2, 50, device="cuda:1")
eos = torch.tensor([3, 7], device=DEV)
for step in range(2):
    scores[:, eos] = -float("inf")  # <- write
    top = scores[0, eos]  # <- read
"""


def test_an_index_tuple_with_another_gpus_tensor_after_a_slice_is_mp001(script, dryrun_cli):
    s = script(SCORES.replace("DEV", '"cuda:0"'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert [(f["code"], f["line"]) for f in report["findings"]][:1] == [("MP001", s.line("write"))], err
    assert "argument 1[1]" in report["findings"][0]["message"]


@pytest.mark.parametrize("dev", ['"cuda:1"', '"cpu"'])
def test_an_index_tuple_with_the_tensors_own_gpu_or_the_hosts_is_clean(script, dryrun_cli, dev):
    status, report, err = dryrun_cli(script(SCORES.replace("DEV", dev)), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
