"""Wording of the linter's messages: articles, plurals, no doubled words. Checked on the
helpers that build the phrases and on every message the bad fixtures produce."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from mpcheck.devices.describe import and_list, article, plural, split_desc
from mpcheck.devices.values import Obj

CASES = Path(__file__).parent / "fixtures" / "cases"
_CLI = [sys.executable, "-c", "import sys; from mpcheck.cli import main; sys.exit(main())"]


def test_article_follows_the_first_letter():
    assert article("Alt") == "an" and article("encoder") == "an"
    assert article("SplitNet") == "a" and article("UNet") == "an"


def test_split_model_named_with_the_right_article():
    alt = Obj("module", None, cls=SimpleNamespace(name="Alt"), split=(("a", "cuda:0"), ("b", "cuda:1")))
    net = Obj("module", None, cls=SimpleNamespace(name="SplitNet"), split=(("a", "cuda:0"), ("b", "cuda:1")))
    assert split_desc(alt).startswith("an Alt split over cuda:0 (a) and cuda:1 (b)")
    assert split_desc(net).startswith("a SplitNet split over")


def test_plural_and_lists():
    assert plural(1, "crossing") == "1 crossing" and plural(3, "crossing") == "3 crossings"
    assert and_list(["a"]) == "a" and and_list(["a", "b"]) == "a and b" and and_list(["a", "b", "c"]) == "a, b and c"


def test_no_message_of_the_bad_fixtures_stutters_or_hedges_a_plural(tmp_path):
    bad = sorted(str(p) for p in CASES.iterdir() if p.name.endswith(("_bad.py", "_bad")))
    proc = subprocess.run(
        [*_CLI, "--output-format", "json", "--no-cache", "--isolated", *bad], capture_output=True, text=True
    )
    found = json.loads(proc.stdout)
    assert found, proc.stderr
    for f in found:
        msg = f["message"]
        assert not re.search(r"\b(\w+) \1\b", msg, re.IGNORECASE), msg
        assert "(s)" not in msg, msg
        assert not re.search(r"\ba [aeiouAEIOU]\w", msg.replace("a user", "")), msg


def _lint(tmp_path, name: str, source: str) -> list[dict]:
    (tmp_path / name).write_text(source, encoding="utf-8")
    proc = subprocess.run(
        [*_CLI, "--output-format", "json", "--no-cache", "--isolated", name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout)


def test_round_trip_through_the_current_device_reads_plainly(tmp_path):
    found = _lint(
        tmp_path,
        "trip.py",
        "import torch\n\n\ndef f(x):\n    x = x.to('cuda')\n    y = x.cpu()\n    return y.to('cuda')\n",
    )
    assert [f["code"] for f in found] == ["MP005"]
    msg = found[0]["message"]
    assert msg.startswith("`y` is moved from the current CUDA device ('cuda') to cpu (line 6) and back here"), msg
    assert "the the" not in msg and "`the tensor`" not in msg


def test_advice_in_a_loop_over_blocks_on_two_devices_names_no_single_device(tmp_path):
    case = CASES / "A_loop_no_hop_bad.py"
    found = _lint(tmp_path, case.name, case.read_text(encoding="utf-8"))
    assert [f["code"] for f in found] == ["MP001"] and found[0]["fix"] is None
    msg = found[0]["message"]
    assert "next(blk.parameters()).device" in msg and ".to('cuda:1')" not in msg, msg


def test_ping_pong_over_four_devices_says_how_many_crossings_they_need(tmp_path):
    found = _lint(
        tmp_path,
        "rr.py",
        "import torch.nn as nn\n\n\n"
        "class RoundRobin(nn.Module):\n"
        "    def __init__(self, depth=8):\n"
        "        super().__init__()\n"
        '        self.layers = nn.ModuleList([nn.Linear(64, 64).to(f"cuda:{i % 4}") for i in range(depth)])\n\n'
        "    def forward(self, x):\n"
        "        for i, layer in enumerate(self.layers):\n"
        '            x = layer(x.to(f"cuda:{i % 4}"))\n'
        "        return x\n",
    )
    assert [f["code"] for f in found] == ["MP006"]
    msg = found[0]["message"]
    assert "cross devices 7 times" in msg and "4 devices need 3 crossings" in msg, msg
    assert "cuda:0, cuda:1, cuda:2 and cuda:3, in that order" in msg and "cpu" not in msg, msg


def test_a_finding_in_a_helper_names_the_call_that_made_its_devices_known(tmp_path):
    case = CASES / "F_helper_train_loop_bad.py"
    found = _lint(tmp_path, case.name, case.read_text(encoding="utf-8"))
    assert [(f["code"], f["line"]) for f in found] == [("MP008", 22)]
    msg = found[0]["message"]
    assert "when called by `train_one_epoch(model, loader, model.devices[0], opt)` at line 31" in msg, msg
    assert "`y.to(logits.device)`" in msg, msg


def test_a_module_never_placed_is_named_with_the_line_that_built_it(tmp_path):
    case = CASES / "J_model_never_moved_bad.py"
    found = _lint(tmp_path, case.name, case.read_text(encoding="utf-8"))
    assert [(f["code"], f["line"]) for f in found] == [("MP001", 15)]
    msg = found[0]["message"]
    assert "`self.fc1` (built at line 9) was never placed, so it is still on the CPU" in msg, msg


def test_shared_blocks_are_counted_and_the_first_placement_named(tmp_path):
    case = CASES / "A_shared_blocks_bad.py"
    found = _lint(tmp_path, case.name, case.read_text(encoding="utf-8"))
    assert [(f["code"], f["line"]) for f in found] == [("MP007", 19)]
    msg = found[0]["message"]
    assert "also moves 4 `Block` objects that line 18 placed on cuda:0" in msg, msg


def test_an_augmented_assignment_names_both_operands(tmp_path):
    """`total += loss.detach()`: the value off the target's device is named by its source text, as in
    `total = total + loss.detach()`, not as "a tensor"."""
    src = tmp_path / "accumulate.py"
    src.write_text(
        "import torch\nfrom torch import nn\n"
        "head = nn.Linear(8, 1).to('cuda:1')\n"
        "total = torch.zeros((), device='cuda:0')\n"
        "loss = head(torch.randn(4, 8, device='cuda:1')).mean()\n"
        "total += loss.detach()\n"
    )
    proc = subprocess.run(
        [*_CLI, "--output-format", "json", "--no-cache", "--isolated", str(src)], capture_output=True, text=True
    )
    (finding,) = json.loads(proc.stdout)
    assert finding["code"] == "MP001" and finding["line"] == 6
    assert finding["message"].startswith("`loss.detach()` is on cuda:1") and "meets `total`" in finding["message"]


def test_a_target_made_by_a_module_function_is_not_named_by_its_module(tmp_path):
    # `torch.zeros(...)` reads no variable: the suggestion moves the expression, not `torch`.
    found = _lint(
        tmp_path,
        "train.py",
        "import torch\n"
        "import torch.nn.functional as F\n\n"
        'head = torch.nn.Linear(16, 4).to("cuda:1")\n'
        'out = head(torch.randn(8, 16, device="cuda:1"))\n'
        'loss = F.mse_loss(out, torch.zeros(8, 4, device="cuda:0"))\n'
        'back = torch.randn(4, device="cuda:0").cpu().cuda(0)\n',
    )
    assert [(f["code"], f["line"]) for f in found] == [("MP008", 6), ("MP005", 7)], found
    loss, trip = (f["message"] for f in found)
    assert '`torch.zeros(8, 4, device="cuda:0").to(out.device)`' in loss, loss
    assert "torch = torch" not in loss, loss
    assert trip.startswith('`torch.randn(4, device="cuda:0").cpu()` is moved'), trip


def test_a_target_read_from_a_mapping_moves_the_entry_not_the_mapping(tmp_path):
    case = CASES / "F_dict_batch_comprehension_bad.py"
    found = _lint(tmp_path, case.name, case.read_text(encoding="utf-8"))
    assert [(f["code"], f["line"]) for f in found] == [("MP008", 28)], found
    msg = found[0]["message"]
    assert '`batch["labels"].to(logits.device)`' in msg and "batch = batch" not in msg, msg


def test_a_buffer_made_without_a_device_is_named_as_the_tensor_off_its_device(tmp_path):
    # `total` (made on the CPU for want of a device=) is what is off; moving the GPU operand to the CPU
    # would be the wrong fix, and the layers' arguments are not to blame either.
    found = _lint(
        tmp_path,
        "segments.py",
        (CASES / "D_segment_sum_buffer_without_device_bad.py").read_text(encoding="utf-8"),
    )
    assert [(f["code"], f["line"]) for f in found] == [("MP001", 10)]
    msg = found[0]["message"]
    assert msg.startswith("`total` is on cpu (created on the CPU by torch.zeros() without device=, line 9)"), msg
    assert "create it on the device of what it meets, e.g. `device=segment_ids.device`" in msg
    assert "to('cpu')" not in msg


def test_targets_left_unmoved_for_two_losses_are_one_finding_naming_both_lines(tmp_path):
    found = _lint(
        tmp_path,
        "contrastive.py",
        """import torch
