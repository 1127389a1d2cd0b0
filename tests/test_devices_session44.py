"""Session 44: findings of real code and of blind rounds 32 and precision 31 (each test names the general
rule behind its case)."""

from __future__ import annotations

from lint_helpers import findings

# MarcusYF/gnn_rl DQN.py: an exploration draw sized after a mask drawn on the host, moved with `.cuda()`
EXPLORE = """
import torch

def sample(q, num_actions, batch_size, eps):
    best = q.view(batch_size, num_actions).argmax(1)
    mask = (torch.rand(batch_size) < eps).nonzero()
    explore = torch.randint(high=num_actions, size=(mask.shape[0],)).cuda()
    best[mask[:, 0]] = explore
    return best

def rollout(q):
    for _ in range(10):
        x = torch.randn(4, 3).cuda()
        noise = torch.zeros(x.shape[0]).cuda()
        sample(q, 3, 4, 0.1)
"""


def test_made_on_host_never_suggests_the_device_of_a_host_tensor():
    # made where `mask` is would be the host again: the fix names the move's own device
    got = {f.line: f for f in findings(EXPLORE, "MP019")}
    assert sorted(got) == [7, 14]
    assert "device='cuda'" in got[7].message and "mask.device" not in got[7].message
    # shaped after a GPU tensor: made where that tensor is, which follows the model's placement
    assert "device=x.device" in got[14].message


# horseee/LLM-Pruner llama3.py: loaded split by `device_map="auto"`, then moved whole for a one-device script
LOADED_AUTO = """
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("m", device_map="auto", torch_dtype=torch.float16)
model.to("cuda:0")
"""


def test_collapse_of_a_model_loaded_split_offers_loading_it_on_one_device():
    (got,) = findings(LOADED_AUTO, "MP007")
    assert got.line == 6
    assert "Remove the call" in got.message and "device_map={'': device}" in got.message


# Blind round 32, t05: a dataclass of settings in the model's file, the split after block `split_at`, the model
# built and run by another file's `main()`, which also hands the settings to a helper that only reads them.
SETTINGS_MODEL = """
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class Settings:
    width: int = 8
    n_layers: int = 4
    split_at: int = 2
    first: str = "cuda:0"
    second: str = "cuda:1"


class Net(nn.Module):
    def __init__(self, cfg: Settings):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList()
        for i in range(cfg.n_layers):
            self.blocks.append(nn.Linear(cfg.width, cfg.width).to(cfg.first if i < cfg.split_at else cfg.second))

    def forward(self, x):
        x = x.to(self.cfg.first)
        for i, block in enumerate(self.blocks):
            if i == self.cfg.split_at:
                x = x.to(HOP)
            x = block(x)
        return x
"""

SETTINGS_MAIN = """
import torch
from model import Settings, Net


def get_batch(cfg, n=4):
    return torch.randn(n, cfg.width)


def main():
    cfg = Settings()
    model = Net(cfg)
    for _ in range(2):
        model(get_batch(cfg)).sum().backward()
HELPER

main()
"""


def _settings_project(tmp_path, monkeypatch, hop: str, helper: str = "") -> list[tuple[str, int, str]]:
    import json

    from mpcheck import cli

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "model.py").write_text(SETTINGS_MODEL.replace("HOP", hop))
    (tmp_path / "main.py").write_text(SETTINGS_MAIN.replace("HELPER", helper))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out.json"
    cli.main(["--jobs", "1", "--no-cache", "--isolated", "--output-format", "json", "--output-file", str(out), "."])
    return [(d["path"], d["line"], d["code"]) for d in json.loads(out.read_text())]


def test_settings_numbers_cross_files_with_their_devices(tmp_path, monkeypatch):
    # `split_at` and `n_layers` cross with the devices: the hop back to the first GPU is seen to meet block 2
    assert _settings_project(tmp_path, monkeypatch, "self.cfg.first") == [("model.py", 29, "MP001")]


def test_settings_model_with_the_right_hop_is_clean(tmp_path, monkeypatch):
    assert _settings_project(tmp_path, monkeypatch, "self.cfg.second") == []


