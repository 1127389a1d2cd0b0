"""Issue 9's run-time false findings on 2 real GPUs: correct programs run clean under
on_mismatch="raise", tiny repeated copies are not findings, torch's warnings point at the user.

Skipped without 2 CUDA devices (CI has none)."""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mpcheck  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
]


class Blocks(nn.Module):
    """A container whose own forward moves the activation to each block's device."""

    def __init__(self, devices):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(64, 64, device=d) for d in devices])

    def forward(self, x, mask=None, bias=None):
        h = x
        for blk in self.blocks:
            h = blk(h.to(blk.weight.device))
        return h if bias is None else h + bias.to(h.device)  # the mask is never used


@pytest.mark.parametrize("devices", [["cuda:0", "cuda:0"], ["cuda:0", "cuda:1"]])
def test_a_container_that_moves_its_input_runs_clean(devices):
    model = Blocks(devices)
    with mpcheck.debug(model, report=None, on_mismatch="raise") as dbg:
        for _ in range(2):
            model(torch.randn(8, 64), mask=torch.ones(8, 64, device="cuda:1")).sum().backward()
            dbg.step()
    assert dbg.findings == []


def test_tiny_copies_to_each_layers_device_are_not_findings():
    cache = [torch.randn(8, 4, 16, device=d) for d in ("cuda:0", "cuda:1", "cuda:0", "cuda:1")]
    x = torch.randn(2, 8)
    with mpcheck.debug(report=None) as dbg:
        for _ in range(3):
            beam_idx = torch.tensor([1, 0, 3, 2, 5, 4, 7, 6])
            cache = [p.index_select(0, beam_idx.to(p.device)) for p in cache]
            outs = [x.to(d) for d in ("cuda:0", "cuda:1")]
    assert dbg.findings == [] and len(outs) == 2


def test_a_large_constant_moved_by_every_layer_is_still_reported():
    table = torch.randn(256, 64, device="cuda:0")  # 64 KiB: at the threshold
    layers = [nn.Linear(64, 64, device="cuda:1") for _ in range(3)]
    with mpcheck.debug(report=None) as dbg:
        h = torch.randn(256, 64, device="cuda:1")
        for layer in layers:
            h = layer(h) + table.to("cuda:1")
    assert [f.code for f in dbg.findings] == ["MP011"]


def test_a_torch_warning_points_at_the_users_line():
    t = torch.ones(2, device="cuda:0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mpcheck.debug(report=None):
            torch.tensor(t)  # warns
    (w,) = [w for w in caught if "copy construct from a tensor" in str(w.message)]
    assert w.filename == __file__
    assert w.lineno == test_a_torch_warning_points_at_the_users_line.__code__.co_firstlineno + 5
