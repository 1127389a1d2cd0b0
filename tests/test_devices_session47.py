"""Session 47: findings of blind round 36 (each test names the general rule behind its case)."""

from __future__ import annotations

from lint_helpers import findings
from test_devices_session34 import ZIPPED


def test_a_short_placing_zip_is_mp017_though_its_devices_are_named_after_the_loop():
    # Round 36's t16: `for layer, dev in zip(self.layers, devices): layer.to(dev)`, then `self.head.to(devices[-1])`
    # places another module on the last device; it places none of the layers the zip left out.
    src = ZIPPED.replace("LOOP", "for blk, dev in zip(model.blocks, devices):\n        blk.to(dev)").replace(
        "AFTER", "model.head = nn.Linear(32, 2).to(devices[-1])"
    )
    (f,) = findings(src, "MP017")
    assert "pairs 6 modules with 2 devices" in f.message


CHILDREN = """
import torch.nn as nn


class TCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.Sequential(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), nn.Sequential(nn.Linear(8, 8)))

    def forward(self, x):
        for stage in self.stages:
            x = stage(x.to(next(stage.parameters()).device))
        return x


model = TCN()
devices = [f"cuda:{i}" for i in range(2)]
for stage, dev in zip(ZIPPED, devices):
    stage.to(dev)
"""


def test_one_container_zipped_with_several_devices_is_mp017():
    # Round 36's t24: `zip(model.children(), devices)` of a model whose only child holds the stages pairs that
    # child with the first device: the whole model lands there and the second GPU gets nothing.
    (f,) = findings(CHILDREN.replace("ZIPPED", "model.children()"), "MP017")
    assert "pairs 1 module with 2 devices" in f.message and "a container of 2 parts" in f.message


def test_the_container_s_parts_zipped_or_one_model_of_a_list_zipped_is_not_mp017():
    assert findings(CHILDREN.replace("ZIPPED", "model.stages"), "MP017") == []
    # one model of its own (no container) in a list of models zipped with the devices: a list of one, maybe more
    assert findings(CHILDREN.replace("ZIPPED", "[model]"), "MP017") == []


BUILT_IN_BLOCK = """
import torch
import torch.nn as nn


def build(enc_gpu, dec_gpu):
    with torch.cuda.device(enc_gpu):
        encoder = nn.Linear(8, 8).cuda()
    with torch.cuda.device(dec_gpu):
        decoder = nn.Linear(8, 8)
    AFTER
    return encoder, decoder


encoder, decoder = build(0, 1)
"""


def test_a_module_made_in_a_cuda_device_block_and_moved_to_the_current_device_after_it_is_mp004():
    # Round 35's t19: `decoder.cuda()` after the block runs where cuda:0 is current again: the split is lost.
    for after in ("decoder = decoder.cuda()", 'decoder.to("cuda")'):
        src = BUILT_IN_BLOCK.replace("AFTER", after)
        (f,) = findings(src, "MP004")
        assert f.line == 11 and "runs after that block" in f.message and "`decoder`" in f.message, after


def test_a_move_inside_the_block_with_an_index_or_after_set_device_is_not_this_mp004():
    for after in ("decoder = decoder.cuda(dec_gpu)", "decoder = decoder.to(f'cuda:{dec_gpu}')", "pass"):
        got = [f for f in findings(BUILT_IN_BLOCK.replace("AFTER", after), "MP004") if "after that block" in f.message]
        assert got == [], after
    inside = BUILT_IN_BLOCK.replace("        decoder = nn.Linear(8, 8)\n", "        decoder = nn.Linear(8, 8).cuda()\n")
    assert findings(inside.replace("AFTER", "pass"), "MP004") == []
    # a file that makes another device current: where `.cuda()` goes after the block is not this check's to say
    set_dev = BUILT_IN_BLOCK.replace("AFTER", "torch.cuda.set_device(dec_gpu)\n    decoder = decoder.cuda()")
    assert [f for f in findings(set_dev, "MP004") if "after that block" in f.message] == []
    # GPU 0 entered by a literal: the current device after the block is that one too
    zero = BUILT_IN_BLOCK.replace("torch.cuda.device(dec_gpu)", "torch.cuda.device(0)").replace(
        "AFTER", "decoder.cuda()"
    )
    assert findings(zero, "MP004") == []


REPLACED_WEIGHT = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 8).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


def init_weights(module):
    if isinstance(module, nn.Linear):
        module.weight = INIT


model = Net()
AFTER
y = model(torch.randn(4, 8))
"""


def test_a_placed_layer_given_a_new_parameter_made_on_the_host_computes_there():
    # Round 34's t13: init_weights(), applied after the model is placed, gives every Linear a new nn.Parameter
    # built on the CPU: the cuda:0 activations meet a CPU weight.
    fresh = "nn.Parameter(torch.empty(module.out_features, module.in_features).normal_(0.0, 0.02))"
    got = findings(REPLACED_WEIGHT.replace("INIT", fresh).replace("AFTER", "model.apply(init_weights)"), "MP001")
    assert len(got) == 2 and all("its weight was replaced by a new Parameter made there" in f.message for f in got)
    # the same on one layer by hand
    by_hand = REPLACED_WEIGHT.replace("INIT", fresh).replace(
        "AFTER", "model.a.weight = nn.Parameter(torch.empty(8, 8))"
    )
    (f,) = findings(by_hand, "MP001")
    assert "`self.a` is on cpu (its weight was replaced by a new Parameter made there)" in f.message


def test_an_init_in_place_or_before_the_placement_keeps_the_layers_where_they_are():
    in_place = REPLACED_WEIGHT.replace("module.weight = INIT", "nn.init.normal_(module.weight, 0.0, 0.02)")
    assert findings(in_place.replace("AFTER", "model.apply(init_weights)"), "MP001") == []
    # applied before the layers are placed: the new weights move with them
    before = REPLACED_WEIGHT.replace("INIT", "nn.Parameter(torch.empty(8, 8))").replace(
        '        self.a = nn.Linear(8, 8).to("cuda:0")\n        self.b = nn.Linear(8, 8).to("cuda:1")\n',
        "        self.a = nn.Linear(8, 8)\n        self.b = nn.Linear(8, 8)\n        self.apply(init_weights)\n"
        '        self.a.to("cuda:0")\n        self.b.to("cuda:1")\n',
    )
    assert findings(before.replace("AFTER", "pass"), "MP001") == []


CHUNKS = """
import torch
import torch.nn as nn