import torch.nn as nn
import torch.nn.functional as F

q_tower = nn.Linear(8, 8).to("cuda:0")
d_tower = nn.Linear(8, 8).to("cuda:1")


def symmetric_loss(q, d, labels):
    logits = q @ d.t()
    loss_q = F.cross_entropy(logits, labels)
    loss_d = F.cross_entropy(logits.t(), labels)
    return (loss_q + loss_d) / 2


labels = torch.arange(4, device="cuda:1")
loss = symmetric_loss(q_tower(torch.randn(4, 8, device="cuda:0")), d_tower(torch.randn(4, 8, device="cuda:1")).to("cuda:0"), labels)
""",
    )
    assert [(f["code"], f["line"]) for f in found] == [("MP008", 11)]
    msg = found[0]["message"]
    assert "(and at line 12 too)" in msg and "`labels = labels.to(logits.device)` before line 11" in msg, msg
    assert found[0]["fix"] is None  # a `.to()` at line 11 alone would leave line 12 failing


def test_a_metric_function_is_one_finding_however_many_lines_its_targets_reach(tmp_path):
    found = _lint(
        tmp_path,
        "iou.py",
        """import torch
import torch.nn as nn

head = nn.Linear(8, 4).to("cuda:1")


def box_iou(pred, target):
    target_area = target[:, 2] * target[:, 3]
    inter = torch.min(pred[:, 2], target[:, 2]) * torch.min(pred[:, 3], target[:, 3])
    return inter / (pred[:, 2] * pred[:, 3] + target_area - inter)