def test_settings_a_helper_reads_stay_followed_and_one_it_changes_are_not(tmp_path, monkeypatch):
    # `get_batch(cfg)` only reads `cfg.width`: the settings are as built at `model(...)`
    assert "get_batch(cfg)" in SETTINGS_MAIN
    assert _settings_project(tmp_path, monkeypatch, "self.cfg.first") == [("model.py", 29, "MP001")]
    # a helper that sets an attribute of what it is given, called before the model runs: not followed
    changes = "\n\ndef tweak(cfg):\n    cfg.split_at = 3\n"
    (tmp_path / "main.py").write_text(
        SETTINGS_MAIN.replace("HELPER", changes).replace(
            "    cfg = Settings()\n", "    cfg = Settings()\n    tweak(cfg)\n"
        )
    )
    from mpcheck import cli

    cli.main(["--jobs", "1", "--no-cache", "--isolated", "--output-format", "json", "--output-file", "o.json", "."])
    assert (tmp_path / "o.json").read_text().strip() == "[]"


# Blind round 32, t08: a metric class of another file keeps its counts on the device its builder names
# (`torch.zeros(..., device=device)`, no `.to()` anywhere); the script gives it the first GPU's labels and
# the last GPU's logits.
METRIC = """
import torch


class Confusion:
    def __init__(self, n, device):
        self.n = n
        self.counts = torch.zeros(n, n, dtype=torch.long, device=device)

    def update(self, logits, target):
        pred = logits.argmax(-1)
        self.counts += torch.bincount(target * self.n + pred, minlength=self.n * self.n).view(self.n, -1)
"""

METRIC_MAIN = """
import torch
import torch.nn as nn

from metrics import Confusion

front, back = torch.device("cuda:0"), torch.device("cuda:1")
head = nn.Linear(4, 3).to(back)


def evaluate(x, y, device):
    m = Confusion(3, device=device)
    m.update(head(x.to(back)), y.to(device))


evaluate(torch.randn(2, 4), torch.tensor([0, 1]), LABELS)
"""


def test_a_class_that_makes_tensors_on_its_builders_device_is_followed_across_files(tmp_path, monkeypatch):
    import json

    from mpcheck import cli

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "metrics.py").write_text(METRIC)
    monkeypatch.chdir(tmp_path)
    args = ["--jobs", "1", "--no-cache", "--isolated", "--output-format", "json", "--output-file", "o.json", "."]
    (tmp_path / "main.py").write_text(METRIC_MAIN.replace("LABELS", "front"))
    cli.main(args)
    (got,) = json.loads((tmp_path / "o.json").read_text())
    assert (got["path"], got["line"], got["code"]) == ("metrics.py", 12, "MP001")
    assert "main.py:13" in got["message"]
    # the devices are the caller's: no literal move is written into the shared class
    assert got["fix"] is None
    (tmp_path / "main.py").write_text(METRIC_MAIN.replace("LABELS", "back"))
    cli.main(args)
    assert json.loads((tmp_path / "o.json").read_text()) == []


# Blind round 32, t11: a U-Net's skip connections pushed on the first GPU, popped on the second; the placement
# parsed from a YAML-like text by a helper of the script (`splitlines`, `split(":", maxsplit=1)`).
SKIPS = """
import torch
import torch.nn as nn

PLACEMENT = '''
# which GPU holds which half
down: cuda:0
up: cuda:1
'''


def parse(text):
    out = {}
    for line in text.strip().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            key, value = (s.strip() for s in line.split(":", maxsplit=1))
            out[key] = value
    return out


class UNet(nn.Module):
    def __init__(self, where):
        super().__init__()
        self.where = where
        self.down = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]).to(where["down"])
        self.up = nn.ModuleList([nn.Linear(8, 4), nn.Linear(8, 4)]).to(where["up"])

    def forward(self, h):
        skips = []
        for block in self.down:
            h = block(h)
            skips.append(h)
        h = h.to(self.where["up"])
        for block in self.up:
            h = block(torch.cat([h, SKIP], dim=1))
        return h


UNet(parse(PLACEMENT))(torch.randn(2, 4, device="cuda:0"))
"""


def test_popped_skip_connections_and_a_parsed_placement_are_followed():
    (got,) = findings(SKIPS.replace("SKIP", "skips.pop()"), "MP001")
    assert got.line == 36 and "cuda:0" in got.message and "cuda:1" in got.message
    assert findings(SKIPS.replace("SKIP", "skips.pop().to(h.device)"), "MP001") == []


def test_a_pop_in_a_loop_of_unknown_length_is_any_item():
    src = """
import torch

def drain(xs, n):
    stack = [torch.zeros(2, device="cuda:0"), torch.ones(2, device="cuda:0")]
    total = torch.zeros(2, device="cuda:1")
    for _ in range(n):
        total = total + stack.pop()
    return total
"""
    assert [f.line for f in findings(src, "MP001")] == [8]


