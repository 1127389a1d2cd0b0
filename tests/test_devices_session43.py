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
