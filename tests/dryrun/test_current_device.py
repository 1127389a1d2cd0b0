"""The current device at run time (MP004): a tensor made by a bare `.cuda()`, a factory under
set_default_device('cuda') or an init_hidden's `.cuda()` inside a stage on cuda:1 lands on cuda:0; the finding
is at the line that made it, not at the call that fails. A stage placed by `.cuda()` after set_device(1) next to
one placed on cuda:1 by name: the split collapsed (a waste, at the index-less placement). Tensors moved on before
use, the DDP idiom and single-GPU programs stay silent."""

import pytest
from dryrun_helpers import codes_at

STAGE1 = """
import torch
import torch.nn as nn

class Stage1(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16).to("cuda:1")

    def forward(self, x):
        {made}
        return self.lin(x) + noise  # <- use

stage = Stage1()
for _ in range(2):
    stage(torch.randn(4, 16).to("cuda:1")).sum().backward()
torch.set_default_device(None)
print("finished")
"""


@pytest.mark.parametrize(
    "made, how",
    [
        ("noise = torch.randn(4, 16).cuda()  # <- made", "a bare `.cuda()`"),
        ("noise = torch.randn(4, 16).to('cuda')  # <- made", "`.to('cuda')`"),
        ("noise = torch.zeros(4, 16, device='cuda')  # <- made", "`device='cuda'`"),
        (
            "torch.set_default_device('cuda'); noise = torch.ones(4, 16)  # <- made",
            "`ones(...)` without device=, under torch.set_default_device('cuda'),",
        ),
    ],
)
def test_a_tensor_made_on_the_current_device_inside_a_stage_on_cuda1(script, dryrun_cli, made, how):
    s = script(STAGE1.format(made=made))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["stopped"] is None, report["stopped"]
    assert codes_at(report) == [("MP004", s.line("made"))]
    f = report["findings"][0]
    assert f["message"].startswith(f"{how} here puts a tensor on the current device cuda:0, inside 'stage'")
    assert f"train.py:{s.line('use')}" in f["message"]
    assert f["devices"] == ["cuda:1", "cuda:0"]
    assert "to('cuda:1')" in f["suggestion"]
    assert f["extra"]["count"] == 2
    # The call would fail on real GPUs: the finding is an error and the dry run exits 1 (it moved the
    # tensor to go on, which must not read as success).
    assert f["severity"] == "error"
    assert status == 1


@pytest.mark.parametrize(
    "made, derived",
    [
        ("pos = torch.arange(16).cuda()  # <- made", "noise = pos[None, :].float()"),
        ("pos = torch.ones(16, device='cuda')  # <- made", "noise = (pos * 2).expand(4, 16).contiguous()"),
    ],
)
def test_a_tensor_derived_from_one_made_on_the_current_device_is_reported_where_it_was_made(
    script, dryrun_cli, made, derived
):
    # The made tensor is cast, indexed, multiplied: each result is a new tensor on the same (current) device,
    # made by the same line's mistake; the finding stays at that line, not at the use.
    s = script(STAGE1.format(made=made + "\n        " + derived))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP004", s.line("made"))]
    assert f"train.py:{s.line('use')}" in report["findings"][0]["message"]


