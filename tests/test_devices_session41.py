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


# ----------------------------------------------------------------- MP025: a string compared with a number
ENV = """
import os
import sys
import torch
import torch.nn as nn

READ
enc_dev = torch.device("cuda:0")
dec_dev = torch.device("cuda:1") if TEST else enc_dev  # <- test
decoder = nn.Linear(64, 8).to(dec_dev)
"""


def _line(src: str, mark: str) -> int:
    return next(i for i, text in enumerate(src.splitlines(), 1) if f"# <- {mark}" in text)


def test_an_environment_string_compared_with_a_number_in_a_device_test_is_mp025():
    for read, test in (
        ('MP = os.environ.get("MODEL_PARALLEL", "1")', "MP == 1"),
        ('MP = os.getenv("MODEL_PARALLEL")', "MP != 0"),
        ('MP = os.environ["MODEL_PARALLEL"].strip()', "1 == MP"),
        ("MP = sys.argv[1]", "MP == 2"),
        ("MP = None", 'os.environ.get("MP", "0") == 1'),
    ):
        src = ENV.replace("READ", read).replace("TEST", test)
        got = findings(src, "MP025")
        assert [f.line for f in got] == [_line(src, "test")], (read, test)
        assert ("always True" if "!=" in test else "always False") in got[0].message


def test_a_converted_or_other_typed_value_and_tests_deciding_no_device_are_clean():
    for read, test in (
        ('MP = int(os.environ.get("MODEL_PARALLEL", "1"))', "MP == 1"),
        ('MP = os.environ.get("MODEL_PARALLEL", "1")', 'MP == "1"'),
        ('MP = os.environ.get("MODEL_PARALLEL", 1)', "MP == 1"),  # the default's type while unset
        ('MP = os.environ.get("MODEL_PARALLEL", "1")\nMP = int(MP)', "MP == 1"),
        ('MP = os.environ.get("MODEL_PARALLEL", "1")', "len(MP) == 1"),
    ):
        src = ENV.replace("READ", read).replace("TEST", test)
        assert lines(src, "MP025") == [], (read, test)
    no_device = """
    import os
    VERBOSE = os.environ.get("VERBOSE", "0")
    if VERBOSE == 1:
        print("verbose")
    """
    assert lines(no_device, "MP025") == []
    parameter = """
    import os
    import torch

    def pick(mp):
        return torch.device("cuda:1") if mp == 1 else torch.device("cuda:0")

    mp = os.environ.get("MP", "1")
    """
    assert lines(parameter, "MP025") == []


# ----------------------------------------------------------------- MP026: a generator of devices read twice
GEN = """
import torch
import torch.nn as nn

stages = [nn.Linear(64, 64) for _ in range(4)]


def place():
    devices = MAKE
    FIRST
    for dev, stage in zip(devices, stages):  # <- second
        stage.to(dev)
"""


def test_a_generator_of_devices_read_through_before_the_placement_is_mp026():
    gen = '(torch.device("cuda", i) for i in range(torch.cuda.device_count()))'
    for first in (
        'print("over", ", ".join(str(d) for d in devices))',
        "print(list(devices))",
        "n = sum(1 for _ in devices)",
        "for d in devices: print(d)",
        "for i, d in enumerate(devices): print(i, d)",
    ):
        src = GEN.replace("MAKE", gen).replace("FIRST", first)
        got = findings(src, "MP026")
        assert [f.line for f in got] == [_line(src, "second")], first
        assert "line 10" in got[0].message


def test_a_device_read_with_next_before_the_placement_shifts_it():
    # (Session 46: one item read is no longer left alone: the placement after it starts at the second device.)
    src = GEN.replace("MAKE", '(torch.device("cuda", i) for i in range(2))').replace("FIRST", "print(next(devices))")
    (f,) = findings(src, "MP026")
    assert f.line == _line(src, "second") and "took its first device" in f.message


