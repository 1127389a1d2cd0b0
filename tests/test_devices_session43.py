"""Session 43: device settings a script reads the way its defaults are read: a separator other than a comma
in an environment variable's default (`"cuda:0>cuda:1".partition(">")`), and the script's own arguments,
none as it runs (`sys.argv[1:]` into getopt or into `key=value` settings)."""

from __future__ import annotations

import pytest
from lint_helpers import lines

TWO_PARTS = """
import os
import sys
import torch
import torch.nn as nn

SETTINGS

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4).to(FIRST)
        self.b = nn.Linear(4, 4).to(SECOND)

    def forward(self, x):
        return self.b(self.a(x.to(FIRST)))  # <- no move between the parts
"""


@pytest.mark.parametrize(
    "settings",
    [
        'FIRST, _, SECOND = os.environ.get("MP_SPLIT", "cuda:0>cuda:1").partition(">")',
        'FIRST, SECOND = os.environ.get("MP_SPLIT", "cuda:0;cuda:1").split(";")',
        'FIRST, _, SECOND = os.environ.get("MP_SPLIT", "cuda:0 -> cuda:1").rpartition(" -> ")',
        'FIRST, SECOND = ("cuda:{}".format(i) for i in (0, 1))',
        # key=value arguments into settings: with none given, the code's own defaults
        'OPTS = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)\n'
        'FIRST, SECOND = OPTS.get("first", "cuda:0"), OPTS.get("second", "cuda:1")',
    ],
)
def test_devices_from_defaults_are_known(settings):
    expected = 16 + settings.count("\n")  # the forward's line
    assert lines(TWO_PARTS.replace("SETTINGS", settings), "MP001") == [expected]


@pytest.mark.parametrize(
    "settings",
    [
        # one GPU per process from the environment, the other an unknown: a rank's default stands for any GPU
        'FIRST, _, SECOND = os.environ.get("MP_SPLIT", "cuda:0").partition(">")',
        # the script's first argument: the script demands it, so its value is not known
        'FIRST, SECOND = sys.argv[1], "cuda:1"',
        'FIRST, SECOND = ("cuda:0", "cuda:1") if len(sys.argv) < 2 else sys.argv[1:3]',
    ],
)
def test_devices_the_command_line_gives_stay_unknown(settings):
    assert lines(TWO_PARTS.replace("SETTINGS", settings), "MP001") == []


GETOPT = """
import getopt
import sys
import torch
import torch.nn as nn


def parse(argv):
    cfg = {"trunk": "cuda:0", "head": "cuda:1"}
    opts, _ = getopt.getopt(argv, "t:h:", ["trunk=", "head="])
    for key, val in opts:
        if key in ("-t", "--trunk"):
            cfg["trunk"] = val
        elif key in ("-h", "--head"):
            cfg["head"] = val
    return cfg


cfg = parse(ARGS)
trunk = nn.Linear(4, 4).to(cfg["trunk"])
head = nn.Linear(4, 2).to(cfg["head"])
x = torch.randn(8, 4, device=cfg["trunk"])
out = head(trunk(x))
"""


def test_getopt_of_no_arguments_leaves_the_defaults():
    assert lines(GETOPT.replace("ARGS", "sys.argv[1:]"), "MP001") == [23]


@pytest.mark.parametrize("args", ["sys.argv", '["-t", "cuda:1"]', "argv_from_elsewhere()"])
def test_getopt_of_given_arguments_is_not_known(args):
    assert lines(GETOPT.replace("ARGS", args), "MP001") == []


PER_GPU_COPIES = """
import torch

GPUS = [torch.device("cuda:0"), torch.device("cuda:1")]
tables = [torch.randn(256, 256, device=d) for d in GPUS]
for step in range(100):
    rows = [[step % 7, step % 5]] * 64
    host = torch.tensor(rows)
    LOOP
"""


def test_a_host_tensor_copied_to_each_gpu_once_is_not_repeated():
    # one copy for each GPU that reads it, made anew on every step: nothing is copied twice
    src = PER_GPU_COPIES.replace("LOOP", "meta = {d: host.to(d) for d in GPUS}")
    assert lines(src, "MP011") == []


