"""Issue 11's waste families on virtual GPUs, each at the line to change, and each correct variant silent:
a GPU -> host -> GPU detour (MP005), large predictions moved to the small targets' GPU (MP014, a warning),
a fresh copy of data computed only from a buffer or constants (MP011 by provenance), a host constant moved
by every layer (MP011), a module shared by all stages left on the first GPU and round-robin placement
(MP006, with the advice that fits each)."""

import pytest
import torch
from dryrun_helpers import codes_at


def only_finding(dryrun_cli, s, code, tag):
    """The program runs to its end on 2 virtual GPUs with one finding, `code` at the line marked `tag`."""
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err  # a waste finding: the program runs on
    assert codes_at(report) == [(code, s.line(tag))]
    return report["findings"][0]


def assert_silent(dryrun_cli, s):
    """The program runs to its end on 2 virtual GPUs with no finding."""
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


# -- a GPU -> host -> GPU detour (MP005) --------------------------------------------------------------

HOST_HOP = """
import torch
import torch.nn as nn

a = nn.Linear(256, 256).to("cuda:0")
b = nn.Linear(256, 256).to("cuda:1")
opt = torch.optim.SGD([*a.parameters(), *b.parameters()], lr=0.1)
for step in range(2):
    h = a(torch.randn(128, 256).to("cuda:0"))
    {hop}
    b(h.to("cuda:1")).sum().backward()  # <- hop
    opt.step()
"""


def test_a_gpu_to_gpu_copy_through_the_host_is_reported_where_it_leaves_the_host(script, dryrun_cli):
    s = script(HOST_HOP.format(hop="h = h.cpu()  # <- down"))
    f = only_finding(dryrun_cli, s, "MP005", "hop")
    assert f["devices"] == ["cuda:0", "cpu", "cuda:1"]
    assert "128 KiB" in f["message"] and f"copied cuda:0 -> cpu at {s.path}:{s.line('down')}" in f["message"]
    assert f["suggestion"].startswith("move the tensor that is still on cuda:0 straight to cuda:1")


@pytest.mark.parametrize(
    "hop",
    [
        "pass",  # the direct copy
        "h = h.cpu() * 2",  # work on the host: the host copy is used
        "h = h[:8].cpu()",  # 8 KiB: both ways cost about one copy's launch
    ],
)
def test_direct_copies_host_work_and_small_detours_stay_silent(script, dryrun_cli, hop):
    s = script(HOST_HOP.format(hop=hop))
    if "[:8]" in hop:
        s = script(HOST_HOP.format(hop=hop).replace("b(h.to", "b(h.repeat(16, 1).to"), name="small.py")
    assert_silent(dryrun_cli, s)


# -- large predictions moved to the targets' GPU (MP014, a warning) ---------------------------------------

LOGITS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

s0 = nn.Linear(64, 64).to("cuda:0")
s1 = nn.Linear(64, {vocab}).to("cuda:1")
opt = torch.optim.SGD([*s0.parameters(), *s1.parameters()], lr=0.1)
for step in range(2):
    y = torch.randint(0, {vocab}, (16,)).to("cuda:0")
    logits = s1(s0(torch.randn(16, 64).to("cuda:0")).to("cuda:1"))
    {loss}
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("criterion", ["F.cross_entropy", "nn.CrossEntropyLoss()"])
def test_logits_moved_to_the_labels_gpu_name_the_cheaper_direction_and_the_bytes_saved(script, dryrun_cli, criterion):
    loss = f"loss = {criterion}(logits.to(y.device), y)  # <- move"
    s = script(LOGITS.format(vocab=32000, loss=loss))
    f = only_finding(dryrun_cli, s, "MP014", "move")
    assert f["severity"] == "warning" and f["devices"] == ["cuda:1", "cuda:0"]
    # 16 x 32000 float32 = 2 MiB of logits against 128 bytes of labels
    assert "moved cuda:1 -> cuda:0 here only to meet the targets (128 bytes)" in f["message"]
    assert "copies 2.0 MiB less per forward, and as much again in backward" in f["message"]
    assert "move the targets with `.to('cuda:1')`" in f["suggestion"]


def test_logits_moved_on_one_line_and_used_by_the_loss_on_another(script, dryrun_cli):
    loss = "logits = logits.to('cuda:0')  # <- move\n    loss = F.cross_entropy(logits.view(-1, 32000), y)"
    s = script(LOGITS.format(vocab=32000, loss=loss))
    _, report, _ = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP014", s.line("move"))]


