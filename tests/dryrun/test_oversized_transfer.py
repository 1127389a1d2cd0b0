"""MP016 on virtual GPUs: a broadcast view handed to the next stage's GPU is reported at the move, as the
linter reports it (the lint fixture's program, run), and its fixed twin runs clean. The run-time faces see
the view's strides; a `.repeat()` before the move is the linter's alone (rules/MP016). Data only reduced
after its move is seen by what the program does with it (checks/reduced_after_move.py): reported once
every tensor carrying it is freed, never when the data is used whole, even long after the reduction."""

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


def test_a_concatenation_of_moved_gradients_reduced_by_norm_is_reported_at_the_move(script, dryrun_cli):
    s = script(
        """
        import torch
        import torch.nn as nn

        model = nn.ModuleDict({"a": nn.Linear(256, 256).to("cuda:0"), "b": nn.Linear(256, 256).to("cuda:1")})
        for _ in range(3):
            x = torch.randn(8, 256, device="cuda:0")
            y = model["b"](model["a"](x).to("cuda:1"))
            y.sum().backward()
            grads = [p.grad for p in model.parameters()]
            total = torch.cat([g.flatten().to("cuda:0") for g in grads]).norm()  # <- here
            model.zero_grad()
        print(float(total))
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = report["findings"]
    assert (f["code"], f["line"], f["devices"]) == ("MP016", s.marks["here"], ["cuda:1", "cuda:0"])
    assert f["extra"]["reduced_by"] == "norm" and f["extra"]["count"] == 3  # once per step, one finding


def test_scores_copied_to_the_host_for_a_topk_are_reported_and_the_topk_on_the_gpu_is_not(script, dryrun_cli):
    s = script(
        """
        import torch

        items = torch.randn(20000, 64, device="cuda:1")
        for _ in range(2):
            q = torch.randn(32, 64, device="cuda:1")
            scores = q @ items.T
            host = scores.cpu()  # <- bad
            top = host.topk(10, dim=1).indices
            good = scores.topk(10, dim=1).indices.cpu()
        print(top.shape, good.shape)
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [(f["code"], f["line"], f["extra"]["reduced_by"]) for f in report["findings"]] == [
        ("MP016", s.marks["bad"], "topk")
    ]


def test_activations_copied_to_the_host_for_a_histogram_are_reported(script, dryrun_cli):
    s = script(
        """
        import torch
        import torch.nn as nn

        net = nn.Sequential(nn.Linear(256, 1024), nn.ReLU()).to("cuda:1")
        hists = []
        for _ in range(2):
            out = net(torch.randn(512, 256, device="cuda:1"))
            hists.append(torch.histc(out.detach().float().cpu(), 64, 0, 4))  # <- bad
            hists.append(torch.histc(out.detach(), 64, 0, 4).cpu())
            out.mean().backward()
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [(f["code"], f["line"], f["extra"]["reduced_by"]) for f in report["findings"]] == [
        ("MP016", s.marks["bad"], "histc")
    ]


def test_moved_data_used_whole_kept_exported_or_small_is_not_reported(script, dryrun_cli):
    s = script(
        """
        import torch

        kept = []
        for _ in range(3):
            h = torch.randn(256, 256, device="cuda:0")
            a = h.to("cuda:1")
            b = a / a.max()  # reduced, and used whole: the move was needed
            c = h.to("cuda:1")
            kept.append(c)  # kept by the program, reduced now ...
            c.sum()
            d = h.cpu()
            d.argmax()
            rows = list(d)  # handed out row by row
            e = h.cpu()
            e.max()
            e.tolist()  # read whole on the host
            f = h[:8].to("cuda:1")  # 8 KiB: its copy costs about its launch
            f.sum()
            g = h.to("cuda:1")
            g.mean(0)  # a reduction to 1/256 of it ...
            g @ g  # ... and a use
            i = h.to("cuda:1", torch.float64)  # converted too: reducing first would reduce at float32
            i.sum()
        print((torch.stack(kept) @ torch.ones(256, device="cuda:1")).shape, b.shape, len(rows))  # ... used whole later
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_an_order_statistic_of_weights_gathered_from_two_gpus_is_not_reported(script, dryrun_cli):
    # A global pruning threshold: the k-th smallest magnitude over both GPUs' weights needs up to k elements of
    # each part, not one result per device: moving the magnitudes is how it is computed.
    s = script(
        """
        import torch

        a = torch.randn(256, 256, device="cuda:0")
        b = torch.randn(256, 256, device="cuda:1")
        for _ in range(2):
            mags = torch.cat([a.abs().flatten(), b.abs().flatten().to("cuda:0")])
            threshold = mags.kthvalue(mags.numel() // 2).values
            a.mul_(a.abs() > threshold)
        print(float(threshold))
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_an_entropy_of_moved_attention_maps_is_reported_and_a_product_of_two_moves_is_not(script, dryrun_cli):
    # `att * att.clamp_min(1e-9).log()` reads the one copy twice: still its data alone, reduced by the sum.
    # `x.to(d) * y.to(d)` meets two copies: each is data the destination needs.
    s = script(
        """
        import torch

        def entropy(att):
            return -(att * att.clamp_min(1e-9).log()).sum(-1).mean()

        for _ in range(2):
            maps = torch.softmax(torch.randn(8, 4, 64, 64, device="cuda:0"), -1)
            ent = entropy(maps.to("cuda:1"))  # <- bad
            x, y = torch.randn(256, 256, device="cuda:0"), torch.randn(256, 256, device="cuda:0")
            dot = (x.to("cuda:1") * y.to("cuda:1")).sum()
            print(float(ent), float(dot))
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [(f["code"], f["line"], f["extra"]["reduced_by"]) for f in report["findings"]] == [
        ("MP016", s.marks["bad"], "sum")
    ]


def test_an_order_statistic_of_one_move_alone_is_reported(script, dryrun_cli):
    # (probe37 t05) DDIM's dynamic thresholding: each image's quantile of |x0| computed on a host copy of all of it
    s = script(
        """
        import torch

        for _ in range(2):
            x0 = torch.randn(32, 3072, device="cuda:1")
            s = torch.quantile(x0.abs().cpu(), 0.995, dim=1)  # <- bad
            x0 = x0.clamp(-1, 1) / s.clamp(min=1.0).to(x0.device)[:, None]
        print(float(x0.sum()))
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [(f["code"], f["line"], f["extra"]["reduced_by"]) for f in report["findings"]] == [
        ("MP016", s.marks["bad"], "quantile")
    ]
