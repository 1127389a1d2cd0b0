"""Session 36: placement choices that a loop decides the same way on every pass (MP017)."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str, code: str) -> list:
    return [f for f in analyze("t.py", textwrap.dedent(src), ALL, "m", {}, (2, 4, 8)).findings if f.code == code]


# A split point compared with the loop's index; CHOICE is the line that sets `dev`.
SPLIT = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, n=6):
        super().__init__()
        devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
        self.stages = nn.ModuleList()
        for i in range(n):
            CHOICE
            self.stages.append(nn.Linear(8, 8).to(dev))

    def forward(self, x):
        for s in self.stages:
            x = s(x.to(s.weight.device))
        return x
"""


def test_a_split_test_true_on_every_pass_is_reported_at_the_choice():
    found = findings(SPLIT.replace("CHOICE", "dev = devices[0] if i < n else devices[1]"), "MP017")
    assert [(f.line, f.column) for f in found] == [(12, 19)]
    assert "`i < n` holds on every pass of `for i in range(n)`" in found[0].message
    assert "picks cuda:0 each time and never cuda:1" in found[0].message


def test_a_split_test_false_on_every_pass_names_the_other_side():
    found = findings(SPLIT.replace("CHOICE", "dev = devices[1] if i >= n else devices[0]"), "MP017")
    assert len(found) == 1
    assert "`i >= n` fails on every pass" in found[0].message
    assert "picks cuda:0 each time and never cuda:1" in found[0].message


def test_the_same_test_in_an_if_statement_is_reported_at_its_test():
    choice = "if i <= n - 1:\n                dev = 'cuda:0'\n            else:\n                dev = 'cuda:1'"
    found = findings(SPLIT.replace("CHOICE", choice), "MP017")
    assert [(f.line, f.column) for f in found] == [(12, 16)]
    assert "so the `if` picks cuda:0" in found[0].message


def test_a_split_in_a_comprehension():
    src = SPLIT.replace("CHOICE", "dev = 'cuda:0'").replace(
        "self.stages = nn.ModuleList()",
        "self.stages = nn.ModuleList(nn.Linear(8, 8).to('cuda:1' if i > n else 'cuda:0') for i in range(n))",
    )
    found = findings(src, "MP017")
    assert [f.line for f in found] == [10]


def test_a_test_that_splits_the_passes_is_silent():
    assert findings(SPLIT.replace("CHOICE", "dev = devices[0] if i < n // 2 else devices[1]"), "MP017") == []
    choice = "if i < n // 2:\n                dev = 'cuda:0'\n            else:\n                dev = 'cuda:1'"
    assert findings(SPLIT.replace("CHOICE", choice), "MP017") == []


def test_a_choice_between_one_device_twice_is_silent():
    assert findings(SPLIT.replace("CHOICE", "dev = devices[0] if i < n else devices[0]"), "MP017") == []


def test_a_test_that_reads_a_name_the_body_sets_is_not_judged():
    src = SPLIT.replace("CHOICE", "dev = devices[0] if i < n + used else devices[1]; used = 0").replace(
        "self.stages = nn.ModuleList()", "self.stages = nn.ModuleList()\n        used = 0"
    )
    assert findings(src, "MP017") == []


def test_a_test_that_calls_something_is_not_judged():
    src = SPLIT.replace("CHOICE", "dev = devices[0] if fits(i) else devices[1]").replace(
        "class Net", "def fits(i):\n    return True\n\n\nclass Net"
    )
    assert findings(src, "MP017") == []


def test_one_pass_is_not_enough_to_judge():
    assert (
        findings(SPLIT.replace("CHOICE", "dev = devices[0] if i < n else devices[1]").replace("n=6", "n=1"), "MP017")
        == []
    )


# A tensor brought to the host for a check and sent on to the next GPU (MP005); BETWEEN reads it on the host.
CHECKED = """
import torch
import torch.nn as nn


class Pipe(nn.Module):
    def __init__(self):
        super().__init__()
        self.front = nn.Linear(8, 8).to("cuda:0")
        self.back = nn.Linear(8, 8).to("cuda:1")

    def forward(self, x):
        h = self.front(x.to("cuda:0"))
        h = h.cpu()
        BETWEEN
        h = h.to("cuda:1")
        return self.back(h)
"""