CTC = """
import torch
import torch.nn as nn
import torch.nn.functional as F

DETERMINISTIC
front, head = nn.Linear(40, 64).to("cuda:0"), nn.Linear(64, 32).to("cuda:1")
opt = torch.optim.SGD([*front.parameters(), *head.parameters()], lr=0.1)
for step in range(3):
    targets = torch.randint(1, 32, (16, 20)).to("cuda:1")
    h = front(torch.randn(100, 16, 40, device="cuda:0"))
    log_probs = head(h.to("cuda:1")).log_softmax(-1)
    lengths = [100] * 16
    LOSS  # <- loss
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_ctc_loss_computed_on_host_copies_in_training_is_mp014(script, dryrun_cli):
    # (probe37 t10) `F.ctc_loss(log_probs.cpu(), targets.cpu(), ...)`: 200 KiB of log-probabilities cross to the
    # host every step and their gradient comes back; CTC runs on the GPU (its lengths may stay on the host).
    host = "loss = F.ctc_loss(log_probs.cpu(), targets.cpu(), lengths, [20] * 16)"
    s = script(CTC.replace("DETERMINISTIC", "").replace("LOSS", host))
    f = only_finding(dryrun_cli, s, "MP014", "loss")
    assert f["devices"] == ["cuda:1", "cpu"] and "compute the loss on cuda:1" in f["suggestion"]
    for deterministic, loss in (
        ("", "loss = F.ctc_loss(log_probs, targets, lengths, [20] * 16)"),  # the fix
        # CTC's CUDA backward is not deterministic: a run that asks for determinism computes it on the host
        ("torch.use_deterministic_algorithms(True)", host),
    ):
        try:
            assert_silent(dryrun_cli, script(CTC.replace("DETERMINISTIC", deterministic).replace("LOSS", loss)))
        finally:
            torch.use_deterministic_algorithms(False)  # (the dry run runs in this process)


LOOP_WITHOUT_OPTIMIZER = """
import torch
import torch.nn as nn

s0, s1 = nn.Linear(64, 64).to("cuda:0"), nn.Linear(64, 32000).to("cuda:1")
criterion = nn.CrossEntropyLoss()
for _ in range(3):  # no optimizer step: nothing ends a step
    y = torch.randint(0, 32000, (16,), device="cuda:0")
    with torch.set_grad_enabled(TRAIN):
        logits = s1(s0(torch.randn(16, 64, device="cuda:0")).to("cuda:1"))
        loss = LOSS(logits.to(y.device), y)  # <- move
    if TRAIN:
        loss.backward()
"""


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("loss", ["nn.functional.cross_entropy", "criterion"])
def test_transfers_outside_modules_are_chained_per_forward_pass(script, dryrun_cli, train, loss):
    # Each pass crosses twice (the hop, then the logits back for the loss: MP014's waste). The loss
    # (and a backward) ends the pass; without that, the passes of a loop with no optimizer step (an
    # evaluation loop, or one that never steps) read as one chain crossing 2 x N times (a false MP006).
    s = script(LOOP_WITHOUT_OPTIMIZER.replace("TRAIN", str(train)).replace("LOSS", loss))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP014", s.line("move"))]


GENERATE = """
import torch
import torch.nn as nn

embed, head = nn.Embedding(100, 32).to("cuda:0"), nn.Linear(32, 100).to("cuda:1")
tok = torch.zeros(2, 1, dtype=torch.long, device="cuda:0")
with torch.no_grad():
    for _ in range(4):  # each step feeds the last stage's output back to the first stage
        h = embed(tok).to("cuda:1")  # <- hop
        tok = head(h).argmax(-1).to("cuda:0")  # <- back
"""


def test_a_generation_loop_feeding_the_last_stage_back_to_the_first_is_silent(script, dryrun_cli):
    # Calling the first stage again starts the next pass: one hop and one way back per step is the
    # split's cost, not ping-pong (it read as one chain crossing 8 times).
    s = script(GENERATE)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, [])


def test_layers_alternating_devices_called_from_a_loop_still_cross_at_every_layer(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

layers = [nn.Linear(32, 32).to(f"cuda:{i % 2}") for i in range(6)]
with torch.no_grad():
    for _ in range(2):
        h = torch.randn(4, 32, device="cuda:0")
        for i, layer in enumerate(layers):
            h = layer(h.to(f"cuda:{i % 2}"))  # <- hop
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP006", s.line("hop"))]


@pytest.mark.parametrize(
    ("vocab", "loss"),
    [
        (32000, "loss = F.cross_entropy(logits, y.to(logits.device))"),  # the targets move: right
        (10, "loss = F.cross_entropy(logits.to(y.device), y)"),  # 640 bytes of logits: either way
        (32000, "loss = F.mse_loss(logits.to('cuda:0'), torch.randn(16, 32000).to('cuda:0'))"),  # as large
    ],
)
def test_targets_moved_small_logits_and_large_targets_stay_silent(script, dryrun_cli, vocab, loss):
    s = script(LOGITS.format(vocab=vocab, loss=loss))
    assert_silent(dryrun_cli, s)


# -- a fresh copy of unchanging data (MP011 by provenance) --------------------------------------------

CAMERAS = """
import torch
import torch.nn as nn

