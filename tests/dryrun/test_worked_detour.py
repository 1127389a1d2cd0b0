"""MP005 at run time for a detour with work (checks/worked_detour.py): a KV cache moved to the beam index's GPU
only to be reordered there, and moved straight back, is reported at the move back; reordering where the cache is,
with the index moved to it, is clean, and so is an op that needs what lives on the other GPU (a layer's weight,
a larger tensor)."""

from dryrun_helpers import codes_at

REORDER = """
import torch

cache = [torch.randn(4, 8, 32, 16, device=f"cuda:{i % 2}") for i in range(4)]
beam_idx = torch.tensor([0, 0, 2, 3], device="cuda:1")
for step in range(3):
    cache = [k * 0.5 for k in cache]  # the layers' work on each cache, where it is
    cache = [REORDER for k in cache]  # <- back
print(len(cache))
"""


def test_a_cache_reordered_on_the_index_gpu_and_moved_back_is_a_detour(script, dryrun_cli):
    s = script(REORDER.replace("REORDER", "k.to(beam_idx.device).index_select(0, beam_idx).to(k.device)"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = report["findings"]
    assert (f["code"], f["line"], f["extra"]["op"]) == ("MP005", s.line("back"), "index_select")
    assert f["devices"] == ["cuda:0", "cuda:1"] and "32 bytes" in f["message"]


def test_the_cache_reordered_where_it_is_with_the_index_moved_is_clean(script, dryrun_cli):
    s = script(REORDER.replace("REORDER", "k.index_select(0, beam_idx.to(k.device))"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_a_stage_that_runs_its_own_layer_on_the_data_is_no_detour(script, dryrun_cli):
    s = script(
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        layer = nn.Linear(256, 256).to("cuda:1")
        big = torch.randn(512, 256, device="cuda:1")
        x = torch.randn(512, 256, device="cuda:0")
        for _ in range(3):
            y = F.linear(x.to("cuda:1"), layer.weight).to("cuda:0")  # its weight lives there
            z = (x.to("cuda:1") + big).to("cuda:0")  # as large as the data: moving it instead saves nothing
        print(y.shape, z.shape)
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP005", 9) not in codes_at(report) and ("MP005", 10) not in codes_at(report), err


def test_a_helper_pinned_to_one_gpu_makes_a_detour_even_when_its_argument_is_gone(script, dryrun_cli):
    # The helper's argument (the text tower's output on cuda:1) is freed when it returns: the result still goes
    # straight back to where that data was made, for one op that needed nothing from cuda:0.
    s = script(
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        def l2norm(x):
            return F.normalize(x.to("cuda:0"), dim=-1)

        text = nn.Linear(256, 512).to("cuda:1")
        for _ in range(2):
            txt = l2norm(text(torch.randn(256, 256, device="cuda:1"))).to("cuda:1")  # <- back
            print(float(txt.sum()))
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = [f for f in report["findings"] if f["code"] == "MP005"]
    assert (f["line"], f["extra"]["op"]) == (s.line("back"), "normalize")
    assert "where the data was made" in f["message"]


PARTIAL_SUMS = """
import torch
import torch.nn as nn

experts = [nn.Linear(128, 128).to("cuda:1") for _ in range(2)]
x = torch.randn(2048, 128, device="cuda:0")
idx = torch.randint(0, 2048, (2, 256), device="cuda:0")
for step in range(3):
    x_d, idx_d = x.to("cuda:1"), idx.to("cuda:1")
    partial = torch.zeros_like(x_d)
    for j, e in enumerate(experts):
        partial.index_add_(0, idx_d[j], e(x_d.index_select(0, idx_d[j])))
    out = x + partial.to("cuda:0")
print(out.shape)
"""


def test_a_buffer_made_like_the_arrival_and_filled_there_is_no_detour(script, dryrun_cli):
    # (probe_dr34 c16: experts' partial sums gathered in `zeros_like(x_d)` on their GPU and sent home once)
    s = script(PARTIAL_SUMS)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [f for f in report["findings"] if f["code"] == "MP005"] == []


SAMPLED_SOFTMAX = """
import torch
import torch.nn as nn
import torch.nn.functional as F

users = nn.Linear(64, 128).to("cuda:0")
items = nn.Embedding(4096, 128).to("cuda:1")
log_q = torch.zeros(4096, device="cuda:1")
opt = torch.optim.SGD([*users.parameters(), *items.parameters()], lr=0.1)
for step in range(3):
    u = users(torch.randn(256, 64, device="cuda:0"))
    v = items(torch.arange(4096, device="cuda:1"))
    LOGITS
    logits = logits.to(log_q.device) - log_q  # <- back
    loss = F.cross_entropy(logits, torch.arange(256, device="cuda:1"))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_large_matrix_moved_through_a_view_for_a_matmul_whose_scaled_result_comes_back_is_a_detour(
    script, dryrun_cli
):
    # (probe37 t07) a sampled softmax: the 4096x128 item matrix (2 MiB) crosses to the user GPU, `u @ v.t()` runs
    # there, and the logits (4 MiB), divided by a temperature, cross back: the 128 KiB user matrix could cross instead
    s = script(SAMPLED_SOFTMAX.replace("LOGITS", "logits = u @ v.to(u.device).t() / 0.05"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = report["findings"]
    assert (f["code"], f["line"], f["extra"]["op"]) == ("MP005", s.line("back"), "matmul")
    assert "2 MiB moved cuda:1 -> cuda:0" in f["message"] and "its other input (128 KiB)" in f["message"]


def test_the_small_matrix_moved_or_the_result_worked_on_with_another_tensor_is_clean(script, dryrun_cli):
    for logits in (
        "logits = u.to(v.device) @ v.t() / 0.05",  # the fix
        # work of its own on the user GPU with another tensor there, before the move back
        "logits = (u @ v.to(u.device).t()) * u.norm(dim=-1, keepdim=True)",
    ):
        s = script(SAMPLED_SOFTMAX.replace("LOGITS", logits))
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert (status, report["findings"]) == (0, []), (logits, err)
