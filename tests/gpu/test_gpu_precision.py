"""Correct programs that once gave false findings under the dry run, on 2 real GPUs in the debug mode
(the same checks): load-time copies of a tied checkpoint tensor, foreach calls over lists that span
the GPUs, autograd.grad across GPUs, experts fed from one input, a tied weight under gradient
accumulation, type_as, generation loops. tests/dryrun/test_correct_programs.py and
test_loading_copies.py run them on virtual GPUs.

Skipped without 2 CUDA devices (CI has none)."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mpcheck  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
]


def test_a_tied_checkpoint_tensor_copied_once_per_key_at_load_is_not_a_repeat():
    shared = torch.randn(512, 128)  # 256 KiB, one tensor behind two keys
    with mpcheck.debug(report=None, on_mismatch="raise") as dbg:
        embed = nn.Embedding(512, 128, device="meta")
        head = nn.Linear(128, 512, bias=False, device="meta")
        modules = {"embed": embed, "head": head}
        for key, value in {"embed.weight": shared, "head.weight": shared}.items():
            name, leaf = key.split(".")
            setattr(modules[name], leaf, nn.Parameter(value.to("cuda:0")))
        head.weight = embed.weight
        body = nn.Linear(128, 128, device="cuda:1")
        for _ in range(2):
            h = body(embed(torch.randint(0, 512, (4, 8), device="cuda:0")).to("cuda:1"))
            head(h.to("cuda:0")).sum().backward()
            dbg.step()
    assert dbg.findings == []


def test_foreach_over_a_split_models_weights_and_autograd_grad_run_clean():
    model = nn.Sequential(nn.Linear(64, 64, device="cuda:0"), nn.Linear(64, 8, device="cuda:1"))
    shadow = [p.detach().clone() for p in model.parameters()]
    with mpcheck.debug(model, report=None, on_mismatch="raise") as dbg:
        for _ in range(2):
            out = model[1](model[0](torch.randn(4, 64, device="cuda:0")).to("cuda:1"))
            grads = torch.autograd.grad(out.sum(), list(model.parameters()))
            with torch.no_grad():
                torch._foreach_add_(list(model.parameters()), [g * -0.1 for g in grads])
                torch._foreach_lerp_(shadow, [p.detach() for p in model.parameters()], 0.01)
            dbg.step()
        g = torch.ones(4, 8).type_as(out)  # onto out's GPU, cuda:1 (a.to(out.options()))
    assert dbg.findings == []
    assert [s.device for s in shadow] == [p.device for p in model.parameters()]
    assert g.device == torch.device("cuda:1")


def test_experts_fed_from_one_input_and_gathered_back_are_not_a_ping_pong():
    devs = ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
    gate = nn.Linear(64, 4, device="cuda:0")
    experts = nn.ModuleList([nn.Linear(64, 64, device=d) for d in devs])
    with mpcheck.debug(report=None, on_mismatch="raise") as dbg:
        for _ in range(2):
            x = torch.randn(64, 64, device="cuda:0")
            w, idx = gate(x).softmax(-1).topk(2, dim=-1)
            out = torch.zeros_like(x)
            for e, (dev, expert) in enumerate(zip(devs, experts)):
                rows, slot = (idx == e).nonzero(as_tuple=True)
                y = expert(x[rows].to(dev)).to(x.device)
                out.index_add_(0, rows, y * w[rows, slot].unsqueeze(-1))
            out.pow(2).mean().backward()
            dbg.step()
    assert dbg.findings == []


def test_a_tied_weight_copied_once_per_forward_under_gradient_accumulation_is_not_a_repeat():
    emb = nn.Embedding(2000, 128, device="cuda:0")  # 1 MB
    body = nn.Linear(128, 128, device="cuda:1")
    opt = torch.optim.AdamW([*emb.parameters(), *body.parameters()], foreach=True)
    with mpcheck.debug(report=None, on_mismatch="raise") as dbg:
        for _ in range(2):
            for _ in range(3):
                ids = torch.randint(0, 2000, (2, 16), device="cuda:0")
                logits = body(emb(ids).to("cuda:1")) @ emb.weight.to("cuda:1").t()
                logits.logsumexp(-1).mean().backward()
            opt.step()
            opt.zero_grad()
            dbg.step()
        with torch.no_grad():  # a generation loop: the token goes back to the first GPU every step
            tok = torch.zeros(1, 1, dtype=torch.long, device="cuda:0")
            for _ in range(3):
                tok = body(emb(tok).to("cuda:1")).argmax(-1).to("cuda:0")
    assert dbg.findings == []


def test_a_slice_assigned_across_gpus_and_weights_replaced_after_a_call_run_clean():
    from torch.func import functional_call

    lin = nn.Linear(8, 4, device="cuda:0")
    with mpcheck.debug(lin, report=None, on_mismatch="raise") as dbg:
        buf = torch.zeros(3, 8, device="cuda:0")
        buf[:, 4:] = torch.ones(3, 4, device="cuda:1")  # set_item copies into the view: legal
        lin(buf)
        for dev in ("cuda:0", "cuda:1"):
            swapped = {k: v.detach().to(dev) for k, v in lin.named_parameters()}
            functional_call(lin, swapped, (buf.to(dev),))
        lin.weight = nn.Parameter(lin.weight.detach().to("cuda:1"))
        lin.bias = nn.Parameter(lin.bias.detach().to("cuda:1"))
        lin(buf.to("cuda:1"))
    assert dbg.findings == []


def test_the_virtual_stream_context_does_what_a_real_one_does_to_the_current_device():
    """The dry run's `torch.cuda.stream` (runtime/virtual/streams.py) makes the stream's GPU current for
    the block, as PyTorch's set_stream does on real GPUs: checked here against real ones."""
    s = torch.cuda.Stream(device="cuda:1")
    before = torch.cuda.current_device()
    with torch.cuda.stream(s):
        inside = torch.cuda.current_device()
        made = torch.zeros(2, device="cuda").device
    assert (inside, made.index, torch.cuda.current_device()) == (1, 1, before)