class Cams(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("proj", torch.randn(6, 64, 64{where}))
        self.head = nn.Linear(64, 64).to("cuda:0")
        self.offloaded = nn.Parameter(torch.randn(64, 64))  # a weight kept on the host on purpose

    def forward(self, x, cam):
        B = x.shape[0]
        p = {copy}  # <- copy
        return self.head(torch.bmm(p, x.to("cuda:0")))

model = Cams()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    model(torch.randn(8, 64, 64), 2).sum().backward()
    opt.step()
"""


def test_a_fresh_copy_computed_from_a_buffer_every_forward_is_a_repeated_transfer(script, dryrun_cli):
    s = script(CAMERAS.format(where="", copy="self.proj[cam].repeat(B, 1, 1).float().to('cuda:0')"))
    f = only_finding(dryrun_cli, s, "MP011", "copy")
    assert "computed only from buffers and constants" in f["message"]
    assert f["devices"] == ["cpu", "cuda:0"] and f["modules"] == ["model"]
    assert f["suggestion"].startswith("make it on cuda:0: keep its buffer there")


def test_a_fresh_host_constant_made_in_forward_and_moved_every_call(script, dryrun_cli):
    s = script(CAMERAS.format(where="", copy="torch.ones(B, 64, 64).tril().to('cuda:0')"))
    _, report, _ = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP011", s.line("copy"))]


@pytest.mark.parametrize(
    ("where", "copy"),
    [
        (", device='cuda:0'", "self.proj[cam].repeat(B, 1, 1).float()"),  # the buffer lives there
        ("", "torch.randn(B, 64, 64).to('cuda:0')"),  # fresh random data each call
        ("", "(self.proj[cam] * x[0]).repeat(B, 1, 1).to('cuda:0')"),  # depends on the input
        (
            "",
            "self.proj[cam][:4, :4].repeat(B, 1, 1).to('cuda:0').mean() + torch.ones(B, 64, 64, device='cuda:0')",
        ),  # 512 bytes
        ("", "self.offloaded.t().repeat(B, 1, 1).to('cuda:0')"),  # a parameter changes at each step
    ],
)
def test_copies_of_changing_data_small_copies_and_buffers_kept_there_stay_silent(script, dryrun_cli, where, copy):
    s = script(CAMERAS.format(where=where, copy=copy))
    assert_silent(dryrun_cli, s)


# -- a host constant moved by every layer (MP011) ---------------------------------------------------------

# Two training steps of the model `Net` a program defines.
TRAIN = """
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    model(torch.randn(256, 256)).sum().backward()
    opt.step()
"""

PER_LAYER = (
    """
import torch
import torch.nn as nn

class Block(nn.Module):
    def __init__(self, d, dev):
        super().__init__()
        self.lin = nn.Linear(d, d).to(dev)
        self.dev = dev

    def forward(self, x, mask):
        return self.lin(x) * mask.to(self.dev)  # <- mask

class Net(nn.Module):
    def __init__(self, d=256, n=8):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d, f"cuda:{{i * 2 // n}}") for i in range(n)])

    def forward(self, x):
        mask = {mask}
        for b in self.blocks:
            x = b(x.to(b.dev), mask)
        return x
"""
    + TRAIN
)


def test_a_host_constant_moved_by_every_layer_is_reported_once_per_device(script, dryrun_cli):
    s = script(PER_LAYER.format(mask="torch.ones(256, 256).tril()"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert codes_at(report) == [("MP011", s.line("mask"))] * 2
    assert sorted(f["devices"][1] for f in report["findings"]) == ["cuda:0", "cuda:1"]
    assert {f["extra"]["count"] for f in report["findings"]} == {7}  # 3 repeats per forward x 2 + the next


def test_a_constant_already_on_each_layers_device_is_silent(script, dryrun_cli):
    s = script(PER_LAYER.format(mask="{d: torch.ones(256, 256, device=d).tril() for d in ('cuda:0', 'cuda:1')}"))
    s = script(s.path.read_text().replace("mask.to(self.dev)", "mask[self.dev]"), name="kept.py")
    assert_silent(dryrun_cli, s)


# -- a module shared by all stages left on the first GPU, round-robin placement (MP006) -------------------

SHARED = (
    """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self, d=256, n=8):
        super().__init__()
        self.devs = [f"cuda:{{i * 2 // n}}" for i in range(n)]
        self.blocks = nn.ModuleList([nn.Linear(d, d).to(dev) for dev in self.devs])
        {norm}

    def forward(self, x):
        for i, (b, dev) in enumerate(zip(self.blocks, self.devs)):
            x = b({call}.to(dev))  # <- layer
        return x
