"""Session 45: findings of blind round 33 (each test names the general rule behind its case)."""

from __future__ import annotations

from lint_helpers import findings

# A model split over two GPUs, for the cases below
SPLIT_NET = """class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 8).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))
"""

# Round 33's t11: fp16 overflow checked by hand, one host read per parameter per step
PER_PARAMETER = (
    """
import torch
import torch.nn as nn


"""
    + SPLIT_NET
    + """

def main():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        LOOP
        opt.step()
"""
)


def _per_parameter(loop: str) -> list:
    return findings(PER_PARAMETER.replace("LOOP", loop.strip().replace("\n", "\n        ")), "MP020")


def test_a_loop_over_the_parameters_reading_each_on_the_host_is_one_wait_per_parameter():
    (f,) = _per_parameter(
        """
finite = True
for p in model.parameters():
    if p.grad is not None and not torch.isfinite(p.grad).all():
        finite = False
"""
    )
    assert (f.line, f.code) == (24, "MP020")
    assert f.devices == ("cuda:0", "cuda:1", "cpu") and "per parameter" in f.message


def test_a_comprehension_over_named_parameters_reading_norms_is_one_too():
    (f,) = _per_parameter("norms = {n: p.grad.norm().item() for n, p in model.named_parameters()}")
    assert f.line == 22 and "`p.grad.norm().item()`" in f.message


def test_a_log_under_a_periodic_test_runs_rarely_and_is_silent():
    assert (
        _per_parameter(
            """
if step % 100 == 0:
    for n, p in model.named_parameters():
        print(n, p.grad.norm().item())
"""
        )
        == []
    )


def test_host_values_of_a_parameter_and_work_on_the_gpu_read_nothing():
    assert (
        _per_parameter(
            """
for p in model.parameters():
    if p.grad is not None and p.dim() > 1 and p.requires_grad:
        p.grad.clamp_(-1.0, 1.0)
"""
        )
        == []
    )


def test_the_parameters_of_a_model_on_the_host_are_read_without_a_wait():
    src = PER_PARAMETER.replace('.to("cuda:0")', "").replace('.to("cuda:1")', "")
    src = src.replace("LOOP", "total = sum(p.grad.norm().item() for p in model.parameters())")
    assert findings(src, "MP020") == []


# Round 33's t06: scheduled teacher forcing, the targets moved to the encoder's GPU
TEACHER_FORCING = """
import random
import torch
import torch.nn as nn


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.GRU(8, 16, batch_first=True).to("cuda:0")
        self.cell = nn.GRUCell(8, 16).to("cuda:1")
        self.proj = nn.Linear(16, 8).to("cuda:1")

    def forward(self, history, target, tf_ratio):
        _, h = self.encoder(history)
        h = h[0].to("cuda:1")
        inp = history[:, -1].to("cuda:1")
        preds = []
        for t in range(24):
            h = self.cell(inp, h)
            pred = self.proj(h)
            preds.append(pred)
            CHOICE
        return torch.stack(preds, 1)


model = Seq2Seq()
x, y = torch.randn(4, 16, 8), torch.randn(4, 24, 8)
out = model(x.to("cuda:0"), y.to(TARGETS), 0.5)
"""

IF_STATEMENT = """if random.random() < tf_ratio:
                inp = target[:, t]
            else:
                inp = pred.detach()"""


def _teacher(choice: str, targets: str = "cuda:0") -> list:
    return findings(TEACHER_FORCING.replace("CHOICE", choice).replace("TARGETS", f'"{targets}"'), "MP001")


def test_a_tensor_left_on_another_gpu_by_one_way_of_an_if_is_reported_on_that_way():
    (f,) = _teacher(IF_STATEMENT)
    assert f.line == 20 and f.devices == ("cuda:0", "cuda:1")
    assert "when `random.random() < tf_ratio` holds (line 23)" in f.message
    assert f.fix is None  # the move that took it there is the line to mend