def test_a_host_copy_only_tested_is_a_detour():
    between = "if not torch.isfinite(h).all():\n            raise FloatingPointError(f'bad {h.abs().max()}')"
    found = findings(CHECKED.replace("BETWEEN", between), "MP005")
    assert [f.line for f in found] == [17]
    assert "on the CPU it is only checked (`not torch.isfinite(h).all()`, line 15)" in found[0].message
    assert "moved from cuda:0 to the CPU (line 14) and on to cuda:1" in found[0].message


def test_an_assert_or_a_print_is_a_test_too():
    assert len(findings(CHECKED.replace("BETWEEN", "assert h.isfinite().all(), 'nan'"), "MP005")) == 1
    assert len(findings(CHECKED.replace("BETWEEN", "print(h.norm())"), "MP005")) == 1


def test_a_host_copy_read_as_data_is_work():
    body = "if h.isnan().any():\n            torch.save(h, 'bad.pt')"
    assert findings(CHECKED.replace("BETWEEN", body), "MP005") == []
    # (the host copy has a name: what else reads it is not followed, as for MP016)
    assert findings(CHECKED.replace("BETWEEN", "h = h.clamp(-1, 1)"), "MP005") == []


def test_the_check_on_the_gpu_is_silent():
    src = CHECKED.replace("h = h.cpu()", "ok = torch.isfinite(h).all()").replace(
        "BETWEEN", "if not ok:\n            raise FloatingPointError('bad')"
    )
    assert findings(src, "MP005") == []


# Blocks on cuda:1 whose outputs come back to a residual stream kept on cuda:0 (MP006); UPDATE is the loop's body.
RESIDUAL = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, depth=6):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8).to("cuda:0" if i < depth // 2 else "cuda:1") for i in range(depth))

    def forward(self, x):
        h = x.to("cuda:0")
        for blk in self.blocks:
            dev = blk.weight.device
            UPDATE
        return h
"""


def test_a_residual_stream_left_behind_is_ping_pong():
    found = findings(RESIDUAL.replace("UPDATE", "h = h + blk(h.to(dev)).to(h.device)"), "MP006")
    assert [f.line for f in found] == [15]
    assert "added to a residual stream that stays behind" in found[0].message


def test_a_residual_stream_that_moves_with_the_blocks_is_silent():
    assert findings(RESIDUAL.replace("UPDATE", "h = h.to(dev)\n            h = h + blk(h)"), "MP006") == []


def test_experts_summed_into_an_accumulator_stay_a_branch():
    src = """
    import torch
    import torch.nn as nn


    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = nn.ModuleList(nn.Linear(8, 8).to(f"cuda:{i % 2}") for i in range(4))

        def forward(self, x):
            out = torch.zeros_like(x)
            for e in self.experts:
                out = out + e(x.to(e.weight.device)).to(x.device)
            return out


    MoE()(torch.randn(2, 8, device="cuda:0"))
    """
    assert findings(src, "MP006") == []


# A mask moved to each layer's device inside the loop over the layers (MP011).
PER_LAYER = """
import torch
import torch.nn as nn


class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8).to(f"cuda:{i // 2}") for i in range(4))

    def forward(self, x):
        mask = x.gt(0)
        for layer in self.layers:
            dev = layer.weight.device
            x = layer(x.to(dev)) * MASK
        return x


def run(x):
    return Enc()(x.to("cuda:0"))