"""
    + TRAIN
)


def test_a_module_shared_by_all_stages_on_the_first_gpu_names_the_module(script, dryrun_cli):
    s = script(SHARED.format(norm="self.norm = nn.LayerNorm(d).to('cuda:0')", call="self.norm(x.to('cuda:0'))"))
    f = only_finding(dryrun_cli, s, "MP006", "layer")
    assert "the layers of model.blocks are grouped by device (0-3 on cuda:0, 4-7 on cuda:1)" in f["message"]
    assert "model.norm on cuda:0 is shared by every stage, so each layer off cuda:0 crosses twice" in f["message"]
    assert f["modules"] == ["model.blocks", "model.norm"]
    assert f["suggestion"].startswith("run the shared module on each stage's device")


def test_a_module_every_layer_holds_is_named_as_shared(script, dryrun_cli):
    s = script(
        """
import torch
import torch.nn as nn

class Block(nn.Module):
    def __init__(self, dev, norm):
        super().__init__()
        self.lin = nn.Linear(256, 256).to(dev)
        self.norm = norm  # one LayerNorm for all blocks, on cuda:0

    def forward(self, x):
        return self.lin(self.norm(x.to("cuda:0")).to(self.lin.weight.device))  # <- layer

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        norm = nn.LayerNorm(256).to("cuda:0")
        self.blocks = nn.Sequential(*[Block(f"cuda:{i * 2 // 8}", norm) for i in range(8)])

    def forward(self, x):
        return self.blocks(x)
"""
        + TRAIN
    )
    f = only_finding(dryrun_cli, s, "MP006", "layer")
    assert "the layers of model.blocks are grouped by device (0-3 on cuda:0, 4-7 on cuda:1)" in f["message"]
    assert "model.blocks.0.norm on cuda:0 is shared by every stage" in f["message"]


def test_one_copy_of_the_shared_module_per_device_is_silent(script, dryrun_cli):
    norm = "self.norms = nn.ModuleList([nn.LayerNorm(d).to(dev) for dev in self.devs])"
    s = script(SHARED.format(norm=norm, call="self.norms[i](x.to(dev))"))
    assert_silent(dryrun_cli, s)


def test_round_robin_placement_is_reported_with_the_blocked_grouping(script, dryrun_cli):
    s = script(SHARED.replace("i * 2 // n", "i % 2").format(norm="pass", call="x"))
    f = only_finding(dryrun_cli, s, "MP006", "layer")
    assert "crosses devices 7 times per forward" in f["message"]
    assert "the layers of model.blocks alternate between cuda:0, cuda:1" in f["message"]
    assert "(model.blocks 0-3 on cuda:0, 4-7 on cuda:1)" in f["suggestion"]


def test_blocked_placement_is_silent(script, dryrun_cli):
    s = script(SHARED.format(norm="pass", call="x"))
    assert_silent(dryrun_cli, s)


# -- a group of tensors moved stage to stage, read where it arrives (MP005) ----------------------------

# A pipeline helper moves (activation, mask) together after each stage, the last stage's back to the
# first GPU (ParlAI's PipelineHelper.chunk_to). The mask comes back unchanged, but the layers on
# cuda:1 read it: it was needed there, so the move is no round trip. Read by a module (whose
# repeated calls run unchecked, by the signature cache) or by a torch op at the call site.
GROUP_MOVES = """
import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)

    def forward(self, x, mask=None):
        x = torch.relu(self.lin(x))
        return x if mask is None else x.masked_fill(~mask, 0.0)


def move(group, dev):
    return tuple(t.to(dev) for t in group)  # <- move


stages = [nn.ModuleList([Layer(), Layer()]).to(f"cuda:{{i}}") for i in range(2)]
head = nn.Linear(64, 1).to("cuda:0")
for step in range(3):
    group = (torch.randn(8, 64, device="cuda:0"), torch.rand(8, 64, device="cuda:0") > 0.5)
    for i, stage in enumerate(stages):
        h, m = group
        for layer in stage:
            h = {call}
        group = move((h, m), f"cuda:{{(i + 1) % 2}}")
    head(group[0] * group[1]).sum().backward()
print("finished")
"""


@pytest.mark.parametrize("call", ["layer(h, m)", "layer(h).masked_fill(~m, 0.0)"])
def test_a_tensor_read_where_it_was_moved_is_no_round_trip(script, dryrun_cli, call):
    assert_silent(dryrun_cli, script(GROUP_MOVES.format(call=call)))


def test_a_tensor_no_layer_reads_where_it_was_moved_is_a_round_trip(script, dryrun_cli):
    s = script(GROUP_MOVES.format(call="layer(h, m) if i == 0 else layer(h)"))
    f = only_finding(dryrun_cli, s, "MP005", "move")
    assert f["devices"] == ["cuda:0", "cuda:1"]


# Each stage sends its output back to the primary GPU and the next stage, on the other GPU, moves its
# input straight back first: the module that received the data never used it on the primary GPU, so this
# is a round trip (the stage's call once counted as a use of its input). A next stage on the primary GPU
# uses it there: silent.
BACK_TO_PRIMARY = """
import torch
import torch.nn as nn


class Stage(nn.Module):
    def __init__(self, dev):
        super().__init__()
        self.dev = dev
        self.net = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64)).to(dev)

    def forward(self, x):
        y = self.net(x.to(self.dev))  # <- back
        return y.to("cuda:0")


