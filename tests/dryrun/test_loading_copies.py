"""Copies made while a model is loaded are setup, not per-step waste (MP011, runtime/checks/recurrence.py).

`from_pretrained(..., device_map=...)` copies each checkpoint tensor to its device, one key at a time
(accelerate's `set_module_tensor_to_device`); the two keys of tied embeddings share one tensor in the
checkpoint, so that tensor is copied twice, then `tie_weights()` ties the parameters again. A stand-in
library below does the same, installed in a temporary site-packages, so the test needs neither
transformers nor the network (tests/dryrun/test_device_map_auto.py runs transformers itself where it is
installed). The real repeat, a constant moved in every forward, is still reported.
"""

from dryrun_helpers import codes_at

from mpcheck.runtime.checks.thresholds import REPEAT_MIN_BYTES

# The stand-in of transformers + accelerate: save a tied model, build an empty one on the meta device,
# and set each parameter from the checkpoint onto its device in the map.
HUB = """
import torch
from torch import nn


class TiedLM(nn.Module):
    def __init__(self, vocab=256, dim=128):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.body = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied

    def tie_weights(self):
        self.head.weight = self.embed.weight

    def forward(self, ids):
        h = self.embed(ids)
        h = self.body(h.to(self.body.weight.device))
        return self.head(h.to(self.head.weight.device))


def set_module_tensor_to_device(model, name, device, value):
    *path, leaf = name.split(".")
    module = model
    for part in path:
        module = getattr(module, part)
    with torch.no_grad():
        new_value = value.to(device)  # one copy per key: twice for a tensor two keys share
        module._parameters[leaf] = nn.Parameter(new_value, requires_grad=True)


def from_pretrained(folder, device_map):
    state = torch.load(folder + "/model.pt")  # tied keys share one tensor, as torch.save kept them
    with torch.device("meta"):
        model = TiedLM()
    for name, value in state.items():
        set_module_tensor_to_device(model, name, device_map[name.split(".")[0]], value)
    model.tie_weights()
    return model
"""

USER = """
import sys
import tempfile
sys.path.insert(0, {site!r})
import torch
from fakehub.modeling import TiedLM, from_pretrained

device_map = {{"embed": "cuda:0", "head": "cuda:0", "body": "cuda:1"}}
with tempfile.TemporaryDirectory() as folder:
    torch.save(TiedLM().state_dict(), folder + "/model.pt")
    model = from_pretrained(folder, device_map)  # <- load
    assert model.head.weight is model.embed.weight
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        ids = torch.randint(0, 256, (4, 16), device="cuda:0")
        loss = model(ids).float().logsumexp(-1).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
{tail}
"""


def _install_hub(tmp_path, name="fakehub", text=HUB):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text("")
    (site / name / "modeling.py").write_text(text)
    return str(site)


def test_a_tied_checkpoint_tensor_copied_once_per_key_at_load_is_not_a_repeat(script, dryrun_cli, tmp_path):
    s = script(USER.format(site=_install_hub(tmp_path), tail=""))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    # The 128 KiB tied tensor really crossed twice at the load (the ledger counts both copies).
    at_load = f"{s.path.name}:{s.line('load')}"
    loads = [t for t in report["transfers"]["by_site"] if t["site"].endswith(at_load) and t["dst"] == "cuda:0"]
    assert sum(t["bytes"] for t in loads) == 2 * 256 * 128 * 4
    assert report["findings"] == []


