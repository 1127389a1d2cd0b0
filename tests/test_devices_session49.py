"""Round 38's and dr37's lint lessons, each as the general rule behind it (session 49)."""

from __future__ import annotations

import json

from lint_helpers import findings

HELPER = """
import torch

DEFAULT_DEVICE = torch.device("cuda")


def permutation_matrices(n, device=DEFAULT_DEVICE):
    eye = torch.eye(n)
    return torch.stack([eye, eye.flip(0)]).to(device)


def pit_scores(pairwise):
    perms = permutation_matrices(pairwise.shape[-1]CALL)
    return torch.einsum("bij,pij->bp", pairwise, perms)  # <- meet


SETUP
print(pit_scores(torch.randn(4, 2, 2, device="cuda:1")))
"""


def test_a_helpers_current_device_default_used_by_a_call_that_passes_none_is_where_it_lands():
    # Round 38's t04: `device=torch.device("cuda")` is the current device, cuda:0, when the call gives no device.
    for default in ('torch.device("cuda")', '"cuda"'):
        src = HELPER.replace('torch.device("cuda")', default, 1).replace("CALL", "").replace("SETUP", "")
        (f,) = findings(src, "MP001")
        assert f.line == 14 and "current CUDA device" in f.message and "cuda:1" in f.devices, default


def test_a_current_device_default_given_a_device_or_made_current_is_clean():
    given = HELPER.replace("CALL", ", device=pairwise.device").replace("SETUP", "")
    assert findings(given, "MP001") == []
    current = HELPER.replace("CALL", "").replace("SETUP", "torch.cuda.set_device(1)")
    assert findings(current, "MP001") == []


def test_the_default_in_a_helper_file_reaches_the_caller(tmp_path, capsys):
    from mpcheck import cli

    src = HELPER.replace("CALL", "").replace("SETUP", "")
    helper, _, _ = src.partition("\n\nprint(")
    (tmp_path / "losses.py").write_text(helper)
    (tmp_path / "main.py").write_text(
        "import torch\nfrom losses import pit_scores\n\nprint(pit_scores(torch.randn(4, 2, 2, device='cuda:1')))\n"
    )
    code = cli.main(["--no-cache", "--isolated", "--output-format", "json", str(tmp_path)])
    found = [(f["path"].rsplit("/", 1)[-1], f["line"], f["code"]) for f in json.loads(capsys.readouterr().out)]
    assert code == 1 and found == [("losses.py", 14, "MP001")]


PLACERS = """
import torch
import torch.nn as nn

PLACERS = {role: (lambda m, d=d: m.to(d)) for role, d in (("state", torch.device("cuda:0")), ("goal", torch.device("cuda:1")))}
qnet = PLACERS["state"](nn.Linear(16, 4))
genc = PLACERS["goal"](nn.Linear(16, 16))
s = torch.randn(8, 16).to(DEVICE)
print(qnet(s), genc(s.to("cuda:1")))  # <- use
"""


def test_a_lambdas_default_is_the_value_where_it_was_made():
    # dr37's c34: `lambda m, d=d: m.to(d)` made in a comprehension keeps each pass's `d`: the state net is on
    # cuda:0, where its input is. (Python evaluates a default once, when the lambda is made.)
    assert findings(PLACERS.replace("DEVICE", '"cuda:0"'), "MP001") == []
    (f,) = findings(PLACERS.replace("DEVICE", '"cuda:1"'), "MP001")
    assert f.line == 9 and set(f.devices) == {"cuda:0", "cuda:1"}


MATCH = """
import torch
import torch.nn as nn


def device_for(role):
    match role:
        case "embedding" | "encoder":
            return torch.device("cuda:0")
        case "decoder":
            return torch.device("cuda:1")
        case other:
            raise KeyError(other)


enc = nn.Linear(8, 8).to(device_for("encoder"))
dec = nn.Linear(8, 8).to(device_for("decoder"))
x = torch.randn(2, 8).to(device_for("encoder"))
print(dec(HOP))  # <- use
"""


def test_a_match_statement_on_a_known_subject_runs_the_arm_it_matches():
    # Round 39's t15: `device_for()` maps roles to GPUs with `match`; each call's role is known.
    (f,) = findings(MATCH.replace("HOP", "enc(x)"), "MP001")
    assert f.line == 19 and set(f.devices) == {"cuda:0", "cuda:1"}
    assert findings(MATCH.replace("HOP", 'enc(x).to(device_for("decoder"))'), "MP001") == []


def test_a_match_on_an_unknown_subject_knows_no_device():
    src = MATCH.replace('device_for("decoder")', "device_for(input())", 1).replace("HOP", "enc(x)")
    assert findings(src, "MP001") == []


DIVMOD = """
import torch
import torch.nn as nn

LAYERS_PER_GPU = 2


def layer_device(i):
    gpu, _ = divmod(i, LAYERS_PER_GPU)
    return torch.device("cuda", gpu)


layers = [nn.Linear(8, 8).to(layer_device(i)) for i in range(4)]
x = torch.randn(2, 8).to(layer_device(0))
for i, layer in enumerate(layers):
    x = layer(MOVE)  # <- use
print(x)
"""


def test_divmod_of_known_numbers_gives_each_layers_gpu():
    # Round 39's t09: `gpu, _ = divmod(i, LAYERS_PER_GPU)` spreads 4 layers over 2 GPUs.
    (f,) = findings(DIVMOD.replace("MOVE", "x"), "MP001")
    assert f.line == 16 and set(f.devices) == {"cuda:0", "cuda:1"}
    assert findings(DIVMOD.replace("MOVE", "x.to(layer_device(i))"), "MP001") == []
