"""The checking core's issue-11 checks on their own (labelled CPU tensors as devices): a loss fed across
devices (MP008), a device index past the last GPU (MP009), DataParallel's internals on a split model
(MP003), DataParallel around one stage off device_ids[0] (MP002); and what each leaves alone."""

import pytest
import torch
from torch import nn

from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.findings import DeviceMismatchError
from mpcheck.runtime.checks.sites import Site

S1 = Site("train.py", 10, "forward")


@pytest.fixture
def two_gpus(labels):
    """conftest's LabelDevices that also knows it has 2 GPUs (what real and virtual Devices say)."""

    class TwoGPUs(type(labels)):
        def gpu_count(self):
            return 2

        def normalize(self, d):
            if isinstance(d, int):
                return f"cuda:{d}"
            return None if d is None else str(torch.device(d))

    return TwoGPUs()


def _placed(labels, module, dev):
    for t in (*module.parameters(), *module.buffers()):
        labels.label(t, dev)
    return module


def test_a_loss_across_devices_is_mp008_with_the_targets_fix(two_gpus):
    labels = two_gpus
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S1)
    logits = labels.label(torch.randn(4, 3), "cuda:1")
    targets = labels.label(torch.tensor([0, 1, 2, 0]), "cuda:0")
    with pytest.raises(DeviceMismatchError) as err:
        ck.check_op(nn.functional.cross_entropy, (logits, targets), {})
    f = err.value.finding
    assert (f.code, f.line, f.devices) == ("MP008", 10, ("cuda:1", "cuda:0"))
    assert f.suggestion == "move the targets to the predictions' device with `.to('cuda:1')` before the loss"


def test_a_non_loss_op_stays_mp001(two_gpus):
    labels = two_gpus
    ck = Checker(labels, on_mismatch="move", sites=lambda: S1)
    ck.check_op(torch.add, (labels.label(torch.randn(3), "cuda:1"), labels.label(torch.randn(3), "cuda:0")), {})
    assert [f.code for f in ck.findings] == ["MP001"]


@pytest.mark.parametrize("device", ["cuda:2", 2, torch.device("cuda", 3)])
def test_a_device_past_the_last_gpu_is_mp009(two_gpus, device):
    ck = Checker(two_gpus, on_mismatch="raise", sites=lambda: S1)
    with pytest.raises(DeviceMismatchError) as err:
        ck.check_device(device)
    assert err.value.finding.code == "MP009"


@pytest.mark.parametrize("device", ["cuda:1", 0, "cuda", "cpu", "meta", torch.device("cuda", 1), True, [1], "x"])
def test_devices_that_exist_or_are_not_cuda_indices_are_silent(two_gpus, device):
    ck = Checker(two_gpus, on_mismatch="raise", sites=lambda: S1)
    ck.check_device(device)
    assert ck.findings == []


def test_without_a_gpu_count_no_device_is_judged(labels):
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S1)
    ck.check_device("cuda:7")
    assert ck.findings == []


def test_parallel_primitives_on_a_split_model_and_on_replicas(two_gpus):
    labels = two_gpus
    ck = Checker(labels, on_mismatch="move", sites=lambda: S1)
    split = nn.Module()
    split.a = _placed(labels, nn.Linear(4, 4), "cuda:0")
    split.b = _placed(labels, nn.Linear(4, 2), "cuda:1")
    replicas = nn.ModuleList([_placed(labels, nn.Linear(4, 4), f"cuda:{i}") for i in range(2)])
    single = _placed(labels, nn.Linear(4, 4), "cuda:0")
    assert ck.on_parallel_primitive("replicate", split, inside=False, site=S1).code == "MP003"
    assert ck.on_parallel_primitive("scatter", split, inside=True, site=S1).code == "MP003"
    assert ck.on_parallel_primitive("scatter", replicas, inside=True, site=S1) is None  # a hand-written DP
    assert ck.on_parallel_primitive("replicate", single, inside=False, site=S1) is None


def test_data_parallel_around_one_stage_off_device_ids_0(two_gpus):
    labels = two_gpus
    ck = Checker(labels, on_mismatch="move", sites=lambda: S1)
    stage = _placed(labels, nn.Linear(4, 4), "cuda:1")
    f = ck.on_wrap("DataParallel", stage, device_ids=None, output_device=None, site=S1)
    assert (f.code, f.devices) == ("MP002", ("cuda:1", "cuda:0"))
    assert ck.on_wrap("DataParallel", stage, device_ids=[1, 0], output_device=None, site=S1) is None
    assert ck.on_wrap("DataParallel", stage, device_ids=[0], output_device=None, site=S1) is None
    first = _placed(labels, nn.Linear(4, 4), "cuda:0")
    assert ck.on_wrap("DataParallel", first, device_ids=None, output_device=None, site=S1) is None
