"""torch.save / torch.load on virtual GPUs keep CUDA's devices: a checkpoint records the device each storage was
saved from ("cuda:1"), and torch.load restores it there unless map_location says otherwise (a device, a dict of
locations, or a callable that may move the storage itself with `storage.cuda(k)` / `storage.to(...)`), for
tensors in nested containers and for whole pickled modules alike (torch/serialization.py: location_tag,
default_restore_location, _get_restore_location). A correct program that relies on it runs with no finding."""

import pytest
from dryrun_helpers import codes_at

SAVE = """
import os
import torch
import torch.nn as nn


class Pipe(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 2).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


d = os.path.dirname(os.path.abspath(__file__))  # the test's own temporary folder
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
model = torch.load(os.path.join(d, "pipe.pt"), weights_only=False, map_location="cuda:0")  # <- collapse
assert model.a.weight.device == torch.device("cuda:0") and model.b.weight.device == torch.device("cuda:0")
print("finished")
""",
        status=1,
    )
    # The whole split model, loaded onto one device, lost its split (MP007, tested below); the rest is clean.
    assert codes_at(report) == [("MP007", s.line("collapse"))]


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


@pytest.mark.parametrize(
    "load",
    [
        'torch.load(os.path.join(d, "pipe.pt"), map_location="cuda:0", weights_only=False)',
        'torch.load(os.path.join(d, "pipe.pt"), map_location=torch.device("cuda", 0), weights_only=False)',
        'torch.load(os.path.join(d, "pipe.pt"), map_location={"cuda:1": "cuda:0"}, weights_only=False)',
        'torch.load(os.path.join(d, "pipe.pt"), map_location=1, weights_only=False)',
    ],
)
def test_a_whole_split_model_loaded_onto_one_device_is_a_collapse_at_the_load(script, dryrun_cli, load):
    # torch.save(model) of a split model, then torch.load with one map_location: every stage comes back
    # on that device, as after model.to(dev). The forward's hop to the other stage then fails: counted on
    # the MP007, not reported again.
    report, s = _devices(
        script,
        dryrun_cli,
        f"""
pipe = {load}  # <- load
pipe(torch.randn(3, 8)).sum().backward()
""",
        status=1,
    )
    assert codes_at(report) == [("MP007", s.line("load"))]
    f = report["findings"][0]
    assert f["devices"] == ["cuda:0", "cuda:1"]
    assert "saved split over cuda:0, cuda:1" in f["message"] and "state_dict" in f["suggestion"]


@pytest.mark.parametrize(
    "load",
    [
        'torch.load(os.path.join(d, "pipe.pt"), weights_only=False)',  # each stage back where it was saved
        'torch.load(os.path.join(d, "pipe.pt"), map_location=lambda s, loc: None, weights_only=False)',
    ],
)
def test_a_whole_split_model_loaded_where_it_was_saved_runs_clean(script, dryrun_cli, load):
    report, s = _devices(script, dryrun_cli, f"pipe = {load}\npipe(torch.randn(3, 8)).sum().backward()\n")
    assert report["findings"] == [] and report["stopped"] is None


def test_a_state_dict_loaded_onto_the_cpu_into_a_split_model_and_a_one_gpu_model_moved_are_clean(script, dryrun_cli):
    report, s = _devices(
        script,
        dryrun_cli,
        """
torch.save(Pipe().state_dict(), os.path.join(d, "sd.pt"))
pipe = Pipe()
pipe.load_state_dict(torch.load(os.path.join(d, "sd.pt"), map_location="cpu"))
pipe(torch.randn(3, 8)).sum().backward()
torch.save(nn.Linear(8, 8).to("cuda:1"), os.path.join(d, "one.pt"))
one = torch.load(os.path.join(d, "one.pt"), map_location="cuda:0", weights_only=False)
one(torch.randn(3, 8, device="cuda:0")).sum().backward()
""",
    )
    assert report["findings"] == [] and report["stopped"] is None


ASSIGN = """
sd = torch.load(os.path.join(d, "pipe_sd.pt"), map_location=WHERE)
model = Pipe()
model.load_state_dict(sd, assign=ASSIGN)  # <- load
print(model.a.weight.device, model.b.weight.device)
out = model(torch.randn(2, 8).to(next(model.parameters()).device) if ASSIGN else torch.randn(2, 8))
print("finished")
"""


def _assign(script, dryrun_cli, where, assign, status):
    body = 'torch.save(Pipe().state_dict(), os.path.join(d, "pipe_sd.pt"))\n' + ASSIGN.replace("WHERE", where).replace(
        "ASSIGN", assign
    )
    report, s = _devices(script, dryrun_cli, body, status)
    return report, s.line("load")


def test_a_state_dict_assigned_from_the_host_into_a_split_model_is_a_collapse_at_the_load(script, dryrun_cli):
    report, load = _assign(script, dryrun_cli, '"cpu"', "True", 1)
    assert codes_at(report) == [("MP007", load)]
    found = report["findings"]
    assert "assign=True" in found[0]["message"] and "all on cpu" in found[0]["message"]
    assert "cuda:0, cuda:1" in found[0]["message"]


def test_a_state_dict_copied_or_assigned_where_it_was_saved_is_silent(script, dryrun_cli):
    for where, assign in (('"cpu"', "False"), ("None", "True")):
        report, _ = _assign(script, dryrun_cli, where, assign, 0)
        assert report["findings"] == [], (where, assign)


RESUME = """
model = Pipe()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model(torch.randn(2, 8)).sum().backward()
opt.step()
torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, os.path.join(d, "resume.pt"))
ckpt = torch.load(os.path.join(d, "resume.pt"), map_location=WHERE)
model = Pipe()
model.load_state_dict(ckpt["model"])
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
opt.load_state_dict(ckpt["opt"])
model(torch.randn(2, 8)).sum().backward()
opt.step()  # <- step
print("finished")
"""


def test_adam_steps_loaded_onto_one_gpu_stop_the_foreach_step_as_on_real_gpus(script, dryrun_cli):
    report, s = _devices(script, dryrun_cli, RESUME.replace("WHERE", '"cuda:0"'), 1)
    assert codes_at(report) == [("MP001", s.line("step"))]
    assert "except the `step` counts" in report["findings"][0]["message"]


def test_adam_state_loaded_on_the_host_follows_each_parameter(script, dryrun_cli):
    report, _ = _devices(script, dryrun_cli, RESUME.replace("WHERE", '"cpu"'))
    assert report["findings"] == []
