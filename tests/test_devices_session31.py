"""Session 31: numbers read off a CPU table (`alpha_bar[t]`, maybe 0-dim) mix with GPU tensors; `self.to(d)` in
an `__init__` moves a ModuleList's items without rebinding `self`, so a later loop over part of it is followed."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str, code: str = "MP001") -> list:
    """The findings of `code`, with the GPU counts the linter assumes by default."""
    return [f for f in analyze("t.py", textwrap.dedent(src), ALL, "m", {}, (2, 4, 8)).findings if f.code == code]


SCHEDULE = """
import torch

alpha_bar = torch.cumprod(1.0 - torch.linspace(1e-4, 0.05, 50), dim=0)
table = torch.randn(50, 16)
x0 = torch.randn(4, 16, device="cuda:0")
t = int(torch.randint(0, 50, ()))
USE
"""


def test_a_number_read_off_a_cpu_table_mixes_with_a_gpu_tensor():
    for use in (
        "x = alpha_bar[t].sqrt() * x0 + (1 - alpha_bar[t]).sqrt() * x0",
        "a = alpha_bar[t]\nx = a.float().clamp(0, 1) * x0",
        "x = x0 * table[t, 3]",
    ):
        assert findings(SCHEDULE.replace("USE", use)) == [], use


def test_a_row_or_a_gathered_slice_of_a_cpu_table_is_still_reported():
    torch_index = "x = x0 + table[torch.arange(4)]"
    assert len(findings(SCHEDULE.replace("USE", torch_index))) == 1
    assert len(findings(SCHEDULE.replace("USE", "x = x0 + table[0:4]"))) == 1
    # A 0-dim number made a row again (`unsqueeze`) no longer mixes.
    assert len(findings(SCHEDULE.replace("USE", "x = x0 + alpha_bar[t].unsqueeze(0).expand(16)"))) == 1


SPLIT = """
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


class Enc(nn.Module):
    def __init__(self, n=6, split=3):
        super().__init__()
        self.split = split
        self.blocks = nn.ModuleList(ITEM for _ in range(n))
        self.to("cuda:0")
        for blk in self.blocks[split:]:
            blk.to("cuda:1")

    def forward(self, x):
        for i, blk in enumerate(self.blocks):
            if i == self.split:
                x = x.to("cuda:1")
            x = blk(x)
        return x


model = Enc()
model(torch.randn(2, 4, device="cuda:0"))
"""


def test_blocks_moved_after_self_to_in_init_are_where_the_loop_put_them():
    for item in ("Block()", "nn.Linear(4, 4)"):
        assert findings(SPLIT.replace("ITEM", item)) == [], item


def test_a_hop_missing_at_the_split_is_reported():
    for item in ("Block()", "nn.Linear(4, 4)"):
        missing = SPLIT.replace("ITEM", item).replace('                x = x.to("cuda:1")\n', "                pass\n")
        got = findings(missing)
        assert len(got) == 1 and "cuda:1" in got[0].message, item


def test_an_index_past_the_last_gpu_is_reported_in_the_scripts_main_block():
    src = """
    import torch
    import torch.nn as nn

    class Head(nn.Module):
        def __init__(self, n_gpus):
            super().__init__()
            self.head = nn.Linear(4, 4).to(torch.device("cuda", n_gpus))

    if __name__ == "__main__":
        model = Head(torch.cuda.device_count())
    """
    got = findings(src, "MP009")
    assert [f.line for f in got] == [8]
    # The same index under a test of the count is what the test may guard against: not reported.
    guarded = src.replace('if __name__ == "__main__":', "if torch.cuda.device_count() > 4:")
    assert findings(guarded, "MP009") == []


TABLE = """
import torch

alphas_bar = torch.cumprod(1.0 - torch.linspace(1e-4, 0.02, 100_000), dim=0)  # 400 KB: above MP011's size floor
x0 = torch.randn(8, 16, device="cuda:0")
MOVE
for step in range(4):
    t = IDX
    ab = PICK
    x = ab[:, None] * x0
"""


def _table(move: str, idx: str, pick: str, code: str = "MP016") -> list:
    return findings(TABLE.replace("MOVE", move).replace("IDX", idx).replace("PICK", pick), code)


def test_a_table_moved_once_before_the_loop_that_indexes_it_is_no_waste():
    # Moved once, indexed on every pass (by host ids, or by ids on the GPU it went to): silent.
    assert _table('table = alphas_bar.to("cuda:0")', "torch.randint(0, 1000, (8,))", "table[t]") == []
    assert _table('table = alphas_bar.to("cuda:0")', 'torch.randint(0, 1000, (8,), device="cuda:0")', "table[t]") == []
    # Moved whole on every pass for the rows the index keeps: reported at the move (MP011's, the table being
    # unchanging: a repeated copy of a constant is its alone).
    every_pass = ("", "torch.randint(0, 1000, (8,))", 'alphas_bar.to("cuda:0")[t]')
    assert [f.line for f in _table(*every_pass, code="MP011")] == [9]