def test_a_derived_tensor_moved_to_the_stage_device_is_silent(script, dryrun_cli):
    s = script(STAGE1.format(made="pos = torch.arange(16).cuda()\n        noise = pos.float().to(x.device)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["stopped"] is None, report["stopped"]
    assert (status, report["findings"]) == (0, [])


def test_init_hidden_with_a_bare_cuda_is_reported_in_init_hidden(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(16, 16, batch_first=True).to("cuda:1")

    def init_hidden(self, batch):
        return torch.zeros(1, batch, 16).cuda()  # <- made

    def forward(self, x, h):
        return self.rnn(x, h)

dec = Decoder()
h = dec.init_hidden(4)
out, h = dec(torch.randn(4, 3, 16).to("cuda:1"), h)  # <- use
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP004", s.line("made"))]
    assert "input of GRU 'dec.rnn'" in report["findings"][0]["message"]


def test_set_device_collapses_a_split_placed_with_a_bare_cuda(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 16).cuda()  # <- implicit
        self.dec = nn.Linear(16, 16).to("cuda:1")  # <- named

    def forward(self, x):
        return self.dec(self.enc(x.to("cuda:1")))

torch.cuda.set_device(1)
net = Net()
for _ in range(2):
    net(torch.randn(4, 16)).sum().backward()
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["stopped"]) == (0, None)  # it runs, on one GPU: a warning, recorded
    assert codes_at(report) == [("MP004", s.line("implicit"))]
    f = report["findings"][0]
    assert f["severity"] == "warning" and f["devices"] == ["cuda:1"]
    assert "'net.enc'" in f["message"] and "'net.dec'" in f["message"]
    assert f"train.py:{s.line('named')}" in f["message"]
    assert "the split collapsed" in f["message"]


@pytest.mark.parametrize(
    "program",
    [
        # made on the current device, moved to the stage's GPU before use
        STAGE1.format(made="noise = torch.randn(4, 16).cuda().to(x.device)"),
        STAGE1.format(made="noise = torch.zeros(4, 16, device=x.device)"),
        # a stage on cuda:0 making its tensors on the current device cuda:0
        STAGE1.replace('"cuda:1"', '"cuda:0"').format(made="noise = torch.randn(4, 16).cuda()"),
        # the DDP idiom in one process: set_device(rank) then .cuda() and the rank's device by name
        """
import os, tempfile
import torch
import torch.nn as nn
import torch.distributed as dist

class Net(nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.enc = nn.Linear(16, 16).cuda()
        self.dec = nn.Linear(16, 16).to(f"cuda:{rank}")

    def forward(self, x):
        return self.dec(self.enc(x.cuda()))

dist.init_process_group("gloo", init_method="file://" + os.path.join(tempfile.mkdtemp(), "s"), rank=0, world_size=1)
torch.cuda.set_device(1)  # this process's GPU
net = Net(1)
net(torch.randn(4, 16)).sum().backward()
""",
        # one process on the GPU it chose: set_device(gpu), then .cuda() and .to(device) of that same GPU
        """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self, device):
        super().__init__()
        self.enc = nn.Linear(16, 16).cuda()
        self.dec = nn.Linear(16, 16).to(device)

    def forward(self, x):
        return self.dec(self.enc(x.cuda()))

gpu = 1
torch.cuda.set_device(gpu)
net = Net(torch.device("cuda", gpu))
net(torch.randn(4, 16)).sum().backward()
""",
        # a program on one GPU that is not cuda:0: everything placed by .cuda()
        """
import torch
import torch.nn as nn
torch.cuda.set_device(1)
net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)).cuda()
net(torch.randn(4, 16).cuda()).sum().backward()
""",
    ],
)
def test_current_device_uses_that_work_are_silent(script, dryrun_cli, program):
    s = script(program)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["stopped"]) == (0, None), report["stopped"]
    assert report["findings"] == []


def test_a_batch_moved_by_a_bare_cuda_in_the_loop_is_still_mp001_at_the_call(script, dryrun_cli):
    # Made outside any module's method: the call that gets it is where a transfer is missing.
    s = script("""
import torch
import torch.nn as nn
stage1 = nn.Linear(16, 16).to("cuda:1")
x = torch.randn(4, 16).cuda()
out = stage1(x)  # <- use
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("use"))]


def test_a_helper_called_from_a_stage_forward_is_reported_in_the_helper(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

def make_noise(shape):
    return torch.randn(shape).cuda()  # <- made

class Stage1(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16).to("cuda:1")

    def forward(self, x):
        return self.lin(x) + make_noise(x.shape)

stage = Stage1()
stage(torch.randn(4, 16).to("cuda:1"))
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP004", s.line("made"))]


def test_a_tensor_made_by_a_weightless_submodule_of_a_stage_on_cuda1(script, dryrun_cli):
    # The positional table's holder has no weights of its own: the stage around it says where it runs.
    s = script("""
import torch
import torch.nn as nn

class Positions(nn.Module):
    def forward(self, x):
        return torch.arange(x.shape[1]).cuda()[None, :, None].float()  # <- made

class Stage1(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = Positions()
        self.lin = nn.Linear(16, 16).to("cuda:1")

    def forward(self, x):
        return self.lin(x) + self.pos(x)  # <- use

Stage1()(torch.randn(2, 5, 16).to("cuda:1")).sum().backward()
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    # The table is made on the host and copied at once, in every forward: MP019 too (the same fix, `device=`).
    assert codes_at(report) == [("MP004", s.line("made")), ("MP019", s.line("made"))]
    assert f"train.py:{s.line('use')}" in next(f for f in report["findings"] if f["code"] == "MP004")["message"]


BATCH_AFTER_CURRENT_DEVICE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.front = nn.Sequential(nn.Linear(8, 16), nn.ReLU()).to("cuda:0")
        self.back = nn.Linear(16, 4).to("cuda:1")

    def forward(self, x):
        h = self.front(x)  # <- use
        return self.back(h.to("cuda:1"))

model = TwoStage()
{choose}
for _ in range(2):
    x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
    {place}
    F.cross_entropy(model(x), y).backward()
print("finished")
"""


@pytest.mark.parametrize(
    "choose, place",
    [
        ("torch.cuda.set_device(1)", "x, y = x.cuda(), y.cuda()  # <- made"),
        ("torch.cuda.set_device('cuda:1')", "x, y = x.to('cuda'), y.to('cuda')  # <- made"),
        ("ctx = torch.cuda.device(1); ctx.__enter__()", "x, y = x.cuda(non_blocking=True), y.cuda()  # <- made"),
    ],
)
def test_a_batch_placed_on_the_current_device_after_it_moved_off_cuda0_is_mp004_where_it_was_placed(
    script, dryrun_cli, choose, place
):
    # set_device(1) (for the loss's GPU, say) makes the loop's index-less `.cuda()` land on cuda:1,
    # while the model's first stage is on cuda:0: the line that placed the batch is where the fix goes.
    s = script(BATCH_AFTER_CURRENT_DEVICE.format(choose=choose, place=place))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP004", s.line("made"))]
    f = report["findings"][0]
    assert "puts a tensor on the current device cuda:1" in f["message"]
    assert f"train.py:{s.line('use')}" in f["message"]
    assert f["devices"] == ["cuda:0", "cuda:1"] and f["severity"] == "error"
    assert "to('cuda:0')" in f["suggestion"]


@pytest.mark.parametrize(
    "choose, place",
    [
        ("torch.cuda.set_device(1)", "x, y = x.to('cuda:0'), y.cuda()"),  # the labels meet the output on cuda:1
        ("pass", "x, y = x.cuda(), y.cuda(1)"),  # cuda:0 is what `.cuda()` means by default: as written
    ],
)
def test_index_less_placements_that_land_where_they_are_used_are_silent(script, dryrun_cli, choose, place):
    s = script(BATCH_AFTER_CURRENT_DEVICE.format(choose=choose, place=place))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"], report["stopped"]) == (0, [], None), err


# A helper called from the forward of a model split over two GPUs makes a tensor with `device="cuda"` (the
# current device, cuda:0) for whichever stage calls it: the stage on cuda:1 gets it unmoved.
SPLIT_HELPER = """
import torch
import torch.nn as nn

def offsets(x):
    device = {device}
    return torch.arange(x.shape[0], device=device).view(-1, 1) * x.shape[1]  # <- made

class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16).to("cuda:0")
        self.b = nn.Linear(16, 16).to("cuda:1")

    def forward(self, x):
        h = self.a(x.to("cuda:0"))
        h = (h + offsets(h)).to("cuda:1")
        return self.b(h) + offsets(h)  # <- use

model = Split()
for _ in range(2):
    model(torch.randn(4, 16)).sum().backward()
"""


@pytest.mark.parametrize("device", ['torch.device("cuda")', '"cuda"'])
def test_a_bare_cuda_tensor_made_for_every_stage_of_a_split_model_is_mp004_where_it_was_made(
    script, dryrun_cli, device
):
    s = script(SPLIT_HELPER.format(device=device))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP004", s.line("made"))]
    (f,) = report["findings"]
    assert "split over cuda:0, cuda:1" in f["message"] and f"train.py:{s.line('use')}" in f["message"]
    assert f["devices"] == ["cuda:1", "cuda:0"]


def test_a_bare_cuda_tensor_made_in_a_split_models_forward_and_used_where_it_lands_is_silent(script, dryrun_cli):
    for i, fixed in enumerate(("x.device", '"cuda"')):
        program = SPLIT_HELPER.format(device=fixed)
        if fixed == '"cuda"':  # made on cuda:0 and used only by the stage on cuda:0
            program = program.replace("return self.b(h) + offsets(h)", "return self.b(h)")
        s = script(program, name=f"ok{i}.py")
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert status == 0, err
        assert report["findings"] == []


def test_a_state_made_on_the_host_and_moved_by_a_bare_cuda_in_every_forward_is_one_mp004(script, dryrun_cli):
    # `torch.zeros(s).cuda()` twice on one line, in every forward of a cell on cuda:1: the copies are MP011's
    # kind of waste, but the fix of the MP004 at the same line (make them on the cell's device) is theirs.
    s = script("""
import torch
import torch.nn as nn

class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 128)

    def init_hidden(self, batch):
        return torch.zeros(batch, 64 * 64).cuda(), torch.zeros(batch, 64 * 64).cuda()  # <- made

    def forward(self, x, state):
        h, c = state
        return self.lin(x) + h[:, :128] + c[:, :128]

cell = Cell().to("cuda:1")
for _ in range(3):
    x = torch.randn(8, 64).to("cuda:1")
    cell(x, cell.init_hidden(8)).sum().backward()
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1, err
    assert codes_at(report) == [("MP004", s.line("made"))]