def test_a_tensor_copied_to_one_gpu_on_every_pass_of_a_comprehension_is_repeated():
    src = PER_GPU_COPIES.replace("LOOP", "outs = [t @ w.to('cuda:0') for t in tables[:1] * 4]").replace(
        "GPUS = [", "w = torch.randn(256, 256)\nGPUS = ["
    )
    assert lines(src, "MP011") == [10]


ENUM = """
import enum
import torch
import torch.nn as nn


class Stage(BASE):
    QUERY = FIRST
    DOCUMENT = SECOND

    @property
    def device(self):
        return torch.device(DEVICE_OF_VALUE)


query = nn.Linear(8, 8).to(Stage.QUERY.device)
doc = nn.Linear(8, 8).to(Stage.DOCUMENT.device)
out = doc(query(torch.randn(4, 8, device=Stage.QUERY.device)))
"""


@pytest.mark.parametrize(
    ("base", "first", "second", "device_of_value"),
    [
        ("enum.Enum", '"cuda:0"', '"cuda:1"', "self.value"),
        ("enum.IntEnum", "0", "1", '"cuda", self.value'),
        ("str, enum.Enum", '"cuda:0"', '"cuda:1"', "self.value"),
    ],
)
def test_an_enumerations_members_give_their_devices(base, first, second, device_of_value):
    src = ENUM.replace("BASE", base).replace("FIRST", first).replace("SECOND", second)
    assert lines(src.replace("DEVICE_OF_VALUE", device_of_value), "MP001") == [18]


def test_a_plain_class_with_the_same_body_is_no_enumeration():
    # `Stage.QUERY` is then the string itself, which has no `.device`: nothing known, nothing said
    src = ENUM.replace("BASE", "object").replace("FIRST", '"cuda:0"').replace("SECOND", '"cuda:1"')
    assert lines(src.replace("DEVICE_OF_VALUE", "self.value"), "MP001") == []


SUBCOMMANDS = """
import argparse
import sys
import torch
import torch.nn as nn


def build_parser():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--lang-gpu", type=int, default=0)
    common.add_argument("--vision-gpu", type=int, default=1)
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command")
    sub.add_parser("train", parents=[common])
    sub.add_parser("eval")
    return ap


args = build_parser().parse_args(ARGS)
enc = nn.Linear(4, 4).to(torch.device("cuda", args.lang_gpu))
dec = nn.Linear(4, 4).to(torch.device("cuda", args.vision_gpu))
y = dec(enc(torch.randn(2, 4, device=torch.device("cuda", args.lang_gpu))))
"""


@pytest.mark.parametrize("given", ['["train"]', 'sys.argv[1:] or ["train"]'])
def test_a_sub_command_named_alone_runs_with_its_parsers_defaults(given):
    assert lines(SUBCOMMANDS.replace("ARGS", given), "MP001") == [22]


@pytest.mark.parametrize("given", ['["eval"]', "sys.argv[1:]", '["train", "--lang-gpu", "1"]', "sys.argv[1:] or []"])
def test_another_command_no_command_or_flags_are_not_known(given):
    assert lines(SUBCOMMANDS.replace("ARGS", given), "MP001") == []


DATACLASS = """
from dataclasses import dataclass, field
import torch
import torch.nn as nn


@dataclass
class Cfg:
    gpus: list = FACTORY
    lr: float = 1e-3
    enc: torch.device = field(init=False)
    dec: torch.device = field(init=False)

    def __post_init__(self):
        self.enc = torch.device("cuda", self.gpus[0])
        self.dec = torch.device("cuda", self.gpus[-1])


cfg = Cfg(ARGS)
enc = nn.Linear(4, 4).to(cfg.enc)
dec = nn.Linear(4, 4).to(cfg.dec)
y = dec(enc(torch.randn(2, 4, device=cfg.enc)))
"""


@pytest.mark.parametrize(
    ("factory", "args"),
    [
        ("field(default_factory=lambda: [0, 1])", ""),
        ("field(default_factory=list)", "[0, 1]"),
        ("field(default=(0, 1))", ""),
    ],
)
def test_a_dataclass_runs_its_field_defaults_and_post_init(factory, args):
    assert lines(DATACLASS.replace("FACTORY", factory).replace("ARGS", args), "MP001") == [22]