def test_a_choice_expression_has_the_same_two_ways():
    (f,) = _teacher("inp = target[:, t] if random.random() < tf_ratio else pred.detach()")
    assert f.line == 20 and "holds (line 23)" in f.message


def test_both_ways_on_the_right_gpu_are_clean():
    assert _teacher(IF_STATEMENT, targets="cuda:1") == []


def test_a_test_about_devices_decides_the_devices_with_it():
    guarded = IF_STATEMENT.replace("random.random() < tf_ratio", "target.device == h.device")
    assert _teacher(guarded) == []


def test_a_use_under_a_test_of_its_own_may_run_on_the_matching_way_only():
    src = """
import torch
import torch.nn as nn

enc = nn.Linear(8, 8).to("cuda:0")
dec = nn.Linear(8, 8).to("cuda:1")

def step(x, use_cache):
    h = enc(x)
    if use_cache:
        h = h.to("cuda:1")
    if use_cache:
        return dec(h)
    return h
"""
    assert findings(src, "MP001") == []


def test_a_loop_that_may_not_run_leaves_no_way_of_its_own():
    src = """
import torch
import torch.nn as nn

enc = nn.Linear(8, 8).to("cuda:0")
blocks = [nn.Linear(8, 8).to("cuda:1") for _ in range(n)]
head = nn.Linear(8, 8).to("cuda:1")

def step(x):
    h = enc(x)
    for blk in blocks:
        h = blk(h.to("cuda:1"))
    return head(h)
"""
    assert findings(src, "MP001") == []


def test_a_torch_function_given_a_tensor_left_elsewhere_by_one_way_names_that_way():
    src = TEACHER_FORCING.replace("h = self.cell(inp, h)", "h = self.cell(torch.cat([inp, h], 1)[:, :8], h)")
    src = src.replace("CHOICE", IF_STATEMENT).replace("TARGETS", '"cuda:0"')
    (f,) = findings(src, "MP001")
    assert f.line == 20 and "`torch.cat`" in f.message and "holds (line 23)" in f.message


# Round 34's t12: the blocks in a plain list, which `model.to()` never moves
PLAIN_LIST = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, depth=4):
        super().__init__()
        self.stem = nn.Linear(64, 64)
        self.blocks = HOLD(nn.Linear(64, 64) for _ in range(depth))
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        h = self.stem(x)
        for blk in self.blocks:
            h = blk(h.to(blk.weight.device))
        return self.head(h.to(self.head.weight.device))


model = Net().to("cuda:0")
MOVE_SOME
for step in range(2):
    model(torch.randn(8, 64).to("cuda:0")).sum().backward()
"""


def test_layers_in_a_plain_list_run_on_the_host_when_the_model_moves():
    (f,) = findings(PLAIN_LIST.replace("HOLD", "list").replace("MOVE_SOME", ""), "MP031")
    assert f.line == 10 and f.devices == ("cpu", "cuda:0") and "nn.ModuleList" in f.message


def test_layers_in_a_module_list_or_placed_one_by_one_are_silent():
    assert findings(PLAIN_LIST.replace("HOLD", "nn.ModuleList").replace("MOVE_SOME", ""), "MP031") == []
    placed = "for blk in model.blocks:\n    blk.to('cuda:0')"
    assert findings(PLAIN_LIST.replace("HOLD", "list").replace("MOVE_SOME", placed), "MP031") == []


def test_a_module_list_filled_by_a_comprehension_holds_one_object_per_pass():
    # each `Block()` of the comprehension is an object of its own: moving one moves that one only
    src = """
import torch
import torch.nn as nn


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


blocks = nn.ModuleList([Blk() for _ in range(6)])
for i, b in enumerate(blocks):
    b.to("cuda:0" if i < 3 else "cuda:1")
for step in range(2):
    y = blocks[4](torch.randn(2, 4).to("cuda:0"))
    z = blocks[1](torch.randn(2, 4).to("cuda:0"))