"""


def test_a_mask_moved_for_every_layer_is_reported_once():
    found = findings(PER_LAYER.replace("MASK", "mask.to(dev)"), "MP011")
    assert [f.line for f in found] == [15]
    assert "copied to cuda:1 again on each pass of the loop" in found[0].message


def test_one_copy_per_device_is_silent():
    src = PER_LAYER.replace("MASK", "masks[dev]").replace(
        "for layer in self.layers:",
        "masks = {d: mask.to(d) for d in ('cuda:0', 'cuda:1')}\n        for layer in self.layers:",
    )
    assert findings(src, "MP011") == []


def test_an_index_moved_to_each_cached_tensor_is_silent():
    src = """
    import torch

    def reorder(past, beam_idx):
        return [tuple(t.index_select(0, beam_idx.to(t.device)) for t in kv) for kv in past]

    def step(beam_idx):
        past = [(torch.zeros(4, 8, device="cuda:0"),) * 2, (torch.zeros(4, 8, device="cuda:0"),) * 2]
        return reorder(past, beam_idx.to("cuda:1"))
    """
    assert findings(src, "MP011") == []


def test_device_of_makes_the_tensors_gpu_current():
    src = """
    import torch
    import torch.nn as nn


    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8).to("cuda:1")

        def forward(self, h):
            h = self.fc(h)
            with torch.cuda.device_of(h):
                return h + torch.randn(h.shape, device="cuda")


    Noisy()(torch.randn(2, 8, device="cuda:1"))
    """
    assert findings(src, "MP004") == []
    assert len(findings(src.replace("with torch.cuda.device_of(h):", "if True:"), "MP004")) == 1


def test_a_pickled_split_model_loaded_onto_one_gpu_collapses():
    src = """
    import torch
    import torch.nn as nn


    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8).to("cuda:0")
            self.b = nn.Linear(8, 8).to("cuda:1")

        def forward(self, x):
            return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


    def resume(path):
        torch.save(Split(), path)
        return torch.load(path, MAP)
    """
    found = findings(src.replace("MAP", 'map_location="cuda:0", weights_only=False'), "MP007")
    assert [f.line for f in found] == [18]
    assert "with every tensor mapped to cuda:0" in found[0].message
    assert findings(src.replace("MAP", "weights_only=False"), "MP007") == []


CAPTIONER = """
import torch
import torch.nn as nn


class Captioner(nn.Module):
    def __init__(self, encoder_device, decoder_device):
        super().__init__()
        self.encoder = nn.Linear(8, 8).to(encoder_device)
        self.decoder = nn.Linear(8, 8).to(decoder_device)

    def forward(self, x):
        return self.decoder(self.encoder(x.to(self.encoder.weight.device)).to(self.decoder.weight.device))


model = Captioner(ENC, DEC)
"""


def test_an_indexless_setting_beside_cuda0_is_one_gpu():
    found = findings(CAPTIONER.replace("ENC", '"cuda:0"').replace("DEC", '"cuda"'), "MP004")
    assert [f.line for f in found] == [10]
    assert "`decoder_device` is the index-less 'cuda'" in found[0].message


def test_settings_for_two_gpus_or_literals_are_silent():
    assert findings(CAPTIONER.replace("ENC", '"cuda:0"').replace("DEC", '"cuda:1"'), "MP004") == []
    assert findings(CAPTIONER.replace("ENC", '"cuda"').replace("DEC", '"cuda"'), "MP004") == []
    literal = CAPTIONER.replace("to(decoder_device)", "cuda()").replace("ENC", '"cuda:0"').replace("DEC", '"x"')
    assert findings(literal, "MP004") == []


def test_a_hop_inside_a_training_only_branch_fails_in_eval():
    src = """
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self, masked=8):
            super().__init__()
            self.masked = masked
            self.front = nn.Linear(8, 8).to("cuda:0")
            self.back = nn.Linear(8, 8).to("cuda:1")

        def forward(self, x):
            h = self.front(x.to("cuda:0"))
            if self.training and self.masked > 0:
                h = h * 0.5
                HOP
            return self.back(h)


    Net()(torch.randn(2, 8))
    """
    found = findings(src.replace("HOP", 'h = h.to("cuda:1")'), "MP001")
    assert [f.line for f in found] == [18]
    assert "on the path taken in eval mode" in found[0].message
    fixed = src.replace("HOP", "pass").replace("return self.back(h)", 'return self.back(h.to("cuda:1"))')
    assert findings(fixed, "MP001") == []


# A tensor made before a loop over a loader's batches, moved to the device of each batch's output (MP011).
EVAL_LOOP = """
import torch
import torch.nn as nn


def evaluate(model, loader, classes):
    text = classes.to("cuda:1")
    for images in loader:
        img = model(images.to("cuda:0"))
        MOVE
    return img


