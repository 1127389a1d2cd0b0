"""MP031 at run time (checks/host_layers.py): layers of a model whose other parts are on GPUs compute on the CPU,
because the loop that placed their siblings stopped early. Reported once per model, at the move nearest to them;
silent for a model all on one side, an embedding table kept on the host, and a host layer that never runs."""

from dryrun_helpers import codes_at

ZIP = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, devices):
        super().__init__()
        self.embed = EMBED
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(6))
        for blk, dev in zip(self.blocks, devices):  # <- loop
            blk.to(dev)
        self.spare = nn.Linear(64, 64)  # built, never used

    def forward(self, ids):
        x = self.embed(ids.to(self.embed.weight.device))
        for blk in self.blocks:
            x = blk(x.to(blk[0].weight.device))
        return x


model = Net(DEVICES)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.randint(0, 100, (8,))).sum().backward()
    opt.step()
"""


def test_blocks_a_zip_never_placed_are_reported_once_at_the_loop_that_stopped(script, dryrun_cli):
    s = script(ZIP.replace("EMBED", "nn.Embedding(100, 64)").replace("DEVICES", '["cuda:0", "cuda:1"]'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert codes_at(report) == [("MP031", s.line("loop"))]
    (f,) = report["findings"]
    assert f["extra"]["host_layers"] == ["blocks.2.0", "blocks.3.0", "blocks.4.0", "blocks.5.0", "spare"]
    assert f["devices"] == ["cpu", "cuda:0", "cuda:1"] and "blocks.2.0" in f["modules"][0]


def test_a_model_all_placed_all_on_the_host_or_with_a_host_embedding_table_is_clean(script, dryrun_cli):
    for embed, devices in (
        ("nn.Embedding(100, 64)", '["cuda:0"] * 3 + ["cuda:1"] * 3'),  # every block placed; the table on the host
        ("nn.Embedding(100, 64)", '["cpu"] * 6'),  # all on the host
        ("nn.Embedding(100, 64).to('cuda:0')", '["cuda:0"] * 3 + ["cuda:1"] * 3'),  # all on GPUs but the unused spare
    ):
        s = script(ZIP.replace("EMBED", embed).replace("DEVICES", devices))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert (status, report["findings"]) == (0, []), (embed, devices, err)


WALK = """
import torch
import torch.nn as nn


class Follow(nn.Sequential):
    def forward(self, x):  # each layer where its weights are (accelerate-hook style)
        for layer in self:
            w = next(layer.parameters(), None)
            x = layer(x.to(w.device) if w is not None else x)
        return x


model = Follow(nn.Linear(32, 64), nn.Dropout(0.1), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
layout = ["cuda:0", None, "cuda:0", None, "cuda:1"]
for child, dev in zip(model, layout):
    if next(child.parameters(), None) is None:
        STOP  # <- stop
    child.to(dev)
model(torch.randn(16, 32)).sum().backward()
"""


def test_a_placing_walk_that_breaks_at_a_layer_without_weights_is_reported(script, dryrun_cli):
    s = script(WALK.replace("STOP", "break"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert codes_at(report) == [("MP031", s.line("stop"))]  # the `break`, where the walk stopped
    assert report["findings"][0]["extra"]["host_layers"] == ["2", "4"]
    s = script(WALK.replace("STOP", "continue"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


PLAIN_LIST = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(64, 64)
        self.blocks = HOLD(nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(3))
        self.head = nn.Linear(64, 8)

    def forward(self, x):
        h = self.stem(x)
        for blk in self.blocks:
            h = blk(h.to(blk[0].weight.device))  # <- runs
        return self.head(h.to(self.head.weight.device))


model = Net().to("cuda:0")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.randn(16, 64).to("cuda:0")).sum().backward()
    opt.step()
"""


def test_layers_held_in_a_plain_list_stay_on_the_host_when_the_model_moves(script, dryrun_cli):
    # Round 34's t12: `model.to(gpu)` moves registered submodules only
    s = script(PLAIN_LIST.replace("HOLD", "list"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = [f for f in report["findings"] if f["code"] == "MP031"]
    assert f["line"] == s.line("runs") and f["devices"] == ["cpu", "cuda:0"]
    assert f["extra"]["plain_container"] == "blocks" and len(f["extra"]["host_layers"]) == 3
    assert "nn.ModuleList" in f["suggestion"]


def test_layers_held_in_a_module_list_move_with_the_model(script, dryrun_cli):
    s = script(PLAIN_LIST.replace("HOLD", "nn.ModuleList"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
