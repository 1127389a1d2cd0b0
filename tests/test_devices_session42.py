"""Session 42: a strided slice taken after the move (MP016), a tensor upsampled or unfolded before its move (MP016),
a helper that reduces a moved weight through a Gram matrix (MP016), and a copy made on every pass of a loop but read
only every N-th pass (MP028)."""

from __future__ import annotations

import pytest
from lint_helpers import findings, lines

HOP = """
import torch
import torch.nn as nn
import torch.nn.functional as F

SKIP = 4


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.front = nn.Conv1d(40, 64, 5, padding=2).to("cuda:0")
        self.back = nn.Linear(64, 8).to("cuda:1")

    def forward(self, x):
        h = self.front(x.to("cuda:0")).transpose(1, 2)
        h = HOP  # <- hop
        return self.back(h).mean(1)
"""


def test_a_strided_slice_after_the_move_is_mp016():
    (f,) = findings(HOP.replace("HOP", 'h.to("cuda:1")[:, ::SKIP]'), "MP016")
    assert f.line == 17 and "`[:, ::SKIP]`" in f.message and f.devices == ("cuda:0", "cuda:1")


@pytest.mark.parametrize(
    "hop",
    [
        'h[:, ::SKIP].to("cuda:1")',  # the fix: sliced first
        'h.to("cuda:1")[:, ::1]',  # a step of 1 drops nothing
        'h.to("cuda:1")[:, ::-1]',  # reversed: all of it is used
        'h.to("cuda:1")[:, 2:]',  # a range: how much it keeps is not known
        'h.to("cuda:1")[:, ::STEP]',  # a step the file does not spell out
    ],
)
def test_slices_that_keep_all_or_an_unknown_part_are_silent(hop):
    assert lines(HOP.replace("HOP", hop), "MP016") == []


UPSAMPLED = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1).to("cuda:0")
        self.b = nn.Conv2d(8, 3, 3, padding=1).to("cuda:1")

    def forward(self, x):
        h = self.a(x.to("cuda:0"))
        BODY
"""


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ('return self.b(F.interpolate(h, scale_factor=4).to("cuda:1"))', "upsampled"),
        ('return self.b(F.interpolate(h, scale_factor=(4, 2), mode="bilinear").to("cuda:1"))', "upsampled"),
        ('u = F.interpolate(h, scale_factor=4)\n        return self.b(u.to("cuda:1"))', "upsampled"),
        ('p = F.unfold(h, 3, padding=1).to("cuda:1")\n        return p.sum()', "unfolded"),
    ],
)
def test_a_tensor_enlarged_by_a_resampler_then_moved_is_mp016(body, what):
    (f,) = findings(UPSAMPLED.replace("BODY", body), "MP016")
    assert what in f.message and f.devices == ("cuda:0", "cuda:1")


@pytest.mark.parametrize(
    "body",
    [
        'return self.b(F.interpolate(h.to("cuda:1"), scale_factor=4))',  # the fix
        'return self.b(F.interpolate(h, scale_factor=2).to("cuda:1"))',  # 4 times the data: below 8
        'return self.b(F.unfold(h, 2).to("cuda:1").view(h.shape[0], -1, 8, 8))',  # 2x2 patches: 4 times
        'return self.b(F.interpolate(h, scale_factor=0.5).to("cuda:1"))',  # smaller
        'return self.b(F.interpolate(h, size=(64, 64)).to("cuda:1"))',  # a size: larger or smaller
        'return self.b(F.unfold(h, 2, stride=2).to("cuda:1").view_as(h))',  # patches that do not overlap
        # used where it was made too (a residual): computed for its own sake
        'u = F.interpolate(h, scale_factor=4)\n        return self.b(u.to("cuda:1")) + u.mean()',
    ],
)
def test_resampling_that_does_not_enlarge_or_is_used_where_made_is_silent(body):
    assert lines(UPSAMPLED.replace("BODY", body), "MP016") == []


ORTHO = """
import torch
import torch.nn as nn


