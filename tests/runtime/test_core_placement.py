"""The checking core's root causes before the failing call (checks/placement.py), on labelled CPU tensors:
a module shared by two stages, a module never placed, a tensor made on the current device inside a stage,
a view refused after a hop (MP012)."""

import pytest
import torch
from torch import nn

from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.findings import DeviceMismatchError
from mpcheck.runtime.checks.placement import Made
from mpcheck.runtime.checks.sites import Site

S_BUILT = Site("train.py", 5, "<module>")
S_FIRST = Site("train.py", 10, "<module>")
S_SECOND = Site("train.py", 11, "<module>")
S_USE = Site("train.py", 20, "forward")


def _place(labels, ck, module, dev, site):
    ck.on_module_move(module, dev, site=site)
    for t in (*module.parameters(), *module.buffers()):
        labels.label(t, dev)
    ck.invalidate_placement()


def test_a_shared_module_is_reported_at_its_second_move(labels):
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S_USE)
    norm = nn.LayerNorm(4)
    s0, s1 = nn.Sequential(nn.Linear(4, 4), norm), nn.Sequential(nn.Linear(4, 4), norm)
    _place(labels, ck, s0, "cuda:0", S_FIRST)
    _place(labels, ck, s1, "cuda:1", S_SECOND)
    with pytest.raises(DeviceMismatchError) as err:
        ck.check_module_entry(norm, "s0.1", (labels.label(torch.randn(2, 4), "cuda:0"),), {})
    f = err.value.finding
    assert (f.code, f.line, f.devices) == ("MP007", 11, ("cuda:1", "cuda:0"))
    assert "is shared" in f.message and "train.py:10" in f.message
    assert f.extra["use_site"] == "train.py:20"


def test_nested_moves_are_not_sharing(labels):
    ck = Checker(labels, on_mismatch="move", sites=lambda: S_USE)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    _place(labels, ck, model, "cuda:0", S_FIRST)
    _place(labels, ck, model[1], "cuda:1", S_SECOND)
    ck.check_module_entry(model[1], "model.1", (labels.label(torch.randn(2, 4), "cuda:0"),), {})
    assert [(f.code, f.line) for f in ck.findings] == [("MP001", 20)]  # a missing hop, at the call


def test_a_module_never_placed_is_reported_where_it_was_built(labels):
    ck = Checker(labels, on_mismatch="move", sites=lambda: S_USE)
    lin = nn.Linear(4, 4)
    ck.on_module_built(lin, S_BUILT)
    ck.check_module_entry(lin, "stage0", (labels.label(torch.randn(2, 4), "cuda:0"),), {})
    [f] = ck.findings
    assert (f.code, f.line, f.devices) == ("MP001", 5, ("cpu", "cuda:0"))
    assert "never placed" in f.message and "train.py:20" in f.message


def test_a_module_placed_on_the_cpu_on_purpose_is_not_never_placed(labels):
    ck = Checker(labels, on_mismatch="move", sites=lambda: S_USE)
    lin = nn.Linear(4, 4)
    ck.on_module_built(lin, S_BUILT)
    _place(labels, ck, lin, "cpu", S_FIRST)  # `.to('cpu')`: the program's choice
    ck.check_module_entry(lin, "head", (labels.label(torch.randn(2, 4), "cuda:0"),), {})
    [f] = ck.findings
    assert (f.code, f.line) == ("MP001", 20) and "never placed" not in f.message


def test_a_tensor_made_on_the_current_device_in_a_stage_is_reported_where_it_was_made(labels):
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S_USE)
    noise = labels.label(torch.randn(2, 4), "cuda:0")
    ck.placements.made(noise, Made(S_FIRST, "a bare `.cuda()`", "cuda:0", "stage1", "cuda:1"))
    h = labels.label(torch.randn(2, 4), "cuda:1")
    for args in ((h, noise), (noise, h)):  # the made tensor second or first
        with pytest.raises(DeviceMismatchError) as err:
            ck.check_op(torch.add, args, {})
        f = err.value.finding
        # The call fails: an error, whatever MP004's default severity.
        assert (f.code, f.line, f.devices, f.severity) == ("MP004", 10, ("cuda:1", "cuda:0"), "error")
    other = labels.label(torch.randn(2, 4), "cuda:0")  # the same mismatch, not made on the current device
    with pytest.raises(DeviceMismatchError) as err:
        ck.check_op(torch.add, (h, other), {})
    assert (err.value.finding.code, err.value.finding.line) == ("MP001", 20)


def test_a_view_refused_after_a_hop_is_reported_at_the_hop(labels):
    ck = Checker(labels, on_mismatch="move", sites=lambda: S_USE)
    src = labels.label(torch.randn(2, 3, 4), "cuda:0").permute(0, 2, 1)
    out = labels.label(src.clone(), "cuda:1")  # a copy keeps the strides, as Tensor.to does
    assert out.stride() == src.stride()
    ck.on_transfer(src, out, "cuda:0", "cuda:1", site=S_SECOND, module_path=None)
    try:
        out.view(2, -1)
    except RuntimeError as e:
        flat = ck.on_op_error(torch.Tensor.view, (out, 2, -1), {}, e)
    assert flat.shape == (2, 12)  # move: the view of a contiguous copy
    [f] = ck.findings
    assert (f.code, f.line, f.devices) == ("MP012", 11, ("cuda:0", "cuda:1"))
    with pytest.raises(RuntimeError, match="view size"):  # a later permute of the copy is the program's own
        moved = out.contiguous()
        ck.on_transfer(src, moved, "cuda:0", "cuda:1", site=S_SECOND, module_path=None)
        permuted = moved.permute(0, 2, 1)
        try:
            permuted.view(2, -1)
        except RuntimeError as e:
            ck.on_op_error(torch.Tensor.view, (permuted, 2, -1), {}, e)
    assert len(ck.findings) == 1
