"""`device_map="auto"` on virtual GPUs: accelerate's memory queries (what `get_max_memory` and
`get_balanced_memory` ask: a tensor made with an integer device, `mem_get_info(i)`,
`get_device_properties(i).total_memory`, `memory_allocated(i)`) are answered from `--device-memory` and
the tensors placed so far, so an automatic device map places onto the virtual GPUs accordingly. The
accelerate and transformers cases run only where those libraries are installed (no network in CI); the
pure-torch case asks the same questions."""

import pytest
from dryrun_helpers import codes_at

QUERIES = """
import torch
import torch.nn as nn

n = torch.cuda.device_count()
for i in range(n):
    _ = torch.tensor([0], device=i)  # accelerate's get_max_memory starts each device this way
free = {i: torch.cuda.mem_get_info(i)[0] for i in range(n)}
total = {i: torch.cuda.get_device_properties(i).total_memory for i in range(n)}
assert total == {0: 8 * 2**20, 1: 8 * 2**20}, total
before = torch.cuda.memory_allocated(1)
layer = nn.Linear(512, 512).to(1)  # 1 MiB of weights and bias on cuda:1
assert torch.cuda.memory_allocated(1) - before >= 512 * 512 * 4
assert torch.cuda.mem_get_info(1)[0] <= free[1] - 512 * 512 * 4
assert torch.cuda.mem_get_info(0)[0] == free[0]
print("finished")
"""


def test_memory_queries_are_answered_from_device_memory(script, dryrun_cli):
    s = script(QUERIES)
    status, report, err = dryrun_cli(s, "--gpus", "2", "--device-memory", "8MiB")
    assert status == 0, err
    assert report["findings"] == []


# A model of about 12 MiB: 8 blocks of 1.5 MiB (two 512x384 Linear layers).
AUTO_MAP = """
import torch
import torch.nn as nn
from accelerate import dispatch_model, infer_auto_device_map
from accelerate.utils import get_balanced_memory

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(512, 384), nn.Linear(384, 512)
    def forward(self, x):
        return self.b(torch.relu(self.a(x)))

model = nn.Sequential(*[Block() for _ in range(8)])
memory = get_balanced_memory(model, no_split_module_classes=["Block"])
device_map = infer_auto_device_map(model, max_memory=memory, no_split_module_classes=["Block"])
placed = sorted(set(device_map.values()), key=str)
assert placed == {devices}, placed
model = dispatch_model(model, device_map=device_map)
with torch.no_grad():  # inference, as the map was computed for (no room left for gradients)
    model(torch.randn(4, 512, device="cuda:0"))
"""


@pytest.mark.parametrize(("memory", "devices"), [("10MiB", "[0, 1]"), ("4MiB", "[0, 1, 'cpu']")])
def test_an_automatic_device_map_fills_the_virtual_gpus(script, dryrun_cli, memory, devices):
    pytest.importorskip("accelerate", reason="accelerate is not installed (the pure-torch case covers the queries)")
    s = script(AUTO_MAP.replace("{devices}", devices))
    status, report, err = dryrun_cli(s, "--gpus", "2", "--device-memory", memory)
    # The program's own assert on the map's devices passed (no stop). Exit 1 only if a device is over: from a GPU's
    # first matrix multiply the estimate holds cuBLAS's 33 MiB workspaces, more than these tiny devices have.
    assert report.get("stopped") is None and status == (
        0 if all(m["fits"] for m in report["memory"].values()) else 1
    ), err
    assert codes_at(report) == []


FROM_PRETRAINED = """
import tempfile
import torch
import transformers

config = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=2, vocab_size=128, n_positions=64)
with tempfile.TemporaryDirectory() as folder:
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    # transformers 5's loading warm-up keeps 1.2 GiB of a GPU's total free (a smaller real GPU fails there
    # too): the virtual GPUs are 2 GiB and the map's budget small enough to need both.
    budget = {0: "6MiB", 1: "6MiB", "cpu": "1GiB"}
    model = transformers.GPT2LMHeadModel.from_pretrained(folder, device_map="auto", max_memory=budget)
placed = sorted(set(model.hf_device_map.values()), key=str)
assert placed[:2] == [0, 1], placed
ids = torch.randint(0, 128, (2, 16), device="cuda:0")
with torch.no_grad():
    model(input_ids=ids, labels=ids)
"""


def test_from_pretrained_device_map_auto_places_onto_the_virtual_gpus(script, dryrun_cli):
    pytest.importorskip("accelerate", reason="accelerate is not installed")
    pytest.importorskip("transformers", reason="transformers is not installed")
    s = script(FROM_PRETRAINED)
    status, report, err = dryrun_cli(s, "--gpus", "2", "--device-memory", "2GiB")
    assert status == 0, err  # the program's own assert on the map's devices passed
    # GPT-2's tied embeddings: the one checkpoint tensor is copied once per key at the load (setup, not
    # a repeated transfer; tests/dryrun/test_loading_copies.py has the stand-in that runs everywhere).
    assert report["findings"] == []