def ortho_penalty(w):
    gram = w @ w.T
    return (gram - torch.eye(w.shape[0], device=w.device)).pow(2).sum()


a = nn.Linear(64, 64).to("cuda:0")
b = nn.Linear(64, 64).to("cuda:1")
reg = CALL
"""


def test_a_weight_moved_for_a_gram_penalty_computed_from_it_alone_is_mp016():
    (f,) = findings(ORTHO.replace("CALL", 'ortho_penalty(b.weight.to("cuda:0"))'), "MP016")
    assert f.line == 13 and "reduced to one value" in f.message


def test_the_penalty_computed_where_the_weight_is_or_a_gram_read_twice_is_silent():
    assert lines(ORTHO.replace("CALL", 'ortho_penalty(b.weight).to("cuda:0")'), "MP016") == []
    twice = ORTHO.replace("    return (gram", "    print(gram.tolist())\n    return (gram")
    assert lines(twice.replace("CALL", 'ortho_penalty(b.weight.to("cuda:0"))'), "MP016") == []


LOGGED = """
import torch
import torch.nn as nn

model = nn.Linear(64, 64).to("cuda:1")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
log = []
for step in range(100):
    out = model(torch.randn(8, 64, device="cuda:1"))
    out.square().mean().backward()
    opt.step()
    COPY
    if TEST:
        log.append(preview)
"""


def test_a_copy_made_every_pass_and_read_every_nth_is_mp028():
    (f,) = findings(LOGGED.replace("COPY", "preview = out.detach().cpu()").replace("TEST", "step % 10 == 0"), "MP028")
    assert f.line == 12 and f.devices == ("cuda:1", "cpu") and "step % 10 == 0" in f.message
    gpu = LOGGED.replace("COPY", 'preview = out.detach().to("cuda:0").float()').replace("TEST", "not step % 10")
    assert lines(gpu, "MP028") == [12]


@pytest.mark.parametrize(
    ("copy", "test"),
    [
        ("preview = out.detach()", "step % 10 == 0"),  # no copy
        ("preview = out.detach().cpu()", "step == 99"),  # not periodic
        ("preview = out.detach().cpu()", "preview.abs().max() > 1 and step % 10 == 0"),  # the test reads it
        ("preview = out.detach().cpu(); log.append(preview.sum())", "step % 10 == 0"),  # read on every pass
        ("preview = out.detach().cpu()", '"%d" in str(step)'),  # a string's %
    ],
)
def test_a_copy_read_on_every_pass_or_under_another_test_is_silent(copy, test):
    assert lines(LOGGED.replace("COPY", copy).replace("TEST", test), "MP028") == []


def test_a_copy_read_after_the_loop_is_silent():
    src = LOGGED.replace("COPY", "preview = out.detach().cpu()").replace("TEST", "step % 10 == 0")
    assert lines(src + "print(preview.shape)\n", "MP028") == []


PLAN = """
import torch.nn as nn


