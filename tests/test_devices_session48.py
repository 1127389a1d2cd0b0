"""Round 37's and 38's lint misses, each as the general rule behind it (session 48)."""

from __future__ import annotations

from lint_helpers import findings

TABLE = """
import torch
import torch.nn as nn

COMPONENTS = ("encoder", "actor")
GPU = {name: torch.device(f"cuda:{INDEX}") for name in COMPONENTS}
encoder = nn.Linear(8, 8).to(GPU["encoder"])
actor = nn.Linear(8, 8).to(GPU["actor"])
actor(encoder(torch.randn(2, 8, device=GPU["encoder"])))  # <- hop
"""


def test_a_gpu_index_made_by_int_of_a_test_is_known():
    # Round 38's t13: `int(name in ("actor", "value"))` gives each component's GPU: 0 or 1.
    for index in ("int(name in ('actor', 'value'))", "int(name == 'actor')"):
        (f,) = findings(TABLE.replace("INDEX", index), "MP001")
        assert f.line == 9 and f.devices == ("cuda:0", "cuda:1"), index
    assert findings(TABLE.replace("INDEX", "int(name in ('actor', 'encoder'))"), "MP001") == []  # one GPU


SCALER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class TemperatureScaler(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_t = nn.Parameter(torch.zeros(1))

    def forward(self, logits):
        return logits / self.log_t.exp()


def calibrate(logits, targets):
    scaler = TemperatureScaler()PLACE
    opt = torch.optim.LBFGS(scaler.parameters(), lr=0.05)

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(scaler(logits), targets)  # <- call
        loss.backward()
        return loss

    opt.step(closure)
    return scaler


calibrate(torch.randn(8, 4, device="cuda:1"), torch.randint(0, 4, (8,), device="cuda:1"))
"""


def test_a_module_with_its_own_weights_built_and_never_placed_is_on_the_cpu_in_a_closure_too():
    # Round 38's t10: a temperature scaler built after the model was placed, never moved, called from L-BFGS's
    # closure with the GPU logits; returning it after the calls is no move.
    (f,) = findings(SCALER.replace("PLACE", ""), "MP001")
    assert f.line == 22 and "`scaler` (built at line 17) was never placed" in f.message
    assert "where `calibrate` builds it" in f.suggestion or "where `calibrate` builds it" in f.message
    assert findings(SCALER.replace("PLACE", ".to('cuda:1')")) == []
    # Moved by a caller before the calls, or built with `device=`-like knowledge it lacks: unknown, silent.
    passed = SCALER.replace("PLACE", "\n    scaler = prepare(scaler)")
    assert findings(passed, "MP001") == []


EMA = """
import copy

import torch
import torch.nn as nn

FEATURES, HEAD = map(torch.device, "cuda:0 cuda:1".split())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Linear(8, 8)
        self.head = nn.Linear(8, 8)


student = Net()
student.features.to(FEATURES)
student.head.to(HEAD)
teacher = copy.deepcopy(student).to(HEAD)
with torch.no_grad():
    for t_param, s_param in zip(teacher.parameters(), student.parameters()):
        t_param.mul_(0.99).add_(MOVED, alpha=0.01)
"""


def test_a_teacher_on_one_gpu_updated_from_a_split_students_parameters_is_mp001():
    # Round 38's t28: the devices come from a space-separated string the file splits (a text the pre-filter reads
    # as data: test_lint_livetext.py); the EMA update adds the student's cuda:0 weights into the teacher's cuda:1
    # weights in place.
    (f,) = findings(EMA.replace("MOVED", "s_param"), "MP001")
    assert f.line == 23 and "a parameter of `features`" in f.message
    assert findings(EMA.replace("MOVED", "s_param.to(t_param.device)"), "MP001") == []
