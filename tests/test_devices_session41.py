"""Session 41: the same data copied twice through a detached view (MP011), a recurrence's per-step state moved to
another GPU only to be stacked there after the loop (MP021), a one-hot encoding moved between GPUs (MP016), and
`len()` of a string constant as a size."""

from __future__ import annotations

from lint_helpers import findings, lines

GAN = """
import torch
import torch.nn as nn

G = nn.Linear(4096, 4096).to("cuda:0")
D = nn.Linear(4096, 1).to("cuda:1")
for step in range(4):
    fake = G(torch.randn(64, 4096, device="cuda:0"))
    FIRST
    d_fake = D(SECOND)  # <- second
    loss = D(fake_d).mean() + d_fake.mean()
    loss.backward()
"""


def test_a_detached_view_copied_after_the_tensor_was_is_a_second_copy():
    src = GAN.replace("FIRST", 'fake_d = fake.to("cuda:1")').replace("SECOND", 'fake.detach().to("cuda:1")')
    (f,) = findings(src, "MP011")
    assert f.line == 10 and "`fake_d.detach()`" in f.message
    # the other order: the detached copy first, the tensor itself second
    src = GAN.replace("FIRST", 'd_fake = D(fake.detach().to("cuda:1"))').replace("SECOND", 'fake.to("cuda:1")')
    src = src.replace("D(fake_d)", "D(fake)")
    assert lines(src, "MP011") == [10]


def test_the_fix_reusing_the_copy_and_a_rebound_name_are_clean():
    fixed = GAN.replace("FIRST", 'fake_d = fake.to("cuda:1")').replace("SECOND", "fake_d.detach()")
    assert lines(fixed, "MP011") == []
    rebound = GAN.replace("FIRST", 'fake_d = fake.to("cuda:1"); fake = fake * 2').replace(
        "SECOND", 'fake.detach().to("cuda:1")'
    )
    assert lines(rebound, "MP011") == []
    other = GAN.replace("FIRST", 'fake_d = fake.to("cuda:1")').replace("SECOND", 'fake.detach().to("cuda:0")')
    assert lines(other, "MP011") == []


RNN = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(64, 64).to("cuda:0")
        self.head = nn.Linear(64, 8).to("cuda:1")

    def forward(self, x):
        h = torch.zeros(x.shape[0], 64, device="cuda:0")
        outs = []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t].to("cuda:0"), h)
            APPEND  # <- append
        return self.head(GATHER)
"""


def test_a_recurrent_state_moved_each_step_to_be_stacked_after_the_loop_is_per_item():
    src = RNN.replace("APPEND", 'outs.append(h.to("cuda:1"))').replace("GATHER", "torch.stack(outs, 1)")
    (f,) = findings(src, "MP021")
    assert f.line == 17 and "torch.stack(outs, 1)" in f.message and "line 18" in f.message


def test_stacking_first_a_list_read_in_the_loop_and_moves_to_the_host_are_clean():
    fixed = RNN.replace("APPEND", "outs.append(h)").replace("GATHER", 'torch.stack(outs, 1).to("cuda:1")')
    assert lines(fixed, "MP021") == []
    read = RNN.replace("APPEND", 'outs.append(h.to("cuda:1")); print(outs[-1].sum())')
    assert lines(read.replace("GATHER", "torch.stack(outs, 1)"), "MP021") == []
    # to the host: how evaluation loops keep GPU memory flat
    host = RNN.replace("APPEND", "outs.append(h.cpu())").replace("GATHER", 'torch.stack(outs, 1).to("cuda:1")')
    assert lines(host, "MP021") == []


def test_stage_outputs_of_micro_batches_moved_then_concatenated_are_left_alone():
    # each pass's moved value is new (no state carried from pass to pass): a few large pieces
    src = """
    import torch
    import torch.nn as nn

    s0 = nn.Linear(64, 64).to("cuda:0")
    s1 = nn.Linear(64, 64).to("cuda:1")

    def run(x):
        outs = []
        for mb in x.split(8):
            outs.append(s0(mb.to("cuda:0")).to("cuda:1"))
        return s1(torch.cat(outs))
    """
    assert lines(src, "MP021") == []


def test_a_one_hot_encoding_moved_between_gpus_is_oversized_but_not_from_the_host():
    src = """
    import torch
    import torch.nn.functional as F

    AA = "ACDEFGHIKLMNPQRSTVWYX"
    ids = torch.randint(0, 20, (32, 256), device="cuda:0")
    x = F.one_hot(ids, len(AA)).float().to("cuda:1")  # <- gpu
    y = F.one_hot(ids.cpu(), 4).float().to("cuda:1")
    z = F.one_hot(torch.randint(0, 20, (32,)), len(AA)).float().to("cuda:1")
    w = F.one_hot(ids.to("cuda:1"), len(AA)).float()
    """
    got = findings(src, "MP016")
    assert [f.line for f in got] == [7]
    assert "F.one_hot" in got[0].message and "cuda:0" in got[0].message
