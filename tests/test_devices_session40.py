"""Session 40: stage-building loops over the GPUs that set each pass's device. A bare `.cuda()` made before the
pass's `set_device(gpu)` lands one GPU behind (MP004 at the placement); a module placed with a bare `.cuda()`
right after a loop that set each device before placing its stage joins the last stage, as the idiom means."""

from __future__ import annotations

import sys

import pytest
from lint_helpers import lines

STAGES = """
import argparse
import torch
import torch.nn as nn


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage-gpus", type=int, nargs="+", default=[0, 1])
    return ap.parse_args()


class Net(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.stages = nn.ModuleList()
        for i, gpu in enumerate(args.stage_gpus):
            PASS
        self.head = nn.Linear(16, 4).cuda()  # <- head

    def forward(self, x):
        for stage in self.stages:
            x = stage(x.to(next(stage.parameters()).device))
        return self.head(x.to(self.head.weight.device))


model = Net(parse_args())
print(model(torch.randn(2, 16)))
"""

SET_THEN_PLACE = "torch.cuda.set_device(gpu)\n            self.stages.append(nn.Linear(16, 16).cuda())"
PLACE_THEN_SET = "self.stages.append(nn.Linear(16, 16).cuda())  # <- early\n            torch.cuda.set_device(gpu)"


def _line(src: str, mark: str) -> int:
    return next(i for i, text in enumerate(src.splitlines(), 1) if f"# <- {mark}" in text)


def _bad_at_mark_good_silent(template: str, hole: str, bad: str, good: str, mark: str) -> None:
    """`template` with `hole` filled by `bad` gives MP001 at the line marked `mark` only; with `good`, none."""
    src = template.replace(hole, bad)
    assert lines(src, "MP001") == [_line(src, mark)]
    assert lines(template.replace(hole, good), "MP001") == []


def test_a_module_placed_bare_after_a_set_then_place_loop_joins_the_last_stage():
    src = STAGES.replace("PASS", SET_THEN_PLACE)
    assert lines(src, "MP004") == []


def test_a_bare_cuda_before_the_pass_sets_its_device_is_one_gpu_behind():
    src = STAGES.replace("PASS", PLACE_THEN_SET)
    got = lines(src, "MP004")
    assert _line(src, "early") in got


def test_a_set_device_that_is_not_the_loop_variable_is_no_pass_device():
    # The pass places on its own GPU, then restores GPU 0: nothing is placed one GPU behind (and the head after
    # the loop lands on cuda:0, where a process that never called set_device puts it too).
    src = STAGES.replace(
        "PASS", "self.stages.append(nn.Linear(16, 16).cuda(gpu))\n            torch.cuda.set_device(0)"
    )
    assert lines(src, "MP004") == []


def test_a_loop_that_sets_the_device_without_placing_after_it_still_leaves_the_later_bare_cuda_reported():
    # set_device(gpu) with nothing placed index-less right after it: the head's bare `.cuda()` lands on the
    # last GPU of a loop that built nothing there the same way, as before.
    src = STAGES.replace(
        "PASS", "torch.cuda.set_device(gpu)\n            self.stages.append(nn.Linear(16, 16).to(f'cuda:{gpu}'))"
    )
    assert lines(src, "MP004") == [_line(src, "head")]


def test_a_triple_quoted_json_literal_counts_for_the_pre_filter():
    # Round 27's t09: a run configuration as a multi-line JSON string, read with json.loads.
    from mpcheck.lint.livetext import LiveText

    assert LiveText('RUN = json.loads("""{\n  "device": "cuda:0",\n  "lr": 0.5\n}""")\n').has("cuda")
    assert LiveText("RUN = json.loads('''[\n  \"cuda:0\"\n]''')\n").has("cuda")
    assert not LiveText('def f():\n    """Put the {cuda} stages first."""\n').has("cuda")


UPDATE_BN = """
import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel, update_bn
from torch.utils.data import DataLoader, TensorDataset

DEVICES = ["cuda:0", "cuda:1"]


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).to(DEVICES[0])
        self.head = nn.Sequential(nn.Flatten(), nn.LazyLinear(10)).to(DEVICES[1])

    def forward(self, x):
        return self.head(self.trunk(x).to(DEVICES[1]))


loader = DataLoader(TensorDataset(torch.randn(16, 3, 8, 8), torch.randint(0, 10, (16,))), batch_size=4)
swa = AveragedModel(Split())
update_bn(loader, swa, device=WHERE)  # <- call
"""


def test_update_bn_moves_each_batch_to_its_device_argument():
    # Round 27's t01: the output GPU given where the trunk's was meant.
    bad = UPDATE_BN.replace("WHERE", "DEVICES[-1]")
    assert lines(bad, "MP001") == [_line(bad, "call")]
    assert lines(UPDATE_BN.replace("WHERE", "DEVICES[0]"), "MP001") == []
    assert lines(UPDATE_BN.replace("WHERE", "torch.device('cuda', 0)"), "MP001") == []