# Blind round 32, t16: features caught by forward hooks made by a closure factory, registered on an
# nn.Sequential inside a model moved whole, and compared across GPUs.
HOOKED = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Teacher(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.mid = nn.Sequential(nn.Linear(8, 8), nn.ReLU())

    def forward(self, x):
        return self.mid(self.stem(x))


def save_output(store, key):
    def hook(module, inputs, output):
        store[key] = output
    return hook


teacher = Teacher().to("cuda:1").eval()
student = nn.Sequential(nn.Linear(4, 8), nn.ReLU()).to("cuda:0")
feats = {}
teacher.mid.register_forward_hook(save_output(feats, "teacher"))
student.register_forward_hook(save_output(feats, "student"))
x = torch.randn(2, 4)
teacher(x.to("cuda:1"))
student(x.to("cuda:0"))
loss = F.mse_loss(feats["student"], TEACHER)
"""


def test_forward_hooks_of_the_file_on_an_nn_sequential_run_where_it_is_called():
    (got,) = findings(HOOKED.replace("TEACHER", 'feats["teacher"]'), "MP008")
    assert got.line == 31 and "cuda:0" in got.message and "cuda:1" in got.message
    assert findings(HOOKED.replace("TEACHER", 'feats["teacher"].to("cuda:0")'), "MP008") == []


def test_a_hook_not_known_on_an_nn_sequential_leaves_its_output_unknown():
    # a library's hook may move what the container gives: its output is not known
    src = HOOKED.replace('save_output(feats, "student")', "some_library.catcher")
    src = src.replace(
        'loss = F.mse_loss(feats["student"], TEACHER)',
        'y = student(x.to("cuda:0")) + torch.ones(2, 8, device="cuda:1")',
    )
    assert findings(src, "MP001") == []
    assert findings(src.replace("some_library.catcher", 'save_output(feats, "student")'), "MP001") != []


# Blind round 32, t19: blocks placed `ceil(n_layers / n_gpus)` per stage, the hop at `n_layers // n_gpus`.
CEIL = """
import math
import torch
import torch.nn as nn


class Stack(nn.Module):
    def __init__(self, n_layers=5, n_gpus=2):
        super().__init__()
        per_stage = math.ceil(n_layers / n_gpus)
        self.blocks = nn.ModuleList()
        self.devs = []
        for i in range(n_layers):
            dev = f"cuda:{i // per_stage}"
            self.blocks.append(nn.Linear(4, 4).to(dev))
            self.devs.append(dev)
        self.hops = {s * HOP for s in range(1, n_gpus)}

    def forward(self, x):
        x = x.to("cuda:0")
        for i, block in enumerate(self.blocks):
            if i in self.hops:
                x = x.to(self.devs[i])
            x = block(x)
        return x


Stack()(torch.randn(2, 4))
"""


def test_stage_sizes_rounded_with_math_ceil_are_known():
    assert [f.line for f in findings(CEIL.replace("HOP", "(n_layers // n_gpus)"), "MP001")] == [24]
    assert findings(CEIL.replace("HOP", "per_stage"), "MP001") == []


def test_float_literals_and_true_division_are_their_values():
    src = """
import torch
import torch.nn as nn

share = 0.5
first = nn.Linear(4, 4).to(f"cuda:{round(share * 2) - 1}")
second = nn.Linear(4, 4).to(f"cuda:{int(3 / 2)}")
second(first(torch.randn(2, 4, device="cuda:0")))
"""
    assert [f.line for f in findings(src, "MP001")] == [8]


# Blind round 32, t02: a per-step helper standardises a GPU batch on the host and sends the results back.
STANDARDIZE = """
import torch


def standardize(batch, eps=1e-5):
    x = batch.cpu().float()
    mean = x.mean(dim=-1, keepdim=True)
    std = x.std(dim=-1, keepdim=True)
    out = OUT
    EXTRA
    return out.to(batch.device), mean.to(batch.device), std.to(batch.device)


for step in range(3):
    standardize(torch.randn(4, 8, 48, device="cuda:0"))
"""


def _standardize(out: str = "(x - mean) / (std + eps)", extra: str = "pass") -> list:
    return findings(STANDARDIZE.replace("OUT", out).replace("EXTRA", extra), "MP005")


def test_host_work_on_a_named_copy_sent_back_to_its_gpu_is_reported_once():
    (got,) = _standardize()
    assert got.line == 11 and "line 6 copied from cuda:0 to the CPU" in got.message


def test_host_work_with_host_data_numpy_or_a_copy_read_elsewhere_is_silent():
    assert _standardize(out="(x - mean) / (std + torch.rand(1))") == []
    assert _standardize(out="torch.from_numpy(x.numpy())", extra="mean = std = x") == []
    assert _standardize(extra="print(x.sum())") == []