s0, s1, s2 = Stage("cuda:0"), Stage("cuda:1"), Stage("{last}")
opt = torch.optim.SGD([*s0.parameters(), *s1.parameters(), *s2.parameters()], lr=0.01)
for _ in range(3):
    h = s2(s1(s0(torch.randn(32, 64, device="cuda:0"))))
    opt.zero_grad()
    h.pow(2).mean().backward()
    opt.step()
print("finished")
"""


def test_a_stage_that_moves_its_input_straight_back_makes_a_round_trip(script, dryrun_cli):
    s = script(BACK_TO_PRIMARY.format(last="cuda:1"))
    f = only_finding(dryrun_cli, s, "MP005", "back")
    assert f["devices"] == ["cuda:1", "cuda:0"]


def test_a_stage_on_the_primary_gpu_uses_what_came_back(script, dryrun_cli):
    assert_silent(dryrun_cli, script(BACK_TO_PRIMARY.format(last="cuda:0")))


# -- an offload: the GPU copy freed while the data waits on the host (MP005) ----------------------------
# A copy to the host, the GPU original freed, other work on that GPU, and the host copy brought back: the
# memory went to that work, so the return trip is the price of an offload, not a round trip. Freed with
# nothing allocated on that GPU before the data comes back, the offload saved nothing: still reported
# (as `h = h.to("cuda:1")` then `h = h.to("cuda:0")` is, whose first copy frees its original too).

OFFLOAD = """
import torch
import torch.nn as nn

a = nn.Linear(256, 256).to("cuda:0")
b = nn.Linear(256, 256).to("cuda:0")
for step in range(2):
    with torch.no_grad():
        h = a(torch.randn(16384, 256, device="cuda:0"))  # 16 MiB: a share of the GPU's memory worth offloading
        h_host = h.cpu()  # <- down
        {between}
        h = h_host.to("cuda:0")  # <- back
        print(float(b(h).sum()))  # used whole where it came back (only reduced there: MP016)
"""


@pytest.mark.parametrize(
    "between",
    [
        "del h; z = b(torch.randn(512, 256, device='cuda:0'))",  # freed, its memory used meanwhile
        "h = None; z = [b(torch.randn(64, 256, device='cuda:0')) for _ in range(3)]",
    ],
)
def test_an_offload_whose_gpu_copy_was_freed_and_reused_is_silent(script, dryrun_cli, between):
    assert_silent(dryrun_cli, script(OFFLOAD.format(between=between)))


@pytest.mark.parametrize(
    "between, freed",
    [
        ("del h", True),  # freed, but nothing needed the memory before the data came back
        ("z = b(torch.randn(512, 256, device='cuda:0'))", False),  # still on cuda:0: keep using it
    ],
)
def test_a_round_trip_that_frees_nothing_useful_is_reported(script, dryrun_cli, between, freed):
    s = script(OFFLOAD.format(between=between))
    f = only_finding(dryrun_cli, s, "MP005", "back")
    assert f"at {s.path}:{s.line('down')}" in f["message"]
    assert ("freed" in f["message"]) == freed, f["message"]
    assert ("still on cuda:0" in f["suggestion"]) == (not freed), f["suggestion"]


def test_a_small_copy_kept_on_the_host_frees_too_little_to_be_an_offload(script, dryrun_cli):
    # A recurrent state sent to the host between two chunks (`h.detach().cpu()` where `.detach()` was meant): its
    # GPU copy is freed and the GPU goes on working, but 128 KiB is no share of its memory worth two copies.
    small = OFFLOAD.replace("16384, 256", "128, 256").format(
        between="del h; z = b(torch.randn(512, 256, device='cuda:0'))"
    )
    s = script(small)
    f = only_finding(dryrun_cli, s, "MP005", "back")
    assert "too little freed for two copies" in f["message"], f["message"]


def test_logits_moved_to_the_hosts_labels_in_training_are_reported_and_a_host_evaluation_is_not(script, dryrun_cli):
    host = LOGITS.format(vocab=32000, loss="loss = F.cross_entropy(logits.to(y.device), y)  # <- move").replace(
        '.to("cuda:0")\n    logits', "\n    logits"
    )
    s = script(host)
    f = only_finding(dryrun_cli, s, "MP014", "move")
    assert f["devices"] == ["cuda:1", "cpu"] and "moved cuda:1 -> cpu here only to meet the targets" in f["message"]
    evaluation = host.replace("for step in range(2):", "with torch.no_grad():\n  for step in range(2):")
    evaluation = evaluation.replace("    loss.backward()\n    opt.step()\n", "").replace("\n    ", "\n      ")
    s = script(evaluation)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0 and "MP014" not in [f["code"] for f in report["findings"]], err


ANCHORS = """
import torch
import torch.nn as nn


