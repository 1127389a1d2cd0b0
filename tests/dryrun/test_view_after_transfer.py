"""A stride surprise after a hop (MP012): a permuted tensor moved to another GPU keeps its strides, and `.view()`
of the copy fails. Reported at the hop, the view named; the dry run (move) takes the view of a contiguous copy and
goes on. A contiguous copy, `.reshape()`, and a refused view of a tensor no transfer made stay silent."""

import pytest
from dryrun_helpers import codes_at

HOP = """
import torch
x = torch.randn(4, 6, 8).to("cuda:0")
for _ in range(2):
    h = {hop}  # <- hop
    flat = {view}  # <- view
assert flat.shape == (4, 48)
print("went on")
"""


def test_a_permuted_tensor_viewed_after_a_hop(script, dryrun_cli):
    s = script(HOP.format(hop='x.permute(0, 2, 1).to("cuda:1")', view="h.view(4, -1)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["stopped"] is None, report["stopped"]
    assert codes_at(report) == [("MP012", s.line("hop"))]
    f = report["findings"][0]
    assert f["devices"] == ["cuda:0", "cuda:1"]
    assert f"train.py:{s.line('view')}" in f["message"]
    assert "strides (48, 1, 8)" in f["message"]
    # measured: a strided tensor crosses as fast as a dense one; `.contiguous()` before the copy is slower
    assert "`.reshape(...)` in place of this `.view(...)`" in f["suggestion"]
    assert ".contiguous().to(" not in f["suggestion"]
    assert f["extra"]["count"] == 2


def test_with_raise_the_view_raises_mpchecks_error_naming_the_hop():
    import mpcheck

    torch = pytest.importorskip("torch")
    from mpcheck.runtime.checks.findings import DeviceMismatchError

    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.dryrun(gpus=2, on_mismatch="raise", report=None):
            x = torch.randn(4, 6, 8).to("cuda:0")
            h = x.transpose(1, 2).to("cuda:1")  # hop
            h.view(4, -1)
    f = err.value.finding
    assert (f.code, f.devices) == ("MP012", ("cuda:0", "cuda:1"))
    assert f.message.startswith("this transfer cuda:0 -> cuda:1")
    hop_line = next(i for i, line in enumerate(open(__file__).read().splitlines(), 1) if line.endswith("# hop"))
    assert (f.path.endswith("test_view_after_transfer.py"), f.line) == (True, hop_line)


@pytest.mark.parametrize(
    "hop, view",
    [
        ('x.permute(0, 2, 1).contiguous().to("cuda:1")', "h.view(4, -1)"),
        ('x.permute(0, 2, 1).to("cuda:1")', "h.reshape(4, -1)"),
        ('x.to("cuda:1")', "h.view(4, -1)"),
    ],
)
def test_views_that_work_are_silent(script, dryrun_cli, hop, view):
    s = script(HOP.format(hop=hop, view=view))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["stopped"], report["findings"]) == (0, None, [])


def test_a_view_refused_on_a_tensor_no_transfer_made_is_pytorchs_own_error(script, dryrun_cli):
    s = script("""
import torch
x = torch.randn(4, 6, 8).to("cuda:0").permute(0, 2, 1)
flat = x.view(4, -1)  # <- view
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["findings"] == []
    assert "view size is not compatible" in report["stopped"]