evaluate(nn.Linear(8, 8).to("cuda:0"), [torch.randn(2, 8)] * 100, torch.randn(10, 8))
"""


def test_a_constant_moved_to_each_batchs_device_is_moved_every_batch():
    found = findings(EVAL_LOOP.replace("MOVE", "img @ text.to(img.device).t()"), "MP011")
    assert [f.line for f in found] == [10]
    assert "copied to cuda:0 on every iteration of the loop" in found[0].message


def test_the_iterable_of_a_loop_is_moved_once():
    src = EVAL_LOOP.replace("for images in loader:", "for images in torch.stack(loader).to('cuda:0'):").replace(
        "MOVE", "pass"
    )
    assert findings(src, "MP011") == []


def test_lengths_made_of_ints_copied_twice_are_a_launch_each():
    src = """
    import torch

    def masked_mean(h, seqs):
        lengths = torch.tensor([len(s) for s in seqs])
        mask = torch.arange(h.shape[1], device=h.device)[None, :] < lengths.to(h.device)[:, None]
        return (h * mask.unsqueeze(-1)).sum(1) / lengths.to(h.device).unsqueeze(-1)

    masked_mean(torch.randn(2, 5, 8, device="cuda:1"), [[1, 2], [3]])
    """
    assert findings(src, "MP011") == []
    floats = src.replace("torch.tensor([len(s) for s in seqs])", "torch.tensor([float(len(s)) for s in seqs])")
    assert len(findings(floats, "MP011")) == 1


# Scores brought to the host for an op the GPU runs too, whose result goes back (MP005).
HOST_TOPK = """
import torch


def search(q, index):
    scores = q.to("cuda:1") @ index.to("cuda:1").t()
    top = scores.cpu().topk(4, dim=-1)
    return index.to("cuda:1")[USE]
"""


def test_host_work_on_gpu_data_sent_back_is_a_detour():
    found = findings(HOST_TOPK.replace("USE", 'top.indices.to("cuda:1")'), "MP005")
    assert [f.line for f in found] == [8]
    assert (
        "what the host computed only from data copied off a GPU (`scores`, which line 7 copied from cuda:1"
        in found[0].message
    )


def test_host_work_kept_on_the_host_or_mixed_with_host_data_is_silent():
    assert findings(HOST_TOPK.replace("USE", "top.indices"), "MP005") == []
    mixed = HOST_TOPK.replace("scores.cpu().topk(4, dim=-1)", "(scores.cpu() + torch.randn(1, 1)).topk(4, dim=-1)")
    assert findings(mixed.replace("USE", 'top.indices.to("cuda:1")'), "MP005") == []


def test_a_draw_with_a_host_generator_is_silent():
    draw = 'top.to("cuda:1")'.replace("top", "scores.softmax(-1).cpu().multinomial(1, generator=g)")
    src = HOST_TOPK.replace("def search(q, index):", "def search(q, index, g=torch.Generator()):")
    assert findings(src.replace("USE", draw), "MP005") == []
    assert len(findings(src.replace("USE", draw.replace(", generator=g", "")), "MP005")) == 1


# A custom autograd Function whose backward meets what forward saved (MP001).
REVERSE = """
import torch
import torch.nn as nn


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lambd):
        ctx.save_for_backward(lambd)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_out):
        (lambd,) = ctx.saved_tensors
        return grad_out.neg() * lambd, None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 1).to("cuda:1")
        self.register_buffer("lam", torch.zeros(1, device="cuda:0"))

    def forward(self, x):
        h = self.a(x.to("cuda:0"))
        return self.b(APPLY)


Net()(torch.randn(2, 8)).sum().backward()
"""


def test_a_backward_meeting_a_saved_tensor_on_another_gpu():
    found = findings(REVERSE.replace("APPLY", 'GradReverse.apply(h.to("cuda:1"), self.lam)'), "MP001")
    assert [f.line for f in found] == [15]
    assert "`lambd` is on cuda:0" in found[0].message and "lambd = lambd.to('cuda:1')" in found[0].message


def test_a_backward_where_its_output_is_is_silent():
    assert findings(REVERSE.replace("APPLY", 'GradReverse.apply(h, self.lam).to("cuda:1")'), "MP001") == []


def test_a_backward_under_no_grad_never_runs():
    src = REVERSE.replace("return self.b(APPLY)", "return self.b(h.to('cuda:1'))")
    src += "\n\ndef infer(h, lam):\n    with torch.no_grad():\n        return GradReverse.apply(h.to('cuda:1'), lam)\n"
    src += "\n\ninfer(torch.randn(2, 8, device='cuda:0'), torch.zeros(1, device='cuda:0'))\n"
    assert findings(src, "MP001") == []
    assert len(findings(src.replace("with torch.no_grad():", "if True:"), "MP001")) == 1


POOLED = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Conv2d(3, 8, 3, padding=1).to("cuda:0")
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.head = nn.Linear(32, 10).to("cuda:1")

    def forward(self, x):
        feats = self.trunk(x.to("cuda:0"))
        return self.head(POOL.flatten(1))


Net()(torch.randn(2, 3, 16, 16))
"""