def assign_layers(n_layers, n_gpus):
    plan = MAKE
    per = -(-n_layers // n_gpus)
    for i in range(n_layers):
        ADD
    return plan


blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
for gpu, ids in enumerate(assign_layers(4, 2)):
    for i in ids:
        blocks[i].to(f"cuda:{gpu}")
"""


@pytest.mark.parametrize(
    ("make", "add"),
    [
        ("[[]] * n_gpus", "plan[i // per].append(i)"),
        ("n_gpus * [[]]", "plan[i // per] += [i]"),
        ("[set()] * n_gpus", "plan[i // per].add(i)"),
    ],
)
def test_one_list_repeated_then_filled_per_entry_is_mp029(make, add):
    (f,) = findings(PLAN.replace("MAKE", make).replace("ADD", add), "MP029")
    assert f.line == 6 and "line 9" in f.message


@pytest.mark.parametrize(
    ("make", "add"),
    [
        ("[[] for _ in range(n_gpus)]", "plan[i // per].append(i)"),  # one list per entry
        ("[0] * n_gpus", "plan[i // per] += 1"),  # numbers: `+=` rebinds the entry
        ("[[]] * n_gpus\n    plan[0], plan[1] = [], []", "plan[i // per].append(i)"),  # each entry replaced first
        ("[[]] * n_gpus", "print(plan[i // per])"),  # never changed
    ],
)
def test_distinct_entries_or_entries_never_changed_are_silent(make, add):
    assert lines(PLAN.replace("MAKE", make).replace("ADD", add), "MP029") == []


PARALLELIZE = """
import copy

import torch.nn as nn


def parallelize(model, devices):
    placed = COPY
    placed[0].to(devices[0])
    placed[1].to(devices[-1])
    return placed


model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 10))
CALL
"""


def test_a_placed_copy_returned_and_dropped_is_mp018():
    src = PARALLELIZE.replace("COPY", "copy.deepcopy(model)").replace(
        "CALL", 'parallelize(model, ["cuda:0", "cuda:1"])'
    )
    (f,) = findings(src, "MP018")
    assert f.line == 15 and "`model = parallelize(" in f.message


@pytest.mark.parametrize(
    ("copy", "call"),
    [
        ("copy.deepcopy(model)", 'model = parallelize(model, ["cuda:0", "cuda:1"])'),  # kept
        ("model", 'parallelize(model, ["cuda:0", "cuda:1"])'),  # placed in place: the statement is enough
    ],
)
def test_a_kept_copy_or_a_placement_in_place_is_silent(copy, call):
    assert lines(PARALLELIZE.replace("COPY", copy).replace("CALL", call), "MP018") == []


VITERBI = """
import torch
import torch.nn as nn