def test_a_dataclass_given_one_gpu_has_no_split():
    src = DATACLASS.replace("FACTORY", "field(default_factory=lambda: [0, 1])").replace("ARGS", "[1]")
    assert lines(src, "MP001") == []


CLAMP = """
import torch

boxes = torch.rand(8, 4, device="cuda:1") * 300
limits = torch.full((8, 4), 256.0, device=LIMITS)
clipped = boxes.clamp(min=torch.zeros_like(limits), max=limits)
"""


def test_tensor_bounds_of_clamp_must_be_on_the_tensors_device():
    assert lines(CLAMP.replace("LIMITS", '"cuda:0"'), "MP001") == [6]
    assert lines(CLAMP.replace("LIMITS", '"cuda:1"'), "MP001") == []
    assert (
        lines(
            CLAMP.replace("limits = torch.full((8, 4), 256.0, device=LIMITS)", "limits = 256.0").replace(
                "min=torch.zeros_like(limits)", "min=0.0"
            ),
            "MP001",
        )
        == []
    )


HOST_STATISTICS = """
import torch

y = torch.randn(5000) * 3 + 1
mu, sd = y[:4000].mean(), y[:4000].std()
pred = torch.randn(1000, device="cuda:1")
restored = pred * STAT + mu
"""


@pytest.mark.parametrize("stat", ["sd", "y.var()", "torch.mean(y)", "y.abs().max()"])
def test_one_value_of_a_host_tensor_mixes_with_any_gpu(stat):
    # a 0-dim CPU tensor: PyTorch lets it meet tensors on any GPU
    assert lines(HOST_STATISTICS.replace("STAT", stat), "MP001") == []


def test_a_host_tensor_reduced_along_a_dimension_is_still_a_tensor():
    assert lines(HOST_STATISTICS.replace("STAT", "y[:1000, None].mean(1)"), "MP001") == [7]


PER_EPOCH = """
import torch

G0, G1 = "cuda:0", "cuda:1"
w = torch.randn(64, 10, device=G1)


def train_step(x):
    global w
    w = w + 0.01 * (x.T @ (x @ w))


x_train, x_test = torch.randn(4000, 64), torch.randn(1000, 64)
for epoch in range(5):
    for k in range(0, 4000, 100):
        STEP
    acc = (x_test.to(G1) @ w).argmax(1).float().mean()
"""


@pytest.mark.parametrize("step", ["train_step(x_train[k:k + 100].to(G1))", "net.train_batch(x_train[k:k + 100])"])
def test_a_test_set_moved_once_per_epoch_beside_a_training_loop_of_the_programs_own_is_no_repeat(step):
    assert lines(PER_EPOCH.replace("STEP", step), "MP011") == []


def test_a_test_set_moved_in_a_loop_without_a_training_step_is_repeated():
    assert lines(PER_EPOCH.replace("STEP", "print(k)"), "MP011") == [17]


RELAXATION = """
import torch

G0, G1 = "cuda:0", "cuda:1"
w1, w2 = torch.randn(32, 32, device=G0), torch.randn(32, 32, device=G1)
x1, x2 = torch.randn(8, 32, device=G0), torch.randn(8, 32, device=G1)
for LOOP in range(20):
    back = (x2 @ w2.T).to(G0)
    x1 = x1 + 0.1 * (back - x1 @ w1)
    x2 = x2 + 0.1 * (x1.to(G1) @ w2 - x2)
"""


def test_an_exchange_repeated_by_a_loop_that_only_counts_is_not_per_layer():
    # inference dynamics: each state with its weights, the two sides exchange every pass by design
    assert lines(RELAXATION.replace("LOOP", "_"), "MP006") == []


LOSS_ON_HOST = """
import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Linear(64, 3000).to("cuda:1")
x, y = torch.randn(12000, 64), torch.randint(0, 3000, (12000,))
for idx in torch.randperm(12000).split(200):
    logits, labels = model(x[idx].to("cuda:1")), y[idx]
    loss = F.cross_entropy(LOSS_ARGS)
    loss.backward()
"""


def test_logits_moved_to_the_hosts_labels_in_training_are_mp014():
    assert lines(LOSS_ON_HOST.replace("LOSS_ARGS", "logits.to(labels.device), labels"), "MP014") == [10]


