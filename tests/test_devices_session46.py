"""Session 46: findings of blind round 34 (each test names the general rule behind its case)."""

from __future__ import annotations

from lint_helpers import findings

# Round 34's t17: a placement spelled as a Python literal in a string, read with ast.literal_eval (as a YAML
# file or a flag would give it): its devices are known, as json.loads' are.
LITERAL_PLACEMENT = """
import ast
import torch
import torch.nn as nn

PLACE = ast.literal_eval("{'enc': 'cuda:0', 'dec': ['cuda:1', 'cuda:1']}")

enc = nn.Linear(64, 64).to(PLACE["enc"])
dec = nn.Linear(64, 64).to(PLACE["dec"][0])
x = torch.randn(8, 64, device=PLACE["enc"])
y = dec(enc(x)){fix}
"""


def test_a_placement_read_with_literal_eval_is_known():
    (f,) = findings(LITERAL_PLACEMENT.replace("{fix}", ""), "MP001")
    assert f.line == 11 and set(f.devices) == {"cuda:0", "cuda:1"}


def test_a_literal_eval_text_that_is_no_literal_is_unknown_and_silent():
    source = LITERAL_PLACEMENT.replace("{fix}", "").replace(
        "\"{'enc': 'cuda:0', 'dec': ['cuda:1', 'cuda:1']}\"", "\"{'enc': 'cuda:0', 'dec': open('x')}\""
    )
    assert findings(source, "MP001") == []


# Round 34's t17: the additive causal mask made on the host by a helper that each attention call runs, sized by
# its parameter (the forward passes the activation's length) and moved to the activation's GPU.
CAUSAL_MASK_HELPER = """
import functools
import torch
import torch.nn as nn

{decorator}
def causal_mask(t, device):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1).to(device)


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 64)

    def forward(self, x):
        b, t, _ = x.shape
        return self.qkv(x) @ x.transpose(-2, -1) + causal_mask(t, x.device)


m = Attn().to("cuda:0")
for _ in range(3):
    m(torch.randn(2, 16, 64, device="cuda:0"))
"""


def test_a_helper_a_forward_calls_that_makes_its_tensor_on_the_host_from_its_size_parameter():
    (f,) = findings(CAUSAL_MASK_HELPER.format(decorator=""), "MP019")
    assert f.line == 8 and "torch.full(..., device=device)" in f.message


def test_a_helper_that_caches_what_it_returns_builds_it_once_per_size():
    assert findings(CAUSAL_MASK_HELPER.format(decorator="@functools.lru_cache(maxsize=8)"), "MP019") == []


def test_a_helper_sized_by_a_parameter_outside_a_forward_is_a_stand_in_batch():
    source = """
    import torch

    def batch(n, device):
        return torch.randn(n, 128).to(device)

    for step in range(3):
        x = batch(64, "cuda:0")
    """
    assert findings(source, "MP019") == []


# Round 35's t28: stages pinned by a decorator whose wrapper moves the input to the stage's device first.
STAGE_DECORATOR = """
import functools
import torch
import torch.nn as nn


def stage(device):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, x):
            x = x.to(device)
            return fn(self, x)
        return wrapper
    return deco


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 8).to("cuda:1")

    @stage("cuda:0")
    def first(self, x):
        return self.a(x)

    @stage("{second}")
    def second(self, x):
        return self.b(x)

    def forward(self, x):
        return self.second(self.first(x))


model = Net()
out = model(torch.randn(4, 8))
"""


def test_a_decorator_of_the_file_runs_its_wrapper_which_moves_the_input():
    assert findings(STAGE_DECORATOR.replace("{second}", "cuda:1"), "MP001") == []


def test_a_wrapper_that_moves_to_the_wrong_stage_is_followed_into_the_method():
    (f,) = findings(STAGE_DECORATOR.replace("{second}", "cuda:0"), "MP001")
    assert f.line == 29 and set(f.devices) == {"cuda:0", "cuda:1"}