META_SGD = """
import math
import torch
import torch.nn as nn


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.lower = nn.Linear(1, 8).to("cuda:0")
        self.upper = nn.Linear(8, 1).to("cuda:1")

    def forward(self, x):
        return self.upper(self.lower(x.to("cuda:0")).to("cuda:1"))


model = Regressor()
log_lr = nn.ParameterDict({
    name.replace(".", "_"): nn.Parameter(torch.full(p.shape, math.log(0.01), device=WHERE))
    for name, p in model.named_parameters()})
params = dict(model.named_parameters())
fast = {n: p - log_lr[n.replace(".", "_")].exp() for n, p in params.items()}  # <- use
"""


def test_a_parameter_dict_of_per_weight_rates_on_one_gpu_meets_the_split_models_parameters():
    # Round 27's t02: Meta-SGD's learning rates all made on cfg.device, the weights on two GPUs.
    _bad_at_mark_good_silent(META_SGD, "WHERE", '"cuda:0"', "p.device", "use")


def test_a_parameter_list_and_dict_keep_their_entries_devices():
    src = """
import torch
import torch.nn as nn

scales = nn.ParameterList([nn.Parameter(torch.ones(4, device="cuda:0")), nn.Parameter(torch.ones(4, device="cuda:1"))])
gates = nn.ParameterDict({"a": nn.Parameter(torch.ones(4, device="cuda:0")), "b": nn.Parameter(torch.ones(4, device="cuda:1"))})
x = torch.randn(4, device="cuda:1")
ok = x * scales[1] + gates["b"]
bad = x * scales[0]  # <- first
worse = torch.randn(4, device="cuda:1") * gates["a"]  # <- second
"""
    assert lines(src, "MP001") == [_line(src, "first"), _line(src, "second")]


FLAT = """
import torch
import torch.nn as nn
from torch.nn.utils import parameters_to_vector


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.low = nn.Linear(4, 4).to("cuda:0")
        self.fc = nn.Linear(4, 2).to("cuda:1")

    def forward(self, x):
        return self.fc(self.low(x.to("cuda:0")).to("cuda:1"))


model = Net()
v = FLATTEN  # <- flat
"""


def test_the_parameters_of_a_split_model_flattened_into_one_tensor_are_mp001():
    # parameters_to_vector / torch.cat need every parameter on one device ("Found two parameters on different
    # devices"); one stage's parameters are on one.
    for bad in ("parameters_to_vector(model.parameters())", "torch.cat(list(model.parameters()))"):
        src = FLAT.replace("FLATTEN", bad)
        assert lines(src, "MP001") == [_line(src, "flat")], bad
    for good in ("parameters_to_vector(model.low.parameters())", "parameters_to_vector(model.fc.parameters())"):
        assert lines(FLAT.replace("FLATTEN", good), "MP001") == [], good


def test_a_config_files_text_that_sets_a_device_counts_for_the_pre_filter():
    from mpcheck.lint.livetext import LiveText

    toml = 'S = tomllib.loads("""\n[placement]\nquery_device = "cuda:0"\nkey_device = "cuda:1"\n""")\n'
    yaml = "CFG = yaml.safe_load('''\nmodel:\n  devices: [cuda:0, cuda:1]\n  head_device: cuda\n''')\n"
    ini = 'P.read_string("""\n[run]\ndevice = cuda:1\nlr = 0.1\n""")\n'
    for text in (toml, yaml, ini):
        assert LiveText(text).has("cuda"), text
    for prose in (
        'def f(device):\n    """Run it.\n\n    device: the cuda device to run on\n    """\n',
        "raise ValueError('expected a cuda device, got: cpu')\n",
        'HELP = """Use --device cuda:1 to pick the second GPU."""\n',
    ):
        assert not LiveText(prose).has("cuda"), prose


TOML_PLACEMENT = '''
import tomllib
import torch
import torch.nn as nn

SETTINGS = tomllib.loads("""
[placement]
query_device = "cuda:0"
key_device = "cuda:1"
""")

q_dev = torch.device(SETTINGS["placement"]["query_device"])
k_dev = torch.device(SETTINGS["placement"]["key_device"])
query = nn.Linear(8, 8).to(q_dev)
keys = torch.randn(16, 8, device=k_dev)
scores = query(torch.randn(4, 8, device=q_dev)) @ KEYS.T  # <- meet
'''


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11's")
def test_a_placement_read_from_a_toml_string_is_known():
    # Round 27's t07: the settings are a TOML string read with tomllib.loads.
    _bad_at_mark_good_silent(TOML_PLACEMENT, "KEYS", "keys", "keys.to(q_dev)", "meet")


