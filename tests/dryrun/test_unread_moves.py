"""MP016 at run time for a move whose data is never read where it arrived (checks/reduced_after_move.py): a
batch dict moved whole to the text tower's GPU with the pixels the text side never reads, every layer's hidden
state sent to the output GPU for a pooling of the last two. Only a move made in a module's forward, onto a GPU,
with the function mode watching, is judged; its data used in any way (an op, a module run unchecked, a tensor
property like `.mT`, a host read) or kept alive keeps it silent."""

from dryrun_helpers import codes_at

BATCH_DICT = """
import torch
import torch.nn as nn


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.vision = nn.Linear(3 * 32 * 32, 64).to("cuda:0")
        self.text = nn.Embedding(100, 64).to("cuda:1")

    def forward(self, batch):
        img = self.vision(batch["pixels"].to("cuda:0").flatten(1))
        batch = {k: v.to("cuda:1") for k, v in batch.items() KEEP}  # <- hop
        return (self.text(batch["ids"]).mean(1) * img.to("cuda:1")).sum()


model = TwoTower()
for _ in range(STEPS):
    batch = {"pixels": torch.randn(16, 3, 32, 32), "ids": torch.randint(0, 100, (16, 12))}
    model(batch).backward()
"""


def test_a_batch_dict_moved_whole_with_entries_never_read_is_reported_at_the_move(script, dryrun_cli):
    s = script(BATCH_DICT.replace(" KEEP", "").replace("STEPS", "4"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = [f for f in report["findings"] if f["code"] == "MP016"]
    assert f["line"] == s.line("hop") and f["extra"]["unread"] is True
    assert f["devices"] == ["cpu", "cuda:1"] and "never read" in f["message"]
    assert f["extra"]["bytes_moved"] == 16 * 3 * 32 * 32 * 4  # the pixels, not the ids


def test_the_dict_moved_without_the_unread_entry_is_clean(script, dryrun_cli):
    s = script(BATCH_DICT.replace(" KEEP", ' if k != "pixels"').replace("STEPS", "4"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


HIDDEN = """
import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(256, 256).to(f"cuda:{i // 3}") for i in range(6))

    def forward(self, x):
        hidden = []
        for layer in self.layers:
            x = layer(x.to(layer.weight.device))
            hidden.append(x.to("cuda:1"))  # <- keep
        return POOL


enc = Encoder()
for _ in range(3):
    enc(torch.randn(64, 256)).sum().backward()
"""


def test_hidden_states_sent_over_for_a_pooling_of_the_last_two_are_reported(script, dryrun_cli):
    s = script(HIDDEN.replace("POOL", "torch.stack(hidden[-2:]).mean(0)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert ("MP016", s.line("keep")) in codes_at(report)


def test_every_hidden_state_pooled_is_clean(script, dryrun_cli):
    s = script(HIDDEN.replace("POOL", "torch.stack(hidden).mean(0)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    # (MP011 stays: the layer on cuda:1 moves again the state the line below it already moved there)
    assert status == 0 and ("MP016", s.line("keep")) not in codes_at(report), err


def test_a_moved_tensor_read_through_a_property_or_a_metadata_call_then_used_is_clean(script, dryrun_cli):
    # `.mT` gives a view that carries the data on; the matmul of that view reads it.
    s = script(
        """
        import torch
        import torch.nn as nn


        class Cross(nn.Module):
            def __init__(self):
                super().__init__()
                self.q = nn.Linear(128, 128).to("cuda:1")

            def forward(self, x, memory):
                k = memory.to("cuda:1")
                n = k.shape[0]
                return (self.q(x) @ k.mT).softmax(-1).sum() / n


        m = Cross()
        for _ in range(3):
            m(torch.randn(64, 128, device="cuda:1"), torch.randn(256, 128, device="cuda:0")).backward()
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_a_moved_tensor_only_measured_by_its_shape_is_reported(script, dryrun_cli):
    s = script(
        """
        import torch
        import torch.nn as nn


        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(128, 8).to("cuda:1")

            def forward(self, x, memory):
                k = memory.to("cuda:1")  # <- shape
                return self.fc(x).sum() / k.shape[0]


        m = Head()
        for _ in range(3):
            m(torch.randn(64, 128, device="cuda:1"), torch.randn(256, 128, device="cuda:0")).backward()
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP016", s.line("shape"))], err


def test_a_moved_tensor_the_program_keeps_or_returns_is_not_judged(script, dryrun_cli):
    s = script(
        """
        import torch
        import torch.nn as nn


        class Keep(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(128, 128).to("cuda:0")

            def forward(self, x):
                h = self.fc(x)
                return h, h.to("cuda:1")


        m = Keep()
        kept = [m(torch.randn(64, 128, device="cuda:0"))[1] for _ in range(3)]
        print(len(kept))
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


RECURSIVE_MOVER = """
import torch
import torch.nn as nn


def to_device(obj, dev):
    if isinstance(obj, dict):
        return {k: to_device(v, dev) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, dev) for v in obj)
    return obj.to(dev)  # <- helper


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lower = nn.Linear(256, 256).to("cuda:0")
        self.upper = nn.Linear(256, 8).to("cuda:1")

    def forward(self, x):
        h = self.lower(x.to("cuda:0"))
        out = to_device({"hidden": h, "maps": [h.softmax(-1), h.sigmoid()]}, "cuda:1")  # <- hop
        return self.upper(out["hidden"]).sum()


model = Net()
for _ in range(3):
    model(torch.randn(128, 256)).backward()
"""


def test_a_recursive_helpers_unread_moves_are_reported_at_the_line_that_called_it(script, dryrun_cli):
    # a user's to_device() is treated as a library's: the caller chose to move the logged maps along
    s = script(RECURSIVE_MOVER)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert {(f["code"], f["line"]) for f in report["findings"]} == {("MP016", s.line("hop"))}


def test_a_helper_called_once_per_tensor_keeps_its_own_line(script, dryrun_cli):
    src = RECURSIVE_MOVER.replace(
        'to_device({"hidden": h, "maps": [h.softmax(-1), h.sigmoid()]}, "cuda:1")',
        'dict(hidden=to_device(h, "cuda:1"), maps=to_device(h.softmax(-1), "cuda:1"))',
    )
    s = script(src)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert {(f["code"], f["line"]) for f in report["findings"]} == {("MP016", s.line("helper"))}