def test_a_plain_pass_through_decorator_keeps_the_checks_of_the_body():
    source = """
    import functools
    import torch
    import torch.nn as nn

    def timed(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8).to("cuda:0")
            self.b = nn.Linear(8, 8).to("cuda:1")

        @timed
        def forward(self, x):
            return self.b(self.a(x.to("cuda:0")))

    y = Net()(torch.randn(4, 8))
    """
    (f,) = findings(source, "MP001")
    assert f.line == 20


# Round 35's t06: an output layer tied to the embedding before either is placed: it goes wherever the embedding goes
TIED_BEFORE_PLACING = """
import torch
import torch.nn as nn


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(100, 32)
        self.mid = nn.Linear(32, 32)
        self.lm_head = nn.Linear(32, 100, bias=False)
        self.lm_head.weight = self.tok.weight

    def place(self):
        self.tok.to("cuda:0")
        self.mid.to("cuda:1")
        return self

    def forward(self, idx):
        h = self.mid(self.tok(idx.to("cuda:0")).to("cuda:1"))
        return self.lm_head(h.to(self.tok.weight.device))


model = LM().place()
logits = model(torch.randint(0, 100, (4, 16)))
"""


def test_a_layer_tied_to_an_unplaced_weight_is_not_taken_for_never_placed():
    assert findings(TIED_BEFORE_PLACING, "MP001") == []


# Round 35's t26: per-stage placers made by a list comprehension of lambdas all read its last device.
def test_lambdas_made_by_a_list_comprehension_read_its_last_device():
    source = """
    import torch.nn as nn

    devices = ["cuda:0", "cuda:1"]
    stages = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    placers = [lambda m: m.to(dev) for dev in devices]
    for place, stage in zip(placers, stages):
        place(stage)
    """
    (f,) = findings(source, "MP027")
    assert f.line == 6 and "comprehension" in f.message
    assert findings(source.replace("lambda m: m.to(dev)", "lambda m, dev=dev: m.to(dev)"), "MP027") == []
    lazy = source.replace("[lambda m: m.to(dev) for dev in devices]", "(lambda m: m.to(dev) for dev in devices)")
    assert findings(lazy, "MP027") == []  # a generator: each placer runs before the next pass


# Round 35's t05: the first device taken from a generator of devices before the placement reads it through.
def test_a_device_taken_from_a_generator_shifts_the_placement_after_it():
    source = """
    import torch
    import torch.nn as nn

    stages = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
    devices = (torch.device(f"cuda:{i}") for i in range(2))
    first = next(iter(devices))
    for stage, dev in zip(stages, devices):
        stage.to(dev)
    """
    (f,) = findings(source, "MP026")
    assert f.line == 8 and "took its first device" in f.message
    as_list = source.replace("devices = (", "devices = [").replace("range(2))", "range(2)]")
    assert findings(as_list, "MP026") == []


# Round 35's t29: GPU indices in a list named for them, picked by a formula that gives the same index every pass.
def test_a_formula_that_picks_the_same_gpu_index_every_pass():
    source = """
    import torch
    import torch.nn as nn

    gpus = list(range(torch.cuda.device_count()))
    blocks = nn.ModuleList()
    for i in range(8):
        blocks.append(nn.Linear(8, 8).cuda(gpus[i // 8 * len(gpus)]))
    """
    (f,) = findings(source, "MP017")
    assert f.line == 8 and "cuda:0" in f.message
    assert findings(source.replace("i // 8 * len(gpus)", "i * len(gpus) // 8"), "MP017") == []
    sizes = source.replace("gpus", "sizes")  # numbers whose name says nothing of GPUs: not taken for devices
    assert findings(sizes, "MP017") == []


def test_a_mask_sized_by_the_input_made_on_the_host_is_mp019_not_a_repeated_constant():
    source = """
    import torch
    import torch.nn as nn

    class Causal(nn.Module):
        def __init__(self):
            super().__init__()
            self.qk = nn.Linear(64, 64).to("cuda:1")

        def forward(self, x):
            q = self.qk(x.to("cuda:1"))
            n = q.shape[1]
            mask = torch.tril(torch.ones(n, n)).to("cuda:1")
            return q * mask.sum()

    m = Causal()
    for _ in range(3):
        m(torch.randn(2, 16, 64))
    """
    assert [(f.code, f.line) for f in findings(source) if f.code in ("MP011", "MP019")] == [("MP019", 13)]