def test_a_distributions_log_prob_of_a_value_on_another_gpu_is_mp001():
    # Round 27's t16: REINFORCE's actions moved with the rollout to the encoder's GPU, the policy's
    # Categorical on the head's.
    src = """
import torch
from torch.distributions import Categorical, Normal

logits = torch.randn(4, 10, device="cuda:1")
dist = Categorical(logits=logits)
actions = torch.randint(0, 10, (4,), device="cuda:0")
logp = dist.log_prob(actions)  # <- meet
ok = dist.log_prob(actions.to(logits.device)) + dist.log_prob(dist.sample())
mu = torch.randn(4, device="cuda:1")
normal = Normal(mu, torch.ones(4, device="cuda:1"))
fine = normal.log_prob(torch.tensor(0.5)) + normal.cdf(mu * 2)  # a 0-dim host value may meet a GPU's
"""
    assert lines(src, "MP001") == [_line(src, "meet")]


ONE_PART_FLAG = """
import argparse
import torch
import torch.nn as nn


class FastText(nn.Module):
    def __init__(self, ngram_gpu):
        super().__init__()
        self.words = nn.EmbeddingBag(100, 8).to("cuda:0")
        self.ngram_dev = torch.device("cuda", ngram_gpu)
        self.ngrams = nn.EmbeddingBag(1000, 8).to(self.ngram_dev)

    def forward(self, ids, offsets, ngram_ids, ngram_offsets):
        hg = self.ngrams(ngram_ids.to(self.ngram_dev), ngram_offsets)  # <- bag
        return torch.cat([self.words(ids, offsets).to(self.ngram_dev), hg], dim=1)


ap = argparse.ArgumentParser()
ap.add_argument("--FLAG", type=int, default=1)
args = ap.parse_args()
model = FastText(args.FLAG)
b = [torch.tensor([1, 2, 3]).to("cuda:0"), torch.tensor([0]).to("cuda:0")]
out = model(b[0], b[1], b[0], b[1])
"""


def test_one_gpu_flag_named_for_a_part_of_the_model_is_read_as_its_default():
    # Round 26's t10: `--ngram-gpu 1`, the bigram bag's GPU, while the word bag is on cuda:0.
    for flag in ("ngram-gpu", "ngram_gpu", "teacher-device"):
        src = ONE_PART_FLAG.replace("FLAG", flag)
        src = src.replace(f"args.{flag}", f"args.{flag.replace('-', '_')}")
        assert lines(src, "MP001") == [_line(src, "bag")], flag
    # A launcher's index (`--gpu`, `--device-id`, `--local-rank`) and a count stay unknown: nothing is claimed.
    for flag in ("gpu", "device-id", "local-rank", "gpu-index"):
        src = ONE_PART_FLAG.replace("FLAG", flag).replace(f"args.{flag}", f"args.{flag.replace('-', '_')}")
        assert lines(src, "MP001") == [], flag


def test_an_index_tensor_on_another_gpu_in_any_position_or_assigned_through_is_mp001():
    # Round 26's t05: a logits processor's EOS ids made on the input's GPU index the LM head's scores.
    template = """
import torch
scores = torch.randn(4, 10, device="cuda:1")
eos = torch.tensor([2, 3], device="cuda:0")
USE  # <- use
"""
    for bad in ('scores[:, eos] = -float("inf")', "x = scores[:, eos]", "scores[eos] = 0.0", "x = scores[eos, :]"):
        src = template.replace("USE", bad)
        assert lines(src, "MP001") == [_line(src, "use")], bad
    for good in (
        'scores[:, eos.to(scores.device)] = -float("inf")',
        "x = scores[:, eos.cpu()]",  # a host index may pick from a GPU tensor
        "scores[eos.cpu()] = 0.0",
        "x = scores[:, 1:3]",
    ):
        assert lines(template.replace("USE", good), "MP001") == [], good


def test_a_small_spelled_out_tensor_drawn_with_a_generator_or_a_linspace_is_no_repeat():
    # Precision round 27's c34: a few query points and a handful of shots moved for each of two inits.
    template = """
import torch
SHOTS = 10
g = torch.Generator()
x = MADE
for k in range(2):
    a = x.to("cuda:1")  # <- copy
"""
    for small in ("torch.rand(SHOTS, 1, generator=g) * 10 - 5", "torch.linspace(-5, 5, 100)[:, None]"):
        assert lines(template.replace("MADE", small), "MP011") == [], small
    for large in ("torch.linspace(-5, 5, 100000)", "torch.rand(SHOTS * 10000, 100, generator=g)"):
        src = template.replace("MADE", large)
        assert lines(src, "MP011") == [_line(src, "copy")], large


