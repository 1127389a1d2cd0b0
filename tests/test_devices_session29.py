"""Session 29: batches a DataLoader gives through a collate_fn of the file."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def lines(src: str) -> list[tuple[int, str]]:
    r = analyze("t.py", textwrap.dedent(src), ALL, "m", {})
    return sorted((f.line, f.code) for f in r.findings)


LOADER = """
import functools
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

HEAD = "cuda:1"

def collate(batch, label_device="cuda:1"):
    x = torch.stack([b[0] for b in batch])
    y = torch.tensor([b[1] for b in batch])
    return x, MOVE

model = nn.Sequential(nn.Linear(8, 8).to("cuda:0"))
head = nn.Linear(8, 4).to(HEAD)
data = [(torch.randn(8), 1) for _ in range(64)]
loader = DataLoader(data, batch_size=8, collate_fn=COLLATE)
for x, y in loader:
    out = head(model(x.to("cuda:0")).to(HEAD))
    loss = F.cross_entropy(out, y)
"""


def _loader(move: str, collate: str = "collate") -> list[tuple[int, str]]:
    return lines(LOADER.replace("MOVE", move).replace("COLLATE", collate))


def test_a_collate_fn_that_moves_the_labels_to_the_wrong_gpu_is_mp008_where_they_meet():
    assert _loader("y.cuda(non_blocking=True)") == [(21, "MP008")]  # the current device, cuda:0
    assert _loader('y.to("cuda:0")') == [(21, "MP008")]
    assert _loader("y") == [(21, "MP008")]  # left on the host: the CPU's labels meet cuda:1's logits
    # through functools.partial, its keywords given
    assert _loader("y.to(label_device)", 'functools.partial(collate, label_device="cuda:0")') == [(21, "MP008")]


def test_a_collate_fn_that_moves_them_where_the_loss_is_is_clean():
    assert _loader('y.to("cuda:1")') == []
    assert _loader("y.cuda(1)") == []
    assert _loader("y.to(label_device)", 'functools.partial(collate, label_device="cuda:1")') == []
    assert _loader("y.to(label_device)", "functools.partial(collate)") == []  # its default


def test_batches_of_a_collate_fn_not_known_are_not_known():
    # a lambda: nothing said about the labels (without a collate_fn, PyTorch's own makes the labels a host
    # tensor: test_the_default_collate_keeps_a_datasets_tensors_on_the_host)
    assert lines(LOADER.replace(", collate_fn=COLLATE", "").replace("MOVE", "y")) == [(21, "MP008")]
    assert _loader("y.cuda()", "lambda b: collate(b)") == []


def test_a_call_in_an_f_string_runs_with_its_arguments_after_a_part_the_string_cannot_spell():
    src = """
    import torch

    def accuracy(labels, feats):
        idx = feats.topk(3, dim=1)[1]
        return torch.gather(labels.expand(feats.size(0), -1), 1, idx).float().mean()

    y = torch.randint(0, 10, (256,))
    f = torch.randn(8, 256, device="cuda:1")
    loss = f.sum()
    print(f"loss {loss.item():.3f} acc {accuracy(LABELS, f):.3f}")
    """
    assert lines(src.replace("LABELS", "y")) == [(6, "MP008")]  # in a metric: MP008
    assert lines(src.replace("LABELS", "y.to(f.device)")) == []


DATASET = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

class Pairs(Dataset):
    def __init__(self, n):
        self.x = torch.randn(n, 8)
        self.y = torch.randint(0, 4, (n,))

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

model = nn.Sequential(nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 4).to("cuda:0"))
loader = DataLoader(DATA, batch_size=16, shuffle=True, pin_memory=True)
for x, y in loader:
    out = model(MOVE)
    loss = nn.functional.cross_entropy(out, Y)
"""


def _dataset(data: str, move: str = 'x.to("cuda:0")', y: str = 'y.to("cuda:0")') -> list[tuple[int, str]]:
    return lines(DATASET.replace("DATA", data).replace("MOVE", move).replace("Y", y))