# Round 35's t28: an environment flag whose default "0" is a non-empty string, so true, guards a sync per stage.
ENV_FLAG = """
import os
import torch
import torch.nn as nn

FLAG = os.environ.get("PROFILE_STAGES", DEFAULT)
stage = nn.Linear(64, 64).to("cuda:1")
for step in range(3):
    y = stage(torch.randn(8, 64, device="cuda:1"))
    if TEST:
        torch.cuda.synchronize("cuda:1")
"""


def test_an_environment_flag_with_a_false_looking_default_is_always_true():
    for default, test in (('"0"', "FLAG"), ('"false"', "not FLAG"), ('"off"', "FLAG and step > 0")):
        (f,) = findings(ENV_FLAG.replace("DEFAULT", default).replace("TEST", test), "MP025")
        assert f.line == 10 and "read here as a flag" in f.message, (default, test)
    for default, test in (('"0"', 'FLAG == "1"'), ("None", "FLAG"), ('""', "FLAG")):
        assert findings(ENV_FLAG.replace("DEFAULT", default).replace("TEST", test), "MP025") == [], (default, test)


# Round 35's t07: an anchor grid built by a helper that takes a device but is not given one, moved every forward.
ANCHOR_HELPER = """
import torch
import torch.nn as nn


def make_anchors(h, w, stride, device=None):
    ys = (torch.arange(h, device=device, dtype=torch.float32) + 0.5) * stride
    xs = (torch.arange(w, device=device, dtype=torch.float32) + 0.5) * stride
    cy, cx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([cx, cy], dim=-1).reshape(-1, 2)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.box = nn.Conv2d(16, 4, 1).to("cuda:1")

    def forward(self, f):
        b, _, h, w = f.shape
        anchors = CALL
        return self.box(f), anchors


head = Head()
for _ in range(3):
    head(torch.randn(2, 16, 32, 32, device="cuda:1"))
"""


def test_a_helper_left_without_its_device_builds_on_the_host_what_the_forward_moves():
    (f,) = findings(ANCHOR_HELPER.replace("CALL", "make_anchors(h, w, 8).to(f.device)"), "MP019")
    assert f.line == 20 and "make_anchors(..., device=f.device)" in f.message
    for fixed in (
        "make_anchors(h, w, 8, device=f.device)",
        "make_anchors(h, w, 8, f.device).to(f.device)",
        "make_anchors(32, 32, 8).to(f.device)",
    ):  # given the device, or sized by numbers alone
        assert findings(ANCHOR_HELPER.replace("CALL", fixed), "MP019") == [], fixed


# Round 36's good files (5 of 24): a script's fixed random batch, moved again in every training step, stands for
# the new batch a loader gives each step; the same data moved in a loop that trains nothing is still a repeat.
STAND_IN = """
import torch
import torch.nn as nn
import torch.nn.functional as F

net = nn.Linear(256, 1).to("cuda:1")
opt = torch.optim.SGD(net.parameters(), lr=0.1)
X = MAKE
y = (X[:, :4].sum(1, keepdim=True) > 0).float()
for step in range(3):
    loss = F.binary_cross_entropy_with_logits(net(X.to("cuda:1")), y.to("cuda:1"))
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    draws = [net(X.to("cuda:1")) for _ in range(8)]
"""


def test_a_stand_in_batch_moved_in_each_training_step_is_no_repeat_but_one_moved_per_draw_is():
    got = [(f.code, f.line) for f in findings(STAND_IN.replace("MAKE", "torch.randn(512, 256)"), "MP011")]
    assert got == [("MP011", 16)], got  # only the draws' loop, which trains nothing
    # a table drawn on a device, or data that is not random, keeps its finding in the training loop
    for made in ('torch.randn(512, 256, device="cuda:0")', "torch.ones(512, 256)"):
        lines = {f.line for f in findings(STAND_IN.replace("MAKE", made), "MP011")}
        assert 11 in lines, (made, lines)
