"""MP016 on virtual GPUs: a broadcast view handed to the next stage's GPU is reported at the move, as the
linter reports it (the lint fixture's program, run), and its fixed twin runs clean. The run-time faces see
the view's strides; a `.repeat()` or a reduction after the move is the linter's alone (rules/MP016)."""

from pathlib import Path
from types import SimpleNamespace

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "cases"


def _program(name):
    path = CASES / name
    marked = [i for i, t in enumerate(path.read_text().splitlines(), 1) if "# <- MP016" in t]
    return SimpleNamespace(path=path), marked


def test_a_bias_expanded_before_its_hop_is_mp016_at_the_move_on_every_step(dryrun_cli):
    bad, marked = _program("E_expanded_bias_per_stage_bad.py")
    status, report, err = dryrun_cli(bad, "--gpus", "2")
    assert status == 0, err  # a warning: the program runs on
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP016", line) for line in marked]
    (f,) = report["findings"]
    assert f["devices"] == ["cuda:0", "cuda:1"] and f["severity"] == "warning"
    assert "expanded to 2 MiB" in f["message"] and "256 KiB of data" in f["message"]


def test_the_bias_moved_before_it_is_broadcast_runs_clean(dryrun_cli):
    good, _ = _program("E_expanded_bias_per_stage_good.py")
    status, report, err = dryrun_cli(good, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_expand_as_of_a_tensor_on_another_device_is_a_view_where_it_is(script, dryrun_cli):
    # `a.expand_as(b)` is `a.expand(b.size())`: no device check, the view stays on a's device
    s = script(
        """
        import torch
        real = torch.randn(8, 3, 32, 32, device="cuda:0")
        for other in (real, real.to("cuda:1")):
            mix = torch.rand(8, 1, 1, 1).expand_as(other)
            assert mix.device == torch.device("cpu") and mix.stride()[1:] == (0, 0, 0)
            assert torch.rand(3 * 32 * 32 * 8).view_as(other).device == torch.device("cpu")
            assert torch.rand(8, 3072).reshape_as(other).device == torch.device("cpu")
        print("finished")
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["stopped"], report["findings"]) == (0, None, []), err
