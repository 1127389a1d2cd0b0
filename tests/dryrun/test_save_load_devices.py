"""torch.save / torch.load on virtual GPUs keep CUDA's devices: a checkpoint records the device each storage was
saved from ("cuda:1"), and torch.load restores it there unless map_location says otherwise (a device, a dict of
locations, or a callable that may move the storage itself with `storage.cuda(k)` / `storage.to(...)`), for
tensors in nested containers and for whole pickled modules alike (torch/serialization.py: location_tag,
default_restore_location, _get_restore_location). A correct program that relies on it runs with no finding."""

import pytest
from dryrun_helpers import codes_at

SAVE = """
import os
import tempfile
import torch
import torch.nn as nn


class Pipe(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 2).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


d = tempfile.mkdtemp()
path = os.path.join(d, "ckpt.pt")
feats = torch.randn(6, 4, device="cuda:1")
torch.save({"feats": feats, "nested": [feats[:2], (torch.ones(3, device="cuda:0"),)], "cpu": torch.ones(2),
            "step": 7}, path)
torch.save(Pipe(), os.path.join(d, "pipe.pt"))
"""


def _devices(script, dryrun_cli, body, status=0):
    s = script(SAVE + body)
    got, report, err = dryrun_cli(s, "--gpus", "2")
    assert got == status, err
    return report, s


def test_load_without_map_location_restores_the_saved_devices(script, dryrun_cli):
    report, s = _devices(
        script,
        dryrun_cli,
        """
c = torch.load(path)
assert c["feats"].device == torch.device("cuda:1"), c["feats"].device
assert c["nested"][0].device == torch.device("cuda:1")
assert c["nested"][1][0].device == torch.device("cuda:0")
assert c["cpu"].device == torch.device("cpu") and c["step"] == 7
assert torch.equal(c["feats"].cpu(), feats.cpu())
head = nn.Linear(4, 2).to("cuda:1")
loss = head(c["feats"]).sum()  # <- use
loss.backward()
model = torch.load(os.path.join(d, "pipe.pt"), weights_only=False)
assert model.a.weight.device == torch.device("cuda:0") and model.b.weight.device == torch.device("cuda:1")
assert isinstance(model.a.weight, nn.Parameter)
print(model(torch.randn(2, 8)).device)
print("finished")
""",
    )
    assert report["findings"] == []


def test_map_location_device_dict_and_callable(script, dryrun_cli):
    report, s = _devices(
        script,
        dryrun_cli,
        """
c = torch.load(path, map_location="cuda:0")
assert c["feats"].device == torch.device("cuda:0") and c["cpu"].device == torch.device("cuda:0")
c = torch.load(path, map_location=torch.device("cpu"))
assert c["feats"].device == torch.device("cpu")
c = torch.load(path, map_location={"cuda:1": "cuda:0"})
assert c["feats"].device == torch.device("cuda:0") and c["nested"][1][0].device == torch.device("cuda:0")
assert c["cpu"].device == torch.device("cpu")
c = torch.load(path, map_location={"cuda:0": "cpu"})
assert c["feats"].device == torch.device("cuda:1") and c["nested"][1][0].device == torch.device("cpu")
c = torch.load(path, map_location=lambda s, loc: s.cuda(1))
assert c["feats"].device == torch.device("cuda:1") and c["cpu"].device == torch.device("cuda:1")
assert torch.equal(c["cpu"].cpu(), torch.ones(2))
c = torch.load(path, map_location=lambda s, loc: s.to(device="cuda:0"))
assert c["feats"].device == torch.device("cuda:0")
c = torch.load(path, map_location=lambda storage, loc: storage)
assert c["feats"].device == torch.device("cpu") and c["nested"][1][0].device == torch.device("cpu")
c = torch.load(path, map_location=lambda storage, loc: None)  # None: the saved location
assert c["feats"].device == torch.device("cuda:1")
model = torch.load(os.path.join(d, "pipe.pt"), weights_only=False, map_location="cuda:0")
assert model.a.weight.device == torch.device("cuda:0") and model.b.weight.device == torch.device("cuda:0")
print("finished")
""",
    )
    assert report["findings"] == []


def test_a_stage_loaded_onto_the_wrong_gpu_is_still_reported(script, dryrun_cli):
    # The saved device is kept, so a program that uses it with the other GPU's stage is a real mismatch.
    report, s = _devices(
        script,
        dryrun_cli,
        """
c = torch.load(path)
head = nn.Linear(4, 2).to("cuda:0")
out = head(c["feats"])  # <- wrong
""",
        status=1,
    )
    found = codes_at(report)
    assert found and {line for _, line in found} == {s.line("wrong")}, found


@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_loaded_storages_live_on_their_virtual_gpu(tmp_path, backing):
    import torch

    import mpcheck

    path = tmp_path / "w.pt"
    torch.save({"w": torch.ones(256, 256)}, path)
    with mpcheck.dryrun(gpus=2, backing=backing, report=None) as dr:
        before = torch.cuda.memory_allocated(1)
        w = torch.load(path, map_location="cuda:1")["w"]
        assert w.device == torch.device("cuda:1")
        assert w.untyped_storage().device.type == backing
        assert torch.cuda.memory_allocated(1) - before >= 256 * 256 * 4
        assert (w + 1).device == torch.device("cuda:1")
    assert dr is not None