boxes = torch.rand(5, 4).to("cuda:0")
iou = box_iou(head(torch.randn(5, 8, device="cuda:1")), boxes)
""",
    )
    assert [(f["code"], f["line"]) for f in found] == [("MP008", 9)]


DISCARDED = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 8).to("cuda:1")

    def forward(self, x):
        h = self.a(x.to("cuda:0"))
        h.to(TARGET)
        return self.b(h)


Net()(torch.randn(2, 8))
"""


def test_a_discarded_move_is_named_at_its_line_with_the_use_it_left_unmoved(tmp_path):
    found = _lint(tmp_path, "lost.py", DISCARDED.replace("TARGET", '"cuda:1"'))
    assert [(f["code"], f["line"]) for f in found] == [("MP001", 13)]  # one finding, at the `.to()`, not at the use
    msg = found[0]["message"]
    assert msg.startswith("`h` is on cuda:0 (output of `self.a`, line 12), but `self.b` is on cuda:1: "), msg
    assert '`h.to("cuda:1")` at line 13 discards its result' in msg and 'assign it, `h = h.to("cuda:1")`' in msg, msg
    fix = found[0]["fix"]
    assert fix["replacement"] == 'h = h.to("cuda:1")' and fix["safe"], fix


def test_a_discarded_move_to_another_device_than_the_use_needs_gets_no_safe_fix(tmp_path):
    found = _lint(tmp_path, "lost.py", DISCARDED.replace("TARGET", '"cuda:0"'))
    # `h.to("cuda:0")` to where h already is: harmless on its own, so the finding is the use's.
    assert [(f["code"], f["line"]) for f in found] == [("MP001", 14)]


def test_a_discarded_move_of_unknown_devices_is_still_reported(tmp_path):
    found = _lint(
        tmp_path,
        "lost.py",
        DISCARDED.replace("TARGET", "dev")
        .replace("def forward(self, x)", "def forward(self, x, dev)")
        .replace("Net()(torch.randn(2, 8))", "Net()(torch.randn(2, 8), get_device())"),
    )
    assert [(f["code"], f["line"]) for f in found] == [("MP001", 13)]
    assert found[0]["fix"] is None and found[0]["suggestion"] == "assign the moved copy: `h = h.to(dev)`"