@pytest.mark.parametrize(
    "change",
    [
        ("LOSS_ARGS", "logits, labels.to(logits.device)"),  # the fix
        ("for idx in", "with torch.no_grad():\n  for idx in"),  # an evaluation's loss on the host: a choice
    ],
)
def test_labels_moved_or_a_host_evaluation_are_silent(change):
    src = LOSS_ON_HOST.replace(*change).replace("LOSS_ARGS", "logits.to(labels.device), labels")
    if change[0] == "for idx in":
        src = (
            src.replace("\n    logits", "\n      logits")
            .replace("\n    loss = ", "\n      loss = ")
            .replace("\n    loss.backward()", "")
        )
    assert lines(src, "MP014") == []


@pytest.mark.parametrize(
    "spelled", ['torch.device(type="cuda", index=I)', 'torch.device("cuda", index=I)', 'torch.device("cuda", I)']
)
def test_torch_device_by_keywords(spelled):
    src = f"""
import torch
import torch.nn as nn

A, B = {spelled.replace("I", "0")}, {spelled.replace("I", "1")}
a = nn.Linear(4, 4).to(A)
b = nn.Linear(4, 4).to(B)
y = b(a(torch.randn(2, 4, device=A)))
"""
    assert lines(src, "MP001") == [8]


TYPE_LAMBDA = """
import argparse
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--devices", type=TYPE, default="cuda:0,cuda:1")
args = p.parse_args()
a = nn.Linear(4, 4).to(args.devices[0])
b = nn.Linear(4, 4).to(args.devices[1])
y = b(a(torch.randn(2, 4, device=args.devices[0])))
"""


@pytest.mark.parametrize(
    "kind",
    [
        'lambda s: [torch.device(d) for d in s.split(",")]',
        'lambda s: s.split(",")',
        'lambda text: tuple(d.strip() for d in text.split(","))',
    ],
)
def test_a_type_lambda_converts_the_string_default(kind):
    assert lines(TYPE_LAMBDA.replace("TYPE", kind), "MP001") == [11]


def test_a_type_lambda_of_a_rank_keeps_it_unknown():
    src = TYPE_LAMBDA.replace(
        '"--devices", type=TYPE, default="cuda:0,cuda:1"', '"--local-rank", type=lambda s: int(s), default="0"'
    )
    src = src.replace("args.devices[0]", "f'cuda:{args.local_rank}'").replace("args.devices[1]", "'cuda:1'")
    assert lines(src, "MP001") == []


def test_optparse_options_are_read_as_their_defaults():
    src = """
from optparse import OptionParser
import torch
import torch.nn as nn

parser = OptionParser()
parser.add_option("--trunk-gpu", type="int", default=0)
parser.add_option("--head-gpu", type="int", default=1)
opts, rest = parser.parse_args(ARGS)
a = nn.Linear(4, 4).to(f"cuda:{opts.trunk_gpu}")
b = nn.Linear(4, 4).to(f"cuda:{opts.head_gpu}")
y = b(a(torch.randn(2, 4, device=f"cuda:{opts.trunk_gpu}")))
"""
    assert lines(src.replace("ARGS", ""), "MP001") == [12]
    assert lines(src.replace("ARGS", '["--head-gpu", "0"]'), "MP001") == []  # options given: not known


@pytest.mark.parametrize(
    "settings",
    [
        'GPUS = sys.argv[1:3] or ["0", "1"]\nFIRST, SECOND = (f"cuda:{g}" for g in GPUS)',
        # read in a function: the same defaults, where they form a placement
        'def devices():\n    return os.environ.get("DP_DEVICES", "cuda:0,cuda:1").split(",")\nFIRST, SECOND = devices()',
    ],
)
def test_more_devices_from_defaults(settings):
    expected = 16 + settings.count("\n")
    assert lines(TWO_PARTS.replace("SETTINGS", settings), "MP001") == [expected]


def test_an_environment_variable_read_with_two_defaults_is_not_known():
    settings = (
        'def first():\n    return os.environ.get("MP_DEVICES", "cuda:0,cuda:1").split(",")[0]\n'
        'def second():\n    return os.environ.get("MP_DEVICES", "cuda:1,cuda:1").split(",")[1]\n'
        "FIRST, SECOND = first(), second()"
    )
    assert lines(TWO_PARTS.replace("SETTINGS", settings), "MP001") == []
