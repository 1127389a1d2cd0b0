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
    # no collate_fn, or a lambda: nothing said about the labels
    assert lines(LOADER.replace(", collate_fn=COLLATE", "").replace("MOVE", "y")) == []
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