class CRF(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.trans = nn.Parameter(torch.randn(k, k))

    def decode(self, em):
        best = (em.unsqueeze(2) + self.trans).argmax(1)
        paths = []
        for b in range(em.shape[0]):
            paths.append(READ)
        return paths


crf = CRF(5).to("cuda:1")


def evaluate(batches):
    return [crf.decode(x.to("cuda:1")) for x in batches]
"""


def test_another_tensors_element_read_per_pass_of_a_data_sized_loop_is_mp020():
    (f,) = findings(VITERBI.replace("READ", "best[b, 0].item()"), "MP020")
    assert f.line == 15 and "`best`" in f.message and f.devices == ("cuda:1", "cpu")


@pytest.mark.parametrize(
    "read",
    [
        "best.tolist()[b][0]",  # one copy (per pass here, but of the whole: not an element read)
        "b",  # nothing read
        "em[b].shape[0]",  # a size: a host value
    ],
)
def test_no_element_of_a_gpu_tensor_read_per_pass_is_silent(read):
    assert lines(VITERBI.replace("READ", read), "MP020") == []


def test_a_tensor_picked_per_pass_that_the_loop_rebinds_is_silent():
    src = VITERBI.replace("paths.append(READ)", "best = best.flip(0)\n            paths.append(best[b, 0].item())")
    assert lines(src, "MP020") == []


HEAD = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(64, 64).to("cuda:0")
        self.head = nn.Linear(64, 10).to("cuda:1")

    def reset_classifier(self, n):
        NEW

    def forward(self, x):
        h = self.body(x.to("cuda:0"))
        return self.head(h.to(self.head.weight.device))


model = Net()
model.reset_classifier(5)
AFTER
out = model(torch.randn(8, 64))
"""


def test_a_part_replaced_after_the_split_by_one_built_on_the_host_is_mp030():
    (f,) = findings(HEAD.replace("NEW", "self.head = nn.Linear(64, n)").replace("AFTER", ""), "MP030")
    assert f.line == 13 and f.devices == ("cuda:1", "cpu") and "`self.head`" in f.message
    outside = HEAD.replace("NEW", "pass").replace("AFTER", "model.head = nn.Linear(64, 3)")
    assert lines(outside, "MP030") == [22]


@pytest.mark.parametrize(
    ("new", "after"),
    [
        ("self.head = nn.Linear(64, n).to(self.head.weight.device)", ""),  # placed where the old one was
        ('self.head = nn.Linear(64, n, device="cuda:1")', ""),
        ('self.head = nn.Linear(64, n)\n        self.head.to("cuda:1")', ""),  # moved after, in the same method
        ("self.head = nn.Linear(64, n)", 'model.head.to("cuda:1")'),  # moved from outside
    ],
)
def test_a_replaced_part_that_is_placed_is_silent(new, after):
    assert lines(HEAD.replace("NEW", new).replace("AFTER", after), "MP030") == []


MASKING = """
import torch
import torch.nn as nn


class MAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 16).to("cuda:0")

    def forward(self, x):
        x = self.enc(x.to("cuda:0"))
        N, L, D = x.shape
        noise = NOISE
        ids_shuffle = torch.argsort(noise, dim=1)
        ids_keep = ids_shuffle[:, : L // 4].to(x.device)
        return torch.gather(x, 1, ids_keep.unsqueeze(-1).expand(-1, -1, D))
"""


def test_a_value_computed_on_the_host_from_a_factory_then_moved_is_mp019():
    (f,) = findings(MASKING.replace("NOISE", "torch.rand(N, L)"), "MP019")
    assert f.line == 16 and "(line 14)" in f.message and "compute from it on cuda:0" in f.message


@pytest.mark.parametrize(
    "noise",
    [
        "torch.rand(N, L, device=x.device)",  # the fix
        "torch.rand(N, L, generator=torch.Generator().manual_seed(0))",  # a seeded host generator: on purpose
        "torch.rand(N, L) + x.detach().cpu().mean(-1)",  # mixed with data brought to the host
    ],
)
def test_a_device_factory_or_host_data_mixed_in_is_silent(noise):
    assert lines(MASKING.replace("NOISE", noise), "MP019") == []


HEADS = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(8, 64).to("cuda:0")
        self.heads = nn.ModuleDict({g: nn.Linear(64, 2) for g in ("a", "b", "c")}).to("cuda:1")

    def forward(self, x):
        feat = self.trunk(x.to("cuda:0"))
        return BODY
"""


def test_a_value_moved_in_every_pass_of_a_comprehension_is_mp011():
    body = '{g: head(feat.to("cuda:1")) for g, head in self.heads.items()}'
    (f,) = findings(HEADS.replace("BODY", body), "MP011")
    assert f.line == 14 and "`feat`" in f.message


@pytest.mark.parametrize(
    "body",
    [
        '{g: head(f) for f in [feat.to("cuda:1")] for g, head in self.heads.items()}',  # moved once
        "[h(row) for row in feat.to('cuda:1') for h in self.heads.values()]",  # the first iterable: once
        '[feat.to(d) for d in ("cuda:0", "cuda:1")]',  # to another device on each pass
    ],
)
def test_a_move_made_once_for_the_comprehension_or_to_each_device_is_silent(body):
    assert lines(HEADS.replace("BODY", body), "MP011") == []


ROLES = """
import functools

import torch
import torch.nn as nn

ROLES = ("trunk", "head")


@functools.lru_cache(maxsize=None)
def device_for(role):
    return torch.device("cuda", ROLES.index(role))


trunk = nn.Linear(4, 4).to(device_for("trunk"))
head = nn.Linear(4, 4).to(device_for("head"))
y = head(CALL)
"""


def test_a_device_by_the_position_of_its_role_in_a_tuple_is_known():
    (f,) = findings(ROLES.replace("CALL", "trunk(torch.randn(2, 4).to(device_for('trunk')))"), "MP001")
    assert f.line == 17 and f.devices == ("cuda:0", "cuda:1")
    fixed = "trunk(torch.randn(2, 4).to(device_for('trunk'))).to(device_for('head'))"
    assert lines(ROLES.replace("CALL", fixed)) == []
    # a role the tuple does not hold raises there: nothing is guessed
    unknown = "trunk(torch.randn(2, 4).to(device_for('trunk'))).to(device_for('tail'))"
    assert lines(ROLES.replace("CALL", unknown), "MP001") == []