def test_the_default_collate_keeps_a_datasets_tensors_on_the_host():
    for data in ("TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))", "Pairs(64)"):
        assert _dataset(data, move="x") == [(20, "MP001")], data  # a host batch into the first layer on cuda:0
        assert _dataset(data, y="y") == [(21, "MP008")], data  # host labels
        assert _dataset(data) == [], data


def test_batches_a_loader_does_not_spell_out_are_not_known():
    for data in ("TensorDataset(*tensors)", "Pairs(64) if x else None", "list(range(64))"):
        assert _dataset(data, move="x", y="y") == [], data
    src = DATASET.replace("DATA", "Pairs(64)").replace("MOVE", "x").replace("Y", "y")
    assert lines(src.replace("batch_size=16", "batch_size=None")) == []  # no batching: samples as they are
    assert lines(src.replace("shuffle=True", "batch_sampler=sampler")) == []


UPDATE_BN = """
import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, update_bn
from torch.utils.data import DataLoader, TensorDataset

class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)).to("cuda:0")
        self.b = nn.Linear(8, 4).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x).to("cuda:1"))

loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,))), batch_size=16)
swa = AveragedModel(Split())
update_bn(loader, swa)
"""


def test_update_bn_runs_the_model_on_the_loaders_batches_where_they_are():
    assert lines(UPDATE_BN) == [(18, "MP001")]
    assert "pass `device='cuda:0'` to `update_bn(...)`" in "".join(
        f.message for f in analyze("t.py", textwrap.dedent(UPDATE_BN), ALL, "m", {}).findings
    )
    assert lines(UPDATE_BN.replace("update_bn(loader, swa)", 'update_bn(loader, swa, device="cuda:0")')) == []


def test_normal_and_bernoulli_of_tensors_draw_where_those_tensors_are():
    base = 'import torch\nx = torch.randn(4, 4, device="cuda:0")\ng = torch.Generator(device="cuda:0")\ny = x + {}\n'
    for drawn in (
        "torch.normal(torch.zeros_like(x), torch.full_like(x, 0.1))",
        "torch.normal(mean=x, std=1.0, generator=g)",
        "torch.bernoulli(torch.full(x.shape, 0.15, device=x.device))",
        "torch.bernoulli(x.sigmoid(), generator=g)",
        'torch.normal(0.0, 1.0, size=(4, 4), device="cuda:0")',
    ):
        assert lines(base.format(drawn)) == [], drawn
    for drawn in ("torch.normal(0.0, 1.0, size=(4, 4))", "torch.bernoulli(torch.rand(4, 4))"):
        assert lines(base.format(drawn)) == [(4, "MP001")], drawn  # on the host


def test_a_repeated_tuple_keeps_its_items_devices():
    src = """
    import torch
    import torch.nn as nn

    embed = nn.Embedding(100, 16).to("cuda:0")
    lstm = nn.LSTM(16, 16, batch_first=True).to("cuda:1")
    h = embed(torch.zeros(4, 5, dtype=torch.long, device="cuda:0")).to("cuda:1")
    state = (SOURCE.new_zeros(1, 4, 16),) * 2
    out, _ = lstm(h, state)
    """
    assert lines(src.replace("SOURCE", "embed.weight")) == [(9, "MP001")]  # (h, c) made where the embedding is
    assert lines(src.replace("SOURCE", "lstm.weight_hh_l0")) == []  # where the LSTM is
    # `[dev] * n`: the same device n times
    assert lines(
        'import torch\ndevs = ["cuda:0"] * 2\nx = torch.ones(2, device=devs[1]) + torch.ones(2, device="cuda:1")\n'
    ) == [(3, "MP001")]
    assert (
        lines(
            'import torch\ndevs = ["cuda:1"] * 2\nx = torch.ones(2, device=devs[1]) + torch.ones(2, device="cuda:1")\n'
        )
        == []
    )