N_MICRO = COUNT
stage = nn.Linear(128, 128).to("cuda:0")
for step in range(2):
    ids = torch.randn(64, 128)
    micro = [c.to("cuda:0", non_blocking=True) for c in ids.chunk(N_MICRO)]  # <- chunks
    out = [stage(m) for m in micro]
"""


def test_a_few_micro_batches_moved_one_by_one_are_not_mp021_and_many_chunks_are():
    # dr35 c40: a pipeline's 4 micro-batches, each large, copied one by one cost about one copy of the whole
    assert findings(CHUNKS.replace("COUNT", "4"), "MP021") == []
    (f,) = findings(CHUNKS.replace("COUNT", "16"), "MP021")
    assert "is a chunk of `ids`" in f.message


TWO_BUILDS = """
import torch
import torch.nn as nn


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Conv2d(c, c, 3, 1, 1)

    def forward(self, x):
        return x + self.body(x)


def generator(c=8):
    return nn.Sequential(nn.Conv2d(3, c, 3, 1, 1), *[ResBlock(c) for _ in range(2)], nn.Conv2d(c, 3, 3, 1, 1))


G_AB = generator().to("cuda:0")
G_BA = generator().to("cuda:1")
real_A = torch.randn(2, 3, 16, 16, device="cuda:0")
fake_B = G_AB(real_A)
rec_A = G_BA(FAKE)
"""


def test_each_call_of_a_function_that_builds_modules_builds_its_own():
    # Round 37's t21 (good): two CycleGAN generators from one helper, each moved to its GPU. The helper's
    # memoised result held the same block objects twice, so moving the second moved the first's blocks too.
    assert findings(TWO_BUILDS.replace("FAKE", 'fake_B.to("cuda:1")'), "MP001") == []
    (f,) = findings(TWO_BUILDS.replace("FAKE", "fake_B"), "MP001")
    assert "`G_BA` is on cuda:1" in f.message


# A placing function given to model.apply: REPLACED_WEIGHT's, moving each module of the class PLACED.
APPLIED_PLACE = (
    REPLACED_WEIGHT.replace("isinstance(module, nn.Linear)", "isinstance(module, PLACED)")
    .replace("module.weight = INIT", 'module.to("cuda:0")')
    .replace("AFTER", "model.apply(init_weights)")
)


def test_model_apply_ends_with_the_model_itself():
    # Round 37's t03: Module.apply visits the root last, so a placing function that moves the root moves all of
    # it there, undoing the split its parts were given.
    (f,) = findings(APPLIED_PLACE.replace("PLACED", "Net"), "MP007")
    assert "onto cuda:0" in f.message
    assert findings(APPLIED_PLACE.replace("PLACED", "nn.Linear"), "MP007") == []


TYPE_GUARD = """
import torch
import torch.nn as nn


def ensure_on(module, device):
    device = torch.device(device)
    if TEST:
        module.to(device)
    return module


enc = ensure_on(nn.Linear(8, 8).cuda(), "cuda:0")
dec = ensure_on(nn.Linear(8, 8).cuda(), "cuda:1")
"""


def test_a_move_guarded_by_a_comparison_of_device_types_is_mp017():
    # Round 37's t26: `if module_device(module).type != device.type: module.to(device)` never moves a module from
    # cuda:0 to cuda:1: both are 'cuda'.
    (f,) = findings(TYPE_GUARD.replace("TEST", "next(module.parameters()).device.type != device.type"), "MP017")
    assert "compares device types only" in f.message and f.line == 8
    for test in ("next(module.parameters()).device != device", 'next(module.parameters()).device.type != "cuda"'):
        assert findings(TYPE_GUARD.replace("TEST", test), "MP017") == [], test


def test_a_type_guarded_move_in_a_helper_file_that_names_no_gpu_is_mp017(tmp_path, capsys):
    # Round 37's t26 as it was: the guard sits in placement.py, which never says `cuda` (its callers pass the
    # devices), so the text pre-filter let no rule of MP017's words see it.
    from mpcheck import cli

    (tmp_path / "placement.py").write_text(
        '"""Spread a model over the given places."""\n'
        "import torch\n\n\n"
        "def ensure_on(module, device):\n"
        "    device = torch.device(device)\n"
        "    if next(module.parameters()).device.type != device.type:\n"
        "        module.to(device)\n"
        "    return module\n"
    )
    (tmp_path / "main.py").write_text(
        'import torch.nn as nn\nfrom placement import ensure_on\n\nensure_on(nn.Linear(8, 8).cuda(), "cuda:1")\n'
    )
    code = cli.main(["--no-cache", "--isolated", "--output-format", "json", str(tmp_path)])
    out = capsys.readouterr().out
    import json

    found = [(f["path"].rsplit("/", 1)[-1], f["line"], f["code"]) for f in json.loads(out)]
    assert code == 1 and found == [("placement.py", 7, "MP017")]
