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