def test_loading_again_in_the_middle_of_the_run_is_not_a_repeat(script, dryrun_cli, tmp_path):
    # A second load after training steps (a reference model, the best checkpoint for evaluation): the
    # library's two copies of the tied tensor have no model work between them.
    tail = """
    with tempfile.TemporaryDirectory() as folder:
        torch.save(model.state_dict(), folder + "/model.pt")
        reference = from_pretrained(folder, device_map)  # <- reload
"""
    s = script(USER.format(site=_install_hub(tmp_path), tail=tail))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_the_users_own_loader_loop_before_training_is_not_a_repeat(script, dryrun_cli):
    s = script("""
import torch
from torch import nn

embed = nn.Embedding(256, 128, device="meta")
head = nn.Linear(128, 256, bias=False, device="meta")
shared = torch.randn(256, 128)                        # 128 KiB, one tensor behind two keys
state = {"embed.weight": shared, "head.weight": shared}
modules = {"embed": embed, "head": head}
for key, value in state.items():
    name, leaf = key.split(".")
    setattr(modules[name], leaf, nn.Parameter(value.to("cuda:0")))
head.weight = embed.weight
for step in range(3):
    ids = torch.randint(0, 256, (4, 16), device="cuda:0")
    head(embed(ids)).sum().backward()
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


def test_a_constant_moved_in_every_forward_after_a_load_is_still_reported(script, dryrun_cli, tmp_path):
    tail = f"""
    table = torch.randn({REPEAT_MIN_BYTES // 4})                     # a constant on the host
    for step in range(3):
        ids = torch.randint(0, 256, (4, 16), device="cuda:0")
        bias = table.to("cuda:0")  # <- repeat
        model(ids)
"""
    s = script(USER.format(site=_install_hub(tmp_path), tail=tail))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert codes_at(report) == [("MP011", s.line("repeat"))]


def test_a_copy_made_at_setup_and_again_in_the_loop_is_reported(script, dryrun_cli):
    # The first copy is made before the model ever ran; the loop's copy of the same data, after a
    # forward pass, is the loop's repeated work.
    s = script(f"""
import torch

layer = torch.nn.Linear(64, 64, device="cuda:1")
table = torch.randn({REPEAT_MIN_BYTES // 4})
warm = table.to("cuda:1")
for step in range(2):
    t = table.to("cuda:1")  # <- repeat
    layer(torch.randn(2, 64, device="cuda:1"))
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert codes_at(report) == [("MP011", s.line("repeat"))]


# transformers 5's loader: each checkpoint tensor is moved to its device in a thread pool's task.
THREADED_HUB = HUB.replace(
    """    for name, value in state.items():
        set_module_tensor_to_device(model, name, device_map[name.split(".")[0]], value)
""",
    """    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as pool:
        jobs = [
            pool.submit(set_module_tensor_to_device, model, name, device_map[name.split(".")[0]], value)
            for name, value in state.items()
        ]
        for job in jobs:
            job.result()
""",
)


def test_a_library_loading_in_a_thread_pool_places_onto_the_virtual_gpus(script, dryrun_cli, tmp_path, monkeypatch):
    """The loader's threads move the tensors onto the virtual GPUs (before, on a CPU build, the move reached
    real CUDA: transformers 5 was told to load in the program's thread with its own switch,
    HF_DEACTIVATE_ASYNC_LOAD, which the dry run no longer sets); the tied tensor copied once per key, in two
    threads, is still setup, not a repeat."""
    monkeypatch.delenv("HF_DEACTIVATE_ASYNC_LOAD", raising=False)
    site = _install_hub(tmp_path, "fakehub_threads", THREADED_HUB)  # a name of its own: fakehub may be imported
    tail = """
    assert "HF_DEACTIVATE_ASYNC_LOAD" not in __import__("os").environ
    assert [str(p.device) for p in model.parameters()] == ["cuda:0", "cuda:1", "cuda:1"], list(model.parameters())
"""
    s = script(USER.format(site=site, tail=tail).replace("from fakehub.", "from fakehub_threads."))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0 and report["stopped"] is None, err
    assert report["findings"] == []
    # The copies made in the pool's threads are named at the user's line that loaded (the library's own
    # line in the thread as its context), as the same copies made in the program's thread are.
    at_load = f"{s.path.name}:{s.line('load')}"
    loads = [t for t in report["transfers"]["by_site"] if t["site"].endswith(at_load) and t["dst"] == "cuda:0"]
    assert sum(t["bytes"] for t in loads) == 2 * 256 * 128 * 4