def make_anchors(h, w, stride{device_param}):
    ys = (torch.arange(h, dtype=torch.float32{device_arg}) + 0.5) * stride
    xs = (torch.arange(w, dtype=torch.float32{device_arg}) + 0.5) * stride
    cy, cx = torch.meshgrid(ys, xs, indexing="ij")
    ctr = torch.stack([cx, cy], dim=-1).reshape(-1, 2)
    return torch.cat([ctr - 16, ctr + 16], dim=-1)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.box = nn.Linear(4, 4).to("cuda:1")

    def forward(self, f):
        anchors = make_anchors(128, 128, 8{call_arg}).to(f.device)  # <- move
        return self.box(anchors[: f.shape[0]]) + f


head = Head()
for step in range(3):
    head(torch.randn(16, 4, device="cuda:1"))
"""


def test_a_constant_built_through_stack_and_cat_on_the_host_every_forward_is_a_repeat(script, dryrun_cli):
    s = script(ANCHORS.format(device_param="", device_arg="", call_arg=""))
    f = only_finding(dryrun_cli, s, "MP011", "move")
    assert "computed only from buffers and constants" in f["message"], f["message"]
    made_there = ANCHORS.format(
        device_param=", device=None", device_arg=", device=device", call_arg=", device=f.device"
    )
    assert_silent(dryrun_cli, script(made_there))


METRICS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

net = nn.Linear(16, 8).to("cuda:1")
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(2):
    loss = F.cross_entropy(net(torch.randn(256, 16).to("cuda:1")), torch.randint(0, 8, (256,)).to("cuda:1"))
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    for b in range(2):
        t = torch.randint(0, 8, (65536,))
        logits = net(torch.randn(65536, 16).to("cuda:1"))
        acc = (logits.argmax(1) == t.to(logits.device)).float().mean()
        err = (logits.argmax(1) != t.to(logits.device)).float().mean()
        {third}
        print(float(acc), float(err))
"""


def test_after_training_one_tensor_moved_three_times_per_batch_is_reported_and_twice_is_not(script, dryrun_cli):
    three = "top = (logits.argmax(1) == t.to(logits.device)).sum()  # <- third"
    s = script(METRICS.format(third=three))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    found = [f for f in report["findings"] if f["code"] == "MP011"]
    assert s.line("third") in {f["line"] for f in found}, found
    assert_silent(dryrun_cli, script(METRICS.format(third="pass")))  # two evaluations of one batch: a copy once


TWO_PASSES = """
import torch
import torch.nn as nn

net = nn.Linear(784, 32).to("cuda:0")
data = torch.randn(384, 784)
with torch.no_grad():
    centre = torch.zeros(32, device="cuda:0")
    for chunk in data.split(128):
        centre += net(chunk.to("cuda:0")).sum(0)  # <- first
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for chunk in data.split(128):
    loss = (net(chunk.to("cuda:0")) - centre).pow(2).mean()  # <- again
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_second_pass_over_the_same_batches_is_no_repeat_and_a_batch_moved_twice_in_it_is(script, dryrun_cli):
    # (probe_dr34 c35: Deep SVDD's centre computed in a no-grad pass over the batches, then the training pass)
    assert_silent(dryrun_cli, script(TWO_PASSES))
    twice = TWO_PASSES.replace(
        '(net(chunk.to("cuda:0")) - centre).pow(2).mean()  # <- again',
        '(net(chunk.to("cuda:0")) - centre).pow(2).mean() + net(chunk.to("cuda:0")).mean()  # <- again',
    )
    status, report, err = dryrun_cli(script(twice), "--gpus", "2")
    assert status == 0, err
    assert {f["code"] for f in report["findings"]} == {"MP011"}


SIDE_BY_SIDE = """
import torch
import torch.nn as nn

g_ab = nn.Linear(256, 256).to("cuda:0")
g_ba = nn.Linear(256, 256).to("cuda:1")
opt = torch.optim.SGD([*g_ab.parameters(), *g_ba.parameters()], lr=0.1)
for step in range(2):
    real_a = torch.randn(512, 256, device="cuda:0")
    real_b = torch.randn(512, 256, device="cuda:1")
    real_a_on_b, real_b_on_a = real_a.to("cuda:1"), real_b.to("cuda:0")  # for the identity losses, later
    fake_b = g_ab(real_a)
    rec_a = g_ba(fake_b.to("cuda:1")).to("cuda:0")
    loss = (rec_a - real_a).abs().mean() + g_ab(real_b_on_a).mean() + g_ba(real_a_on_b).mean().to("cuda:0")
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_batch_copied_across_for_later_is_not_the_chain_of_the_next_departure(script, dryrun_cli):
    # (probe_dr34 c18, a CycleGAN: real_B copied to cuda:0 for the identity loss, unread when G_AB's output of
    # real_A leaves cuda:0 for G_BA: two flows, not one activation crossing back and forth)
    status, report, err = dryrun_cli(script(SIDE_BY_SIDE), "--gpus", "2")
    assert status == 0, err
    assert [f for f in report["findings"] if f["code"] == "MP006"] == []


