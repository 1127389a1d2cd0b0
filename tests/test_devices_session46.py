"""Session 46: findings of blind round 34 (each test names the general rule behind its case)."""

from __future__ import annotations

from lint_helpers import findings

# Round 34's t17: a placement spelled as a Python literal in a string, read with ast.literal_eval (as a YAML
# file or a flag would give it): its devices are known, as json.loads' are.
LITERAL_PLACEMENT = """
import ast
import torch
import torch.nn as nn

PLACE = ast.literal_eval("{'enc': 'cuda:0', 'dec': ['cuda:1', 'cuda:1']}")

enc = nn.Linear(64, 64).to(PLACE["enc"])
dec = nn.Linear(64, 64).to(PLACE["dec"][0])
x = torch.randn(8, 64, device=PLACE["enc"])
y = dec(enc(x)){fix}
"""


def test_a_placement_read_with_literal_eval_is_known():
    (f,) = findings(LITERAL_PLACEMENT.replace("{fix}", ""), "MP001")
    assert f.line == 11 and set(f.devices) == {"cuda:0", "cuda:1"}


def test_a_literal_eval_text_that_is_no_literal_is_unknown_and_silent():
    source = LITERAL_PLACEMENT.replace("{fix}", "").replace(
        "\"{'enc': 'cuda:0', 'dec': ['cuda:1', 'cuda:1']}\"", "\"{'enc': 'cuda:0', 'dec': open('x')}\""
    )
    assert findings(source, "MP001") == []


# Round 34's t17: the additive causal mask made on the host by a helper that each attention call runs, sized by
# its parameter (the forward passes the activation's length) and moved to the activation's GPU.
CAUSAL_MASK_HELPER = """
import functools
import torch
import torch.nn as nn

{decorator}
def causal_mask(t, device):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1).to(device)


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 64)

    def forward(self, x):
        b, t, _ = x.shape
        return self.qkv(x) @ x.transpose(-2, -1) + causal_mask(t, x.device)


m = Attn().to("cuda:0")
for _ in range(3):
    m(torch.randn(2, 16, 64, device="cuda:0"))
"""


def test_a_helper_a_forward_calls_that_makes_its_tensor_on_the_host_from_its_size_parameter():
    (f,) = findings(CAUSAL_MASK_HELPER.format(decorator=""), "MP019")
    assert f.line == 8 and "torch.full(..., device=device)" in f.message


def test_a_helper_that_caches_what_it_returns_builds_it_once_per_size():
    assert findings(CAUSAL_MASK_HELPER.format(decorator="@functools.lru_cache(maxsize=8)"), "MP019") == []


def test_a_helper_sized_by_a_parameter_outside_a_forward_is_a_stand_in_batch():
    source = """
    import torch

    def batch(n, device):
        return torch.randn(n, 128).to(device)

    for step in range(3):
        x = batch(64, "cuda:0")
    """
    assert findings(source, "MP019") == []