"""
    (f,) = findings(src, "MP001")
    assert f.line == 19 and "`blocks[4]` is on cuda:1" in f.message


def test_a_device_named_by_a_lambda_is_known_where_it_is_called():
    # Round 34's t24: `dev = lambda i: f"cuda:{i}"`, a plain tensor attribute copied in every forward
    src = """
import torch
import torch.nn as nn

dev = lambda i, prefix="cuda": f"{prefix}:{i}"


class VQ(nn.Module):
    def __init__(self):
        super().__init__()
        self.codebook = torch.randn(2048, 64)

    def forward(self, z):
        return torch.cdist(z, self.codebook.to(z.device))


vq = VQ().to(dev(1))
for step in range(2):
    vq(torch.randn(16, 64).to(dev(1)))
"""
    (f,) = findings(src, "MP011")
    assert f.line == 14 and "copied to cuda:1 on every forward call" in f.message
    # a lambda that takes what a plain call cannot bind gives an unknown device: silent
    assert findings(src.replace('lambda i, prefix="cuda"', "lambda *i, prefix='cuda'"), "MP011") == []


# Round 34's t26: a meta model materialised stage by stage, then the root for its own tensors
TO_EMPTY = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Parameter(torch.empty(100, 16))
        self.stages = nn.ModuleList(nn.Linear(16, 16) for _ in range(2))

    def forward(self, x):
        for i, stage in enumerate(self.stages):
            x = stage(x.to(f"cuda:{i}"))
        return x


with torch.device("meta"):
    model = Net()
for stage, dev in zip(model.stages, ["cuda:0", "cuda:1"]):
    stage.to_empty(device=dev)
model.to_empty(device="cuda:0"ROOT)
"""


def test_to_empty_of_the_root_after_its_stages_collapses_the_split():
    (f,) = findings(TO_EMPTY.replace("ROOT", ""), "MP007")
    assert f.line == 22 and "recurse=False" in f.message and "recurse=False" in f.suggestion
    assert findings(TO_EMPTY.replace("ROOT", ", recurse=False"), "MP007") == []


# Round 33's t24: an EMA whose load_state_dict moves every shadow to the first parameter's device
EMA = (
    """
import torch
import torch.nn as nn


class EMA:
    def __init__(self, model, decay=0.999):
        self.decay = decay
        self.device = next(model.parameters()).device
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model):
        for n, p in model.named_parameters():
            self.shadow[n].lerp_(p.detach(), 1.0 - self.decay)

    def load_state_dict(self, state):
        self.decay = state["decay"]
        self.shadow = {n: t.to(PLACE) for n, t in state["shadow"].items()}

"""
    + SPLIT_NET
    + """

def main():
    model = Net()
    ema = EMA(model)
    ckpt = torch.load("ckpt.pt", map_location="cpu")
    ema.load_state_dict(ckpt["ema"])
    for step in range(2):
        model(torch.randn(4, 8)).sum().backward()
        ema.update(model)
"""
)


def test_what_a_method_of_a_plain_class_assigns_to_self_is_what_its_later_calls_see():
    (f,) = findings(EMA.replace("PLACE", "self.device"), "MP001")
    assert f.line == 15 and "`p.detach()` is on cuda:1" in f.message  # not the decay, a number
    assert findings(EMA.replace("PLACE", "self.shadow[n].device"), "MP001") == []


def test_a_number_read_from_a_checkpoint_meets_tensors_on_any_device():
    src = """
import torch
import torch.nn as nn

lin = nn.Linear(8, 8).to("cuda:0")


def main():
    ckpt = torch.load("x.pt", map_location="cpu")
    decay = ckpt["decay"]
    for step in range(2):
        w = torch.zeros(8, 8, device="cuda:0")
        w.lerp_(lin.weight.detach(), 1.0 - decay)
        y = lin(torch.randn(2, 8).to("cuda:0")) * decay
        z = y + ckpt["bias"].to("cuda:1")  # moved: a tensor, on another GPU
"""
    (f,) = findings(src, "MP001")
    assert f.line == 15 and '`ckpt["bias"].to("cuda:1")`' in f.message
