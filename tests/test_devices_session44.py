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