# ----------------------------------------------------------------- MP024: a default that keeps the old device

STAGE_DEFAULT = """
import torch
import torch.nn as nn

_STAGE_DEVICE = "cuda:0"


def set_stage_device(device):
    global _STAGE_DEVICE
    _STAGE_DEVICE = device


class Stage(nn.Module):
    def __init__(self, width, device=_STAGE_DEVICE):
        super().__init__()
        self.net = nn.Linear(width, width).to(device)


def make(width, device=_STAGE_DEVICE):
    return nn.Linear(width, width).to(device)


stages = []
for dev in ("cuda:0", "cuda:1"):
    set_stage_device(dev)
    stages.append(BUILD)  # <- build
"""


def test_a_call_that_leaves_a_default_of_a_rebound_device_setting_is_mp024():
    # Round 26's t27: DenseStage's device=_STAGE_DEVICE, bound when the class was defined.
    for build in ("Stage(64)", "make(64)"):
        src = STAGE_DEFAULT.replace("BUILD", build)
        assert lines(src, "MP024") == [_line(src, "build")], build
    for build in ("Stage(64, device=dev)", "Stage(64, dev)", "make(64, dev)", "Stage(*[64, dev])"):
        assert lines(STAGE_DEFAULT.replace("BUILD", build), "MP024") == [], build


def test_a_setting_no_function_rebinds_or_one_that_is_no_device_is_silent():
    constant = STAGE_DEFAULT.replace("    global _STAGE_DEVICE\n    _STAGE_DEVICE = device\n", "    print(device)\n")
    assert lines(constant.replace("BUILD", "Stage(64)"), "MP024") == []
    index = STAGE_DEFAULT.replace('_STAGE_DEVICE = "cuda:0"', "_STAGE_DEVICE = 0")  # an index, by its name
    assert lines(index.replace("BUILD", "Stage(64)"), "MP024") == [_line(index, "build")]
    rate = STAGE_DEFAULT.replace("_STAGE_DEVICE", "_RATE").replace('_RATE = "cuda:0"', "_RATE = 0.1")
    assert lines(rate.replace("BUILD", "Stage(64)"), "MP024") == []


def test_a_container_moved_whole_by_the_same_line_on_each_pass_is_no_collapse():
    # Round 28's t27 good file: the head follows the pass's device, `self.head.to(dev)`, in the placement loop.
    src = """
import torch
import torch.nn as nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))
        self.head = nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 2))

    def parallelize(self, devices):
        for i, dev in enumerate(devices):
            self.blocks[i].to(dev)
            self.head.to(dev)
        return self


devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
model = M().parallelize(devices)
model.to(devices[0])  # <- collapse
"""
    assert lines(src, "MP007") == [_line(src, "collapse")]


def test_an_optimizer_step_given_a_closure_runs_it():
    # Round 28's t16: temperature scaling fitted with L-BFGS, `opt.step(closure)`, the scaler on the wrong GPU.
    src = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Scaler(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_t = nn.Parameter(torch.zeros(1))

    def forward(self, logits):
        return logits / self.log_t.exp()

    def fit(self, logits, labels):
        opt = torch.optim.LBFGS([self.log_t], lr=0.1, max_iter=50)

        def closure():
            opt.zero_grad()
            loss = F.cross_entropy(self(logits), labels)  # <- fit
            loss.backward()
            return loss

        opt.step(closure)
        return self


logits = torch.randn(8, 4, device="cuda:1")
labels = torch.randint(0, 4, (8,), device="cuda:1")
scaler = Scaler().to(WHERE).fit(logits, labels)
"""
    bad = src.replace("WHERE", '"cuda:0"')
    assert _line(bad, "fit") in lines(bad, "MP001")
    assert lines(src.replace("WHERE", "logits.device"), "MP001") == []


def test_scatter_reduce_and_index_copy_with_an_index_on_another_gpu_are_mp001():
    # Round 28's t10: subword states pooled into words with `scatter_reduce`, the word map on the input's GPU.
    template = """
import torch
h = torch.randn(2, 5, 8, device="cuda:1")
word_ids = torch.randint(0, 3, (2, 5), device=WHERE)
slot = word_ids[..., None].expand_as(h)
words = torch.zeros(2, 8, 8, device=h.device).scatter_reduce(1, slot, h, reduce="mean")  # <- pool
cache = torch.zeros(16, 8, device="cuda:1").index_copy_(0, word_ids[0], h[0])  # <- cache
"""
    bad = template.replace("WHERE", '"cuda:0"')
    assert lines(bad, "MP001") == [_line(bad, "pool"), _line(bad, "cache")]
    assert lines(template.replace("WHERE", '"cuda:1"'), "MP001") == []