STAND_IN = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(256, 256).to("cuda:0")
        self.b = nn.Linear(256, 1).to("cuda:1")
        self.proj = torch.randn(256, 256)  # a random table the model keeps on the host

    def forward(self, x):
        h = self.a(x.to("cuda:0"))  # <- input
        PROJECT
        return self.b(h.to("cuda:1"))


net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
X = torch.randn(512, 256)
y = (X[:, :4].sum(1, keepdim=True) > 0).float()
for step in range(3):
    BATCH
    loss = F.binary_cross_entropy_with_logits(net(x), y.to("cuda:1"))  # <- targets
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_fixed_stand_in_batch_copied_in_each_training_step_is_no_repeat(script, dryrun_cli):
    # (round 36: 9 of 24 good files) a script's random batch stands for a loader's new batch each step
    s = script(STAND_IN.replace("PROJECT", "").replace("BATCH", "x = X"))
    assert_silent(dryrun_cli, s)


def test_a_random_table_copied_beside_new_batches_or_by_the_model_itself_is_a_repeat(script, dryrun_cli):
    # beside a loader's new batch each step, the same random data copied again is a constant copied every step
    fresh = "x = X; noise = torch.randn(512, 256).to('cuda:0')  # new data each step"
    s = script(STAND_IN.replace("PROJECT", "h = h + noise").replace("BATCH", fresh))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP011", s.line("input"))]
    # a random table the model holds, copied by its forward on every call: not what it was given
    s = script(STAND_IN.replace("PROJECT", "h = h @ self.proj.to('cuda:0')  # <- table").replace("BATCH", "x = X"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert ("MP011", s.line("table")) in [(f["code"], f["line"]) for f in report["findings"]]


DENOISER = """
import torch
import torch.nn as nn
import torch.nn.functional as F

net = nn.Sequential(nn.Linear(256, 256).to("cuda:0"), nn.ReLU(), nn.Linear(256, 256).to("cuda:1"))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
clean = torch.rand(512, 256)
for step in range(3):
    noisy = NOISY
    out = net[2](net[1](net[0](noisy.to("cuda:0"))).to("cuda:1"))
    loss = F.mse_loss(out, clean.to("cuda:1"))  # <- target
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_noise_drawn_for_a_stand_in_batch_is_no_new_batch(script, dryrun_cli):
    # (probe36 t20) a denoiser's noisy input made from the fixed stand-in each step: what a loader's batch gets
    # each step, not another batch beside which the stand-in would be a constant
    assert_silent(dryrun_cli, script(DENOISER.replace("NOISY", "clean + 0.2 * torch.randn_like(clean)")))
    # beside new data of its own (a batch drawn afresh each step), the same target copied again is a constant
    s = script(DENOISER.replace("NOISY", "torch.rand(512, 256)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP011", s.line("target"))]


RESUMED = """
import torch
import torch.nn as nn
import torch.nn.functional as F

X = torch.randn(512, 256)
y = torch.randn(512, 1)
state = None
for job in range(2):  # a run, then the same run resumed: the model and its optimizer built again
    net = nn.Sequential(nn.Linear(256, 256).to("cuda:0"), nn.Linear(256, 1).to("cuda:1"))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    if state is not None:
        net.load_state_dict(state)
    for step in range(2):
        h = net[0](X.to("cuda:0"))
        loss = F.mse_loss(net[1](h.to("cuda:1")), y.to("cuda:1"))  # <- targets
        opt.zero_grad()
        loss.backward()
        opt.step()
    state = net.state_dict()
"""


def test_steps_of_an_optimizer_built_again_each_end_an_iteration(script, dryrun_cli):
    # (probe36 t20) once the first optimizer is dropped, the next one's steps count the iterations: else two of
    # them looked like one, and the stand-in batch copied in each looked copied twice in one iteration
    assert_silent(dryrun_cli, script(RESUMED))


TWIN_CRITICS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

devices = ("cuda:0", "cuda:1")
actor = nn.Linear(64, 8).to("cuda:0")
critics = [nn.Sequential(nn.Linear(72, 256), nn.ReLU(), nn.Linear(256, 1)).to(d) for d in devices]
targets = [nn.Sequential(nn.Linear(72, 256), nn.ReLU(), nn.Linear(256, 1)).to(d) for d in devices]
opt = torch.optim.Adam([p for c in critics for p in c.parameters()], lr=1e-3)
buffer = torch.randn(4096, 64)


def twin_q(nets, obs, act):
    return [q(torch.cat([obs.to(d), act.to(d)], -1)).squeeze(-1).to(obs.device) for q, d in zip(nets, devices)]


for step in range(3):
    obs = buffer[torch.randint(0, 4096, (256,))].to("cuda:0")
    next_obs = buffer[torch.randint(0, 4096, (256,))].to("cuda:0")
    act = torch.rand(256, 8).to("cuda:0")  # the actions the buffer holds
    with torch.no_grad():
        q_next = torch.min(*twin_q(targets, next_obs, actor(next_obs)))
    q1, q2 = twin_q(critics, obs, act)
    loss = F.mse_loss(q1, q_next) + F.mse_loss(q2, q_next)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_batch_sent_to_each_critic_after_another_evaluation_came_back_is_no_ping_pong(script, dryrun_cli):
    # (probe37 t01, SAC) the batch was on cuda:0 before the target critics' values came back: it is not
    # computed from them, so sending it to the critic on cuda:1 does not continue their chain
    assert_silent(dryrun_cli, script(TWIN_CRITICS))


GRAPH = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)

    def forward(self, x, edge_index):
        src, dst = edge_index
        return torch.zeros_like(x).index_add(0, dst, self.lin(x)[src])


class SplitGNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(4))
        self.devs = ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
        for layer, dev in zip(self.layers, self.devs):
            layer.to(dev)

    def forward(self, x, edge_index):
        for layer, dev in zip(self.layers, self.devs):
            MOVE
            x = F.relu(layer(x, edge_index))
        return x


gen = torch.Generator().manual_seed(0)
src = torch.randint(0, 2048, (32768,), generator=gen)
dst = torch.randint(0, 2048, (32768,), generator=gen)
dst[src % 5 == 0] = src[src % 5 == 0]  # a graph made in place
x, ei = torch.randn(2048, 64, generator=gen).to("cuda:0"), torch.stack([src, dst]).to("cuda:0")
model = SplitGNN()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(3):
    loss = model(x, ei).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        val = model(x, ei).mean()
"""


def test_a_stand_in_graph_moved_by_each_forward_is_no_repeat_but_moved_by_each_layer_is(script, dryrun_cli):
    # (probe37 t02) a drawn graph, made in place, copied to the first stage and handed to the model: its copy to
    # the second stage in each forward (training, then evaluation) is what a loader's graph would need
    once = "if x.device != torch.device(dev):\n                x, edge_index = x.to(dev), edge_index.to(dev)"
    assert_silent(dryrun_cli, script(GRAPH.replace("MOVE", once)))
    # ...but copied again by every layer on the second stage, it is moved twice in one forward
    per_layer = "x = x.to(dev)\n            edge_index_here = edge_index.to(dev)  # <- edges"
    s = script(GRAPH.replace("MOVE", per_layer).replace("layer(x, edge_index)", "layer(x, edge_index_here)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert ("MP011", s.line("edges")) in [(f["code"], f["line"]) for f in report["findings"]]


COVARIATES = """
import torch
import torch.nn as nn

rnn = nn.Linear(4, 64).to("cuda:0")
opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
for step in range(3):
    t0 = int(torch.randint(0, 1000, (1,)).item())
    t = torch.arange(t0, t0 + 8192, dtype=torch.float32)
    cov = torch.stack([torch.sin(t / 24), torch.cos(t / 24), torch.sin(t / 168), t / 1000], -1).pin_memory()
    loss = rnn(cov.to("cuda:0"NB)).pow(2).mean()  # <- copy
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_host_constant_streamed_with_non_blocking_is_no_repeated_transfer(script, dryrun_cli):
    # (dr35 c17) covariates made and pinned with each batch, copied with non_blocking=True: the data pipeline's
    # design (their numbers change with a random start), not a constant made on the wrong device
    assert_silent(dryrun_cli, script(COVARIATES.replace("NB", ", non_blocking=True")))
    s = script(COVARIATES.replace("NB", ""))
    assert "computed only from buffers and constants" in only_finding(dryrun_cli, s, "MP011", "copy")["message"]


SAMPLES_SUMMARY = """
import torch
import torch.nn as nn

gen = nn.Sequential(nn.Linear(64, 512), nn.Tanh()).to("cuda:0")
opt = torch.optim.SGD(gen.parameters(), lr=0.1)
for step in range(3):
    loss = gen(torch.randn(256, 64, device="cuda:0")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
for k in range(ROUNDS):
    samples = gen(torch.randn(256, 64, device="cuda:0")).detach().cpu()  # <- copy
    print(f"{samples.min():.2f} {samples.max():.2f}")
"""


def test_a_copy_reduced_on_the_host_once_after_training_is_no_oversized_transfer(script, dryrun_cli):
    # (dr35 c03, c15) samples copied to the host once at the end of a run, only for their range: it costs once
    assert_silent(dryrun_cli, script(SAMPLES_SUMMARY.replace("ROUNDS", "1")))
    # the same copy made for each of several evaluation batches after training costs each time
    s = script(SAMPLES_SUMMARY.replace("ROUNDS", "3"))
    assert only_finding(dryrun_cli, s, "MP016", "copy")["message"].startswith("512 KiB moved cuda:0 -> cpu")
