"""MP016 at run time for a tensor widened just before its move (checks/widened.py): bf16 activations upcast to fp32
before a stage hop, a uint8 clip converted and scaled on the host before its upload; moving the narrow data and
converting it on arrival is clean, and so is a move of a tensor that was made wide (not converted) or narrowed."""

from dryrun_helpers import codes_at

HOP = """
import torch
import torch.nn as nn

stage0 = nn.Linear(256, 256).to("cuda:0").to(torch.bfloat16)
stage1 = nn.Linear(256, 8).to("cuda:1")
for _ in range(3):
    x = stage0(torch.randn(512, 256, device="cuda:0", dtype=torch.bfloat16))
    x = MOVE  # <- hop
    stage1(x).sum().backward()
"""


def test_bf16_activations_upcast_before_the_hop_are_reported(script, dryrun_cli):
    for move in ('x.float().to("cuda:1")', 'x.to(torch.float32).to("cuda:1")'):
        s = script(HOP.replace("MOVE", move))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert status == 0, err
        (f,) = [f for f in report["findings"] if f["code"] == "MP016"]
        assert f["line"] == s.line("hop") and f["extra"]["widened_from"] == "bfloat16", move
        assert f["extra"]["bytes_needed"] * 2 == f["extra"]["bytes_moved"] == 512 * 256 * 4