def test_a_list_a_single_read_a_rebinding_or_a_generator_of_no_devices_are_clean():
    gen = '(torch.device("cuda", i) for i in range(2))'
    cases = (
        ('[torch.device("cuda", i) for i in range(2)]', 'print(", ".join(str(d) for d in devices))'),
        (gen, "pass"),
        (gen, f"print(list(devices)); devices = {gen}"),
        (gen, "pairs = enumerate(devices)"),  # a lazy wrapper kept, not walked: nothing read yet
        ("(i * 2 for i in range(2))", "print(list(devices))"),
    )
    for make, first in cases:
        src = GEN.replace("MAKE", make).replace("FIRST", first)
        assert lines(src, "MP026") == [], (make, first)


# ----------------------------------------------------------------- configuration texts: INI and YAML
INI_SCRIPT = '''
import configparser
import torch
import torch.nn as nn

INI = """
[DEFAULT]
hidden = 64
[placement]
Encoder = cuda:0
decoder = DECODER
"""
cp = configparser.ConfigParser()
cp.read_string(INI)
enc = nn.Linear(cp["placement"].getint("hidden"), 64).to(cp["placement"]["encoder"])
dec = nn.Linear(64, 8).to(cp.get("placement", "decoder"))
y = dec(enc(torch.randn(4, 64, device="cuda:0")))  # <- call
'''


def test_devices_read_from_an_ini_text_with_configparser_are_known():
    src = INI_SCRIPT.replace("DECODER", "cuda:1")
    assert lines(src, "MP001") == [_line(src, "call")]
    assert lines(INI_SCRIPT.replace("DECODER", "cuda:0"), "MP001") == []
    # a file read from disk: its values are not known, and nothing is said
    unknown = INI_SCRIPT.replace("DECODER", "cuda:1").replace("cp.read_string(INI)", 'cp.read("train.ini")')
    assert lines(unknown, "MP001") == []


YAML_SCRIPT = '''
import yaml
import torch
import torch.nn as nn

CFG = yaml.safe_load("""
# where each part goes
placement:
  encoder: cuda:0
  decoder: "DECODER"
stages: [64, 8]
""")
enc = nn.Linear(CFG["stages"][0], 64).to(CFG["placement"]["encoder"])
dec = nn.Linear(64, CFG["stages"][1]).to(CFG["placement"]["decoder"])
y = dec(enc(torch.randn(4, 64, device="cuda:0")))  # <- call
'''


def test_devices_read_from_a_yaml_text_are_known_without_pyyaml():
    src = YAML_SCRIPT.replace("DECODER", "cuda:1")
    assert lines(src, "MP001") == [_line(src, "call")]
    assert lines(YAML_SCRIPT.replace("DECODER", "cuda:0"), "MP001") == []
    # beyond the subset read (an anchor): not known, nothing said
    anchored = src.replace('decoder: "cuda:1"', "decoder: &d cuda:1")
    assert lines(anchored, "MP001") == []


def test_the_yaml_subset_reads_what_pyyaml_reads_or_refuses():
    import pytest

    from mpcheck.devices import yaml_text

    yaml = pytest.importorskip("yaml")
    texts = [
        "model:\n  width: 64   # a comment\n  devices: {encoder: 'cuda:0', decoder: cuda:1}\n",
        "stages:\n  - device: cuda:0\n    layers: 4\n  - device: cuda:1\n    layers: [1, 2.5, x]\n",
        "lr: 1.0e-3\nwarmup: 1e5\nflag: yes\noff_flag: Off\nnone: ~\ns: 'it''s'\nn: -3\n",
        "- cuda:0\n- cuda:1\n",
        "k:\n- a\n- b\nother: 1\n",
        "gpus: 2\nname: run #1 of 2\n",
    ]
    for text in texts:
        assert yaml_text.load(text) == yaml.safe_load(text), text
    for beyond in ("a: &x 1\nb: *x\n", "a: 010\n", "t: 1:30\n", "s: |\n  two\n  lines\n", "---\na: 1\n"):
        assert yaml_text.load(beyond) is None, beyond