def test_a_feature_map_moved_then_pooled_is_oversized():
    found = findings(POOLED.replace("POOL", 'self.pool(feats.to("cuda:1"))'), "MP016")
    assert [f.line for f in found] == [15]
    assert "only to be pooled there" in found[0].message and "`self.pool(feats)` first" in found[0].message


def test_pooling_before_the_move_is_silent():
    assert findings(POOLED.replace("POOL", 'self.pool(feats).to("cuda:1")'), "MP016") == []


ROWS = """
import torch


def score(x, bank):
    queries = x.to("cuda:0") * 2
    bank = bank.to("cuda:1")
    LOOP
"""


def test_rows_of_a_tensor_moved_one_by_one():
    found = findings(ROWS.replace("LOOP", 'return [bank @ q.to("cuda:1") for q in queries]'), "MP021")
    assert [f.line for f in found] == [8]
    assert "`q` is a row of `queries` (line 8), moved from cuda:0 to cuda:1" in found[0].message
    loop = 'out = []\n    for q in queries:\n        out.append(bank @ q.to("cuda:1"))\n    return out'
    assert [f.line for f in findings(ROWS.replace("LOOP", loop), "MP021")] == [10]


def test_rows_moved_once_or_of_a_list_are_silent():
    assert findings(ROWS.replace("LOOP", 'return [bank @ q for q in queries.to("cuda:1")]'), "MP021") == []
    assert findings(ROWS.replace("LOOP", "return [q for q in queries.cpu()]"), "MP021") == []
    listed = ROWS.replace("LOOP", 'return [bank @ q.to("cuda:1") for q in [queries, queries * 3]]')
    assert findings(listed, "MP021") == []


def test_chunks_cut_by_split_are_batches():
    src = ROWS.replace("LOOP", 'return [bank @ q.to("cuda:1") for q in queries.split(64)]')
    assert findings(src, "MP021") == []
    assert findings(src.replace("queries.split(64)", "torch.chunk(queries, 4)"), "MP021") == []


ENV_GPUS = """
import os

import torch
import torch.nn as nn

ENCODER_GPU = int(os.environ.get("OCR_ENCODER_GPU", FIRST))
DECODER_GPU = int(os.environ.get("OCR_DECODER_GPU", 1))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 8).to(torch.device("cuda", ENCODER_GPU))
        self.dec = nn.Linear(8, 8).to(torch.device("cuda", DECODER_GPU))

    def forward(self, x):
        return self.dec(self.enc(x.to(torch.device("cuda", ENCODER_GPU))))


Net()(torch.randn(2, 8))
"""


def test_gpu_indices_from_the_environment_with_distinct_defaults_are_a_placement():
    found = findings(ENV_GPUS.replace("FIRST", "0"), "MP001")
    assert [f.line for f in found] == [18]
    assert "cuda:0" in found[0].message and "cuda:1" in found[0].message


def test_a_rank_or_equal_defaults_from_the_environment_stay_unknown():
    assert findings(ENV_GPUS.replace("FIRST", "1"), "MP001") == []
    ranked = ENV_GPUS.replace("FIRST", "0").replace("OCR_ENCODER_GPU", "LOCAL_RANK")
    assert findings(ranked, "MP001") == []


def test_device_strings_from_the_environment_with_distinct_defaults_are_a_placement():
    src = ENV_GPUS.replace('int(os.environ.get("OCR_ENCODER_GPU", FIRST))', 'os.getenv("Q_DEVICE", "cuda:0")')
    src = src.replace('int(os.environ.get("OCR_DECODER_GPU", 1))', 'os.getenv("K_DEVICE", "cuda:1")')
    src = src.replace('torch.device("cuda", ENCODER_GPU)', "torch.device(ENCODER_GPU)")
    src = src.replace('torch.device("cuda", DECODER_GPU)', "torch.device(DECODER_GPU)")
    assert [f.line for f in findings(src, "MP001")] == [18]
    one_gpu = src.replace('"cuda:1")', '"cuda:0")')
    assert findings(one_gpu, "MP001") == []


def test_other_settings_from_the_environment_stay_unknown():
    src = ENV_GPUS.replace("OCR_ENCODER_GPU", "OCR_WORKERS").replace("OCR_DECODER_GPU", "OCR_BEAM")
    assert findings(src.replace("FIRST", "0"), "MP001") == []