def test_activations_moved_then_upcast_are_clean(script, dryrun_cli):
    s = script(HOP.replace("MOVE", 'x.to("cuda:1").float()'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_a_uint8_clip_converted_and_scaled_on_the_host_then_uploaded_is_reported(script, dryrun_cli):
    s = script(
        """
        import torch

        net = torch.nn.Conv3d(3, 8, 3).to("cuda:0")
        for _ in range(2):
            clip = torch.randint(0, 256, (4, 3, 8, 32, 32), dtype=torch.uint8)
            clip = CLIP  # <- up
            net(clip).mean().backward()
        """.replace("CLIP", 'clip.float().div(255).to("cuda:0")')
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP016", s.line("up")) in codes_at(report), err
    fixed = script(
        s.path.read_text().replace('clip.float().div(255).to("cuda:0")', 'clip.to("cuda:0").float().div(255)')
    )
    status, report, err = dryrun_cli(fixed, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_a_tensor_narrowed_or_made_wide_then_moved_is_clean(script, dryrun_cli):
    s = script(
        """
        import torch

        w = torch.randn(512, 256, device="cuda:0")
        for _ in range(2):
            a = w.half().to("cuda:1")  # narrowed: fewer bytes cross
            b = (w * 2).to("cuda:1")  # made as wide as it is
        print(a.shape, b.shape)
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert "MP016" not in [f["code"] for f in report["findings"]], err


ENCODE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

conv = nn.Conv1d(21, 8, 3).to("cuda:1")
seqs = torch.randint(0, 21, (32, 256), device="cuda:0")
for _ in range(2):
    x = MOVE  # <- hop
    conv(x.transpose(1, 2)).mean().backward()
"""


def test_a_one_hot_encoding_moved_is_reported_with_the_ids_bytes(script, dryrun_cli):
    for move in ('F.one_hot(seqs, 21).float().to("cuda:1")', 'F.one_hot(seqs, 21).half().float().to("cuda:1")'):
        s = script(ENCODE.replace("MOVE", move))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert status == 0, err
        (f,) = [f for f in report["findings"] if f["code"] == "MP016"]
        assert f["line"] == s.line("hop") and f["extra"]["widened_from"] == "one-hot", move
        assert f["extra"]["bytes_needed"] == 32 * 256 * 8 and f["extra"]["bytes_moved"] == 32 * 256 * 21 * 4


def test_ids_moved_then_encoded_or_a_small_encoding_are_clean(script, dryrun_cli):
    for move in (
        'F.one_hot(seqs.to("cuda:1"), 21).float()',
        # 32 x 2 ids one-hot: 5 KiB, a copy's fixed cost whatever the encoding
        'F.one_hot(seqs[:, :2], 21).float().to("cuda:1").repeat(1, 128, 1)',
    ):
        s = script(ENCODE.replace("MOVE", move))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert status == 0 and "MP016" not in [f["code"] for f in report["findings"]], (move, err)


UPSAMPLE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

first = nn.Conv2d(1, 16, 3, padding=1).to("cuda:0")
last = nn.Conv2d(16, 1, 3, padding=1).to("cuda:1")
low = torch.rand(16, 1, 32, 32)
for _ in range(2):
    x = MOVE  # <- hop
    h = first(x)
    y = last(h.to("cuda:1")) + USE
    y.mean().backward()
"""


def test_a_tensor_upsampled_or_unfolded_then_moved_is_reported_with_its_input_bytes(script, dryrun_cli):
    cases = {
        'F.interpolate(low, scale_factor=4, mode="bicubic", align_corners=False).to("cuda:0")': (
            "upsampled",
            16 * 32 * 32 * 4,
            16 * 128 * 128 * 4,
        ),
        'F.unfold(low.to("cuda:1"), 3, padding=1).to("cuda:0").view(16, 9, 32, 32)[:, :1]': (
            "unfolded into patches",
            16 * 32 * 32 * 4,
            16 * 9 * 32 * 32 * 4,
        ),
    }
    for move, (how, needed, moved) in cases.items():
        s = script(UPSAMPLE.replace("MOVE", move).replace("USE", "0"))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert status == 0, err
        (f,) = [f for f in report["findings"] if f["code"] == "MP016"]
        assert f["line"] == s.line("hop") and f["extra"]["widened_from"] == how, move
        assert (f["extra"]["bytes_needed"], f["extra"]["bytes_moved"]) == (needed, moved), move


def test_an_upsampled_tensor_used_where_it_was_made_or_resampled_on_arrival_is_clean(script, dryrun_cli):
    for move, use in (
        # resampled where it is used: the small image crosses
        ('F.interpolate(low.to("cuda:0"), scale_factor=4, mode="bicubic", align_corners=False)', "0"),
        # a super-resolution model's input: read by the first layer on cuda:0, and again by the residual on cuda:1
        ('F.interpolate(low.to("cuda:0"), scale_factor=4, mode="bicubic", align_corners=False)', 'x.to("cuda:1")'),
        # upsampled 2x: 4 times the data, below RESAMPLE_MIN_FACTOR
        ('F.interpolate(low, scale_factor=2, mode="bilinear").to("cuda:0")', "0"),
        # downsampled: smaller than its input
        ('F.interpolate(torch.rand(16, 1, 64, 64), scale_factor=0.5).to("cuda:0")', "0"),
    ):
        s = script(UPSAMPLE.replace("MOVE", move).replace("USE", use))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert status == 0 and "MP016" not in [f["code"] for f in report["findings"]], (move, use, err)


RBF = """
import torch
import torch.nn as nn

centers = torch.linspace(0, 5, 32)
net = nn.Linear(32, 1).to("cuda:0")
SETUP
for _ in range(3):
    pos = torch.rand(8, 24, 3) * 5
    d = torch.cdist(pos, pos)
    feats = MOVE  # <- hop
    net(feats).mean().backward()
"""


def test_an_expansion_computed_on_the_host_by_broadcasting_then_uploaded_every_step_is_reported(script, dryrun_cli):
    # a radial basis expansion of the distances on 32 centres: 32 times the distances cross
    s = script(RBF.replace("MOVE", 'torch.exp(-4.0 * (d[..., None] - centers) ** 2).to("cuda:0")').replace("SETUP", ""))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = [f for f in report["findings"] if f["code"] == "MP016"]
    assert f["line"] == s.line("hop") and f["extra"]["widened_from"] == "broadcast"
    assert (f["extra"]["bytes_needed"], f["extra"]["bytes_moved"]) == (8 * 24 * 24 * 4 + 32 * 4, 8 * 24 * 24 * 32 * 4)


def test_an_expansion_computed_on_the_gpu_or_a_table_moved_once_is_clean(script, dryrun_cli):
    for move, setup in (
        # the distances cross, the expansion is computed where it is used
        ('torch.exp(-4.0 * (d.to("cuda:0")[..., None] - centers.to("cuda:0")) ** 2)', ""),
        # a table made by broadcasting, moved once at setup (sinusoidal positions), then only read
        (
            'torch.exp(-4.0 * (d.to("cuda:0")[..., None] - centers.to("cuda:0")) ** 2) + table[:24, :32]',
            'table = torch.sin(torch.arange(512.0)[:, None] * torch.rand(64)[None, :]).to("cuda:0")',
        ),
        # broadcast and then reduced where it is: the small result crosses
        ('(d[..., None] - centers).abs().amin(-1, keepdim=True).to("cuda:0") * torch.ones(32, device="cuda:0")', ""),
    ):
        s = script(RBF.replace("MOVE", move).replace("SETUP", setup))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert status == 0 and "MP016" not in [f["code"] for f in report["findings"]], (move, err)


def test_an_expansion_with_full_size_noise_added_is_data_of_its_own(script, dryrun_cli):
    # synthetic batches: a broadcast product plus noise drawn at full size, moved every step: the noise must cross
    s = script(
        RBF.replace("MOVE", '(d[..., None] * (1 + centers) + 0.1 * torch.randn(8, 24, 24, 32)).to("cuda:0")').replace(
            "SETUP", ""
        )
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0 and "MP016" not in [f["code"] for f in report["findings"]], err