# ----------------------------------------------------------------- parameters filtered by name
NAMED = """
import torch
import torch.nn as nn
from torch.nn.utils import parameters_to_vector


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.low = nn.Linear(8, 8).to("cuda:0")
        self.high = nn.Linear(8, 8).to("cuda:1")
        self.fc = nn.Linear(8, 2).to("cuda:1")

    def picked(self):
        return [p for n, p in self.named_parameters() if FILTER]


model = Net()
v = parameters_to_vector(model.picked())  # <- join
"""


def test_parameters_kept_by_a_name_filter_on_two_gpus_are_joined_on_two_gpus():
    for test in ('not n.startswith("fc.")', '"low" in n or n.startswith(("high", "fc"))'):
        src = NAMED.replace("FILTER", test)
        assert lines(src, "MP001") == [_line(src, "join")], test


def test_a_name_filter_that_keeps_one_gpu_or_is_not_decided_says_nothing():
    for test in ('n.startswith("fc.")', 'n.startswith(("high.", "fc."))', '"low" in n', 'n.endswith("bias")'):
        assert lines(NAMED.replace("FILTER", test), "MP001") == [], test


# ----------------------------------------------------------------- MP027: a kept closure reads the last device
LATE = """
import torch.nn as nn

PLAN = {"encoder": "cuda:0", "decoder": "cuda:1"}
blocks = [nn.Linear(8, 8), nn.Linear(8, 8)]
policy, hooks = {}, []
for name, dev in PLAN.items():
    MAKE  # <- make
"""


def test_a_kept_closure_that_places_on_the_loop_variable_is_mp027():
    for make in (
        "policy[name] = lambda module: module.to(dev)",
        "hooks.append(lambda m, args: (args[0].to(dev),))",
        "blocks[0].register_forward_pre_hook(lambda m, args: (args[0].to(dev),))",
        "def place(module):\n        return module.to(dev)\n    policy[name] = place",
    ):
        src = LATE.replace("MAKE", make)
        got = findings(src, "MP027")
        assert [f.line for f in got] == [8], make  # the lambda, or the `def` line
        assert "`dev=dev`" in got[0].message


def test_a_bound_default_a_call_made_at_once_or_no_move_is_clean():
    for make in (
        "policy[name] = lambda module, dev=dev: module.to(dev)",
        "blocks[0].apply(lambda m: m.to(dev))",
        "policy[name] = lambda module: print(name, dev)",
        "policy[name] = (lambda module: module.to(dev))(blocks[0])",
    ):
        assert lines(LATE.replace("MAKE", make), "MP027") == [], make


NAMEDTUPLE = """
from collections import namedtuple
import torch
import torch.nn as nn

Cfg = namedtuple("Cfg", FIELDS)
cfg = MAKE
a = nn.Linear(8, 8).to(cfg.device)
b = nn.Linear(8, 8).to(cfg.step_device)
y = b(a(torch.randn(2, 8, device="cuda:0")))  # <- call
"""


def test_devices_kept_in_a_namedtuple_config_are_known():
    for fields, make in (
        ('"device step_device"', 'Cfg(device="cuda:0", step_device="cuda:1")'),
        ('["device", "step_device"]', 'Cfg("cuda:0", "cuda:1")'),
        ('"device, step_device", defaults=["cuda:1"]', 'Cfg("cuda:0")'),
    ):
        src = NAMEDTUPLE.replace("FIELDS", fields).replace("MAKE", make)
        assert lines(src, "MP001") == [_line(src, "call")], (fields, make)
    same = NAMEDTUPLE.replace("FIELDS", '"device step_device"').replace("MAKE", 'Cfg("cuda:0", "cuda:0")')
    assert lines(same, "MP001") == []
    # a call Python refuses (an unknown field): nothing known, nothing said
    bad = NAMEDTUPLE.replace("FIELDS", '"device step_device"').replace("MAKE", 'Cfg("cuda:0", gpu="cuda:1")')
    assert lines(bad, "MP001") == []
