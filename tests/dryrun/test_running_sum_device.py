"""MP005 at run time for a running sum kept on the wrong GPU (checks/accumulated.py): skip outputs of layers on the
second GPU each moved to the first only to be added to a sum there, which then goes to the head on the second GPU,
are reported at the addends' move; the sum carried across once is clean, and so are a sum that stays where it is
summed (a loss), a residual stream handed to each block on the other GPU (MP006's ping-pong, not this) and a single
addend."""

SKIPS = """
import torch
import torch.nn as nn

devs = ["cuda:0"] * 3 + ["cuda:1"] * 3
layers = [nn.Conv1d(16, 16, 1).to(d) for d in devs]
head = nn.Conv1d(16, 4, 1).to("cuda:1")
for step in range(2):
    x = torch.randn(8, 16, 256, device="cuda:0")
    skips = 0
    for layer, dev in zip(layers, devs):
        x = torch.tanh(layer(x.to(dev)))
        SUM  # <- add
    head(skips.to("cuda:1")).square().mean().backward()  # <- back
print("done")
"""


def _run(script, dryrun_cli, text):
    s = script(text)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    return s, report["findings"]


def test_skips_summed_on_the_first_gpu_and_sent_to_the_head_are_mp005_at_their_move(script, dryrun_cli):
    for add in ("skips = skips + x.to(devs[0])", "skips = x.to(devs[0]) + skips"):
        s, findings = _run(script, dryrun_cli, SKIPS.replace("SUM", add))
        (f,) = findings
        assert (f["code"], f["line"], f["extra"]["scope"]) == ("MP005", s.line("add"), "accumulated")
        assert f["devices"] == ["cuda:1", "cuda:0"] and f["extra"]["addends"] == 3
        assert f["extra"]["addend_bytes"] == 8 * 16 * 256 * 4 and f"train.py:{s.line('back')}" in f["message"]


def test_an_in_place_sum_with_a_local_addend_between_is_reported_too(script, dryrun_cli):
    # `skips += ...` changes the sum in place, and a tensor of the first GPU's own is added into it along the way.
    text = SKIPS.replace("skips = 0", "skips = torch.zeros(8, 16, 256, device='cuda:0')")
    text = text.replace(
        'x = torch.randn(8, 16, 256, device="cuda:0")', 'x = local = torch.randn(8, 16, 256, device="cuda:0")'
    )
    s, findings = _run(script, dryrun_cli, text.replace("SUM", "skips += x.to(devs[0]); skips = skips + local"))
    assert [(f["code"], f["line"], f["extra"]["addends"]) for f in findings] == [("MP005", s.line("add"), 3)]


def test_the_sum_carried_across_once_or_kept_where_it_is_summed_is_clean(script, dryrun_cli):
    carried = "skips = x if not torch.is_tensor(skips) else skips.to(dev) + x"
    assert _run(script, dryrun_cli, SKIPS.replace("SUM", carried))[1] == []
    stays = SKIPS.replace("SUM", "skips = skips + x.to(devs[0])").replace(
        'head(skips.to("cuda:1")).square().mean().backward()', "skips.square().mean().backward()"
    )
    assert _run(script, dryrun_cli, stays)[1] == []
    one = SKIPS.replace('devs = ["cuda:0"] * 3 + ["cuda:1"] * 3', 'devs = ["cuda:0"] * 5 + ["cuda:1"]')
    assert _run(script, dryrun_cli, one.replace("SUM", "skips = skips + x.to(devs[0])"))[1] == []


def test_a_residual_stream_handed_to_blocks_on_the_other_gpu_is_not_a_kept_sum(script, dryrun_cli):
    s, findings = _run(
        script,
        dryrun_cli,
        """
        import torch
        import torch.nn as nn

        blocks = [nn.Linear(64, 64).to("cuda:1") for _ in range(4)]
        h = torch.randn(8, 64, device="cuda:0")
        for block in blocks:
            h = h + block(h.to("cuda:1")).to("cuda:0")
        print(h.to("cuda:1").sum())
        """,
    )
    assert all(f["extra"].get("scope") != "accumulated" for f in findings), findings


def test_a_branch_stream_that_takes_in_the_other_branch_and_is_read_is_no_kept_sum(script, dryrun_cli):
    # Round 38's t23 good program (HRNet): `h = h + up(l).to(h.device)` takes in the low branch at every unit, but
    # `h` is the high branch's activation, read by its next block (`h + body(h)`) and sent down: no accumulator.
    s, findings = _run(
        script,
        dryrun_cli,
        """
        import torch
        import torch.nn as nn

        high = [nn.Conv2d(8, 8, 3, padding=1).to("cuda:0") for _ in range(3)]
        low = [nn.Conv2d(8, 8, 3, padding=1).to("cuda:1") for _ in range(3)]
        up = [nn.Conv2d(8, 8, 1).to("cuda:1") for _ in range(3)]
        down = [nn.Conv2d(8, 8, 1).to("cuda:1") for _ in range(3)]
        h = torch.randn(2, 8, 16, 16, device="cuda:0")
        l = torch.randn(2, 8, 16, 16, device="cuda:1")
        for hb, lb, u, d in zip(high, low, up, down):
            h, l = h + hb(h), l + lb(l)
            h, l = h + u(l).to(h.device), l + d(h.to(l.device))
        print(h.sum().item(), l.sum().item())
        """,
    )
    assert all(f["extra"].get("scope") != "accumulated" for f in findings), findings
