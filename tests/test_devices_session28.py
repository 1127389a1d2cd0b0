"""Session 28: gradients from torch.autograd.grad, tensors that in-place methods give back, and MP020
(a GPU tensor's elements read on the host one at a time)."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def lines(src: str) -> list[tuple[int, str]]:
    r = analyze("t.py", textwrap.dedent(src), ALL, "m", {})
    return sorted((f.line, f.code) for f in r.findings)


def messages(src: str) -> list[str]:
    r = analyze("t.py", textwrap.dedent(src), ALL, "m", {})
    return [f.message for f in r.findings]


PINN = """
import torch
import torch.nn as nn

lower = nn.Linear(2, 8).to("cuda:0")
upper = nn.Linear(8, 1).to("cuda:1")
t = torch.rand(16, 2, device="cuda:0").requires_grad_()
u = upper(lower(t).to("cuda:1"))
g = torch.autograd.grad(u, t, grad_outputs=torch.ones_like(u), create_graph=True)[0]
r = GRAD + u
"""


def test_a_gradient_from_autograd_grad_is_on_its_input_s_device():
    assert lines(PINN.replace("GRAD", "g")) == [(10, "MP001")]
    assert "`g`, which is on cuda:0" in messages(PINN.replace("GRAD", "g"))[0]


def test_a_gradient_moved_to_the_output_s_device_is_clean():
    assert lines(PINN.replace("GRAD", 'g.to("cuda:1")')) == []


def test_gradients_of_several_inputs_each_keep_their_input_s_device():
    src = """
    import torch

    a = torch.rand(4, device="cuda:0", requires_grad=True)
    b = torch.rand(4, device="cuda:1", requires_grad=True)
    loss = (a.sum().to("cuda:1") * b).sum()
    ga, gb = torch.autograd.grad(loss, [a, b])
    ok = gb * b
    bad = ga * b
    """
    assert lines(src) == [(9, "MP001")]


def test_gradients_of_a_model_s_parameters_say_nothing():
    # `inputs` not known element by element (a split model's parameters): no device claimed.
    src = """
    import torch
    import torch.nn as nn

    net = nn.Sequential(nn.Linear(2, 2).to("cuda:0"), nn.Linear(2, 2).to("cuda:1"))
    out = net[1](net[0](torch.rand(3, 2, device="cuda:0")).to("cuda:1")).sum()
    grads = torch.autograd.grad(out, net.parameters())
    total = grads[0] + out
    """
    assert lines(src) == []


def test_requires_grad_and_copy_give_back_the_tensor_itself():
    src = """
    import torch

    x = torch.zeros(4, device="cuda:0").requires_grad_()
    buf = torch.empty(4, device="cuda:1")
    y = buf.copy_(x)
    z = x + torch.ones(4, device="cuda:1")
    w = y + torch.ones(4, device="cuda:0")
    """
    assert lines(src) == [(7, "MP001"), (8, "MP001")]


ELEMENTS = """
import torch

lengths = torch.randint(30, 120, (16,)).to(DEV)
for step in range(10):
    READ
"""


def elements(read: str, dev: str = '"cuda:0"') -> list[tuple[int, str]]:
    return [f for f in lines(ELEMENTS.replace("READ", read).replace("DEV", dev)) if f[1] == "MP020"]


def test_python_s_max_min_and_sorted_over_a_gpu_tensor_are_reported():
    for read in ("longest = int(max(lengths))", "m = min(lengths)", "order = sorted(lengths, reverse=True)"):
        assert elements(read) == [(6, "MP020")], read


def test_the_tensor_s_own_reductions_and_host_copies_are_clean():
    for read in (
        "longest = int(lengths.max())",
        "order = sorted(lengths.tolist())",
        "pair = max(lengths[0], lengths[1])",
        "m = max(lengths.cpu())",
        "vals = lengths.tolist()",
    ):
        assert elements(read) == [], read


def test_a_host_tensor_or_an_unknown_device_is_clean():
    assert elements("longest = int(max(lengths))", '"cpu"') == []
    assert elements("longest = int(max(lengths))", "somewhere") == []


def test_a_gpu_named_by_an_unknown_index_counts():
    src = ELEMENTS.replace("DEV", 'torch.device("cuda", GPU)').replace("READ", "longest = int(max(lengths))")
    src = src.replace("import torch\n", "import os\nimport torch\n\nGPU = int(os.environ['GPU'])\n", 1)
    assert [f for f in lines(src) if f[1] == "MP020"] == [(9, "MP020")]


def test_a_loop_that_reads_each_element_on_the_host_is_reported_at_the_read():
    assert elements("names = [str(v.item()) for v in lengths]") == [(6, "MP020")]
    assert elements("total = sum(int(v) for v in lengths)") == [(6, "MP020")]
    src = ELEMENTS.replace("DEV", '"cuda:1"').replace(
        "    READ", "    total = 0\n    for v in lengths:\n        if v > 0:\n            total += float(v)"
    )
    # the first read of the loop: `if v > 0` reads the truth of a tensor made from the element
    assert [f for f in lines(src) if f[1] == "MP020"] == [(8, "MP020")]


def test_a_loop_that_keeps_its_element_on_the_gpu_is_clean():
    for read in (
        "rows = [torch.zeros(3, device='cuda:0')[v] for v in lengths]",
        "vals = [v.item() for v in lengths.tolist()]",
    ):
        assert elements(read) == [], read


def test_a_list_of_gpu_tensors_is_not_one_tensor():
    src = """
    import torch

    losses = [torch.zeros((), device="cuda:0"), torch.ones((), device="cuda:0")]
    worst = max(losses)
    vals = [l.item() for l in losses]
    """
    assert lines(src) == []


def test_a_read_run_once_outside_any_loop_or_forward_is_not_reported():
    src = """
    import torch

    preds = torch.randn(32, 10, device="cuda:1").argmax(1)
    names = [str(p.item()) for p in preds]
    longest = max(preds)
    """
    assert lines(src) == []


CHECKPOINTED = """
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 8).to("cuda:1")
        self.seq = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).to("cuda:1")

    def forward(self, x):
        h = checkpoint(self.a, x.to("cuda:0"), use_reentrant=False)
        CALL
        return y


net = Net()
out = net(torch.randn(2, 8))
"""


def test_a_checkpointed_module_is_called_with_what_checkpoint_gets():
    found = messages(CHECKPOINTED.replace("CALL", "y = checkpoint(self.b, h, use_reentrant=False)"))
    assert len(found) == 1 and "`self.b` is on cuda:1" in found[0] and "output of `self.a`" in found[0], found
    assert lines(CHECKPOINTED.replace("CALL", 'y = checkpoint(self.b, h.to("cuda:1"), use_reentrant=False)')) == []


def test_checkpoint_sequential_runs_its_sequential_on_the_input():
    assert lines(CHECKPOINTED.replace("CALL", "y = checkpoint_sequential(self.seq, 2, h)")) == [(16, "MP001")]
    assert lines(CHECKPOINTED.replace("CALL", 'y = checkpoint_sequential(self.seq, 2, h.to("cuda:1"))')) == []


def test_a_checkpointed_function_of_the_file_runs_with_its_arguments():
    src = CHECKPOINTED.replace("CALL", "y = checkpoint(self.second, h, use_reentrant=False)").replace(
        "    def forward(self, x):", "    def second(self, h):\n        return self.b(h)\n\n    def forward(self, x):"
    )
    assert [code for _, code in lines(src)] == ["MP001"]


def test_mp019_leaves_a_factory_with_a_seeded_host_generator_alone():
    # diffusers' randn_tensor: a host generator gives the same noise on any GPU layout, and `device=` refuses it.
    src = """
    import torch

    g = torch.Generator().manual_seed(0)
    latents = torch.randn(1, 4, 16, 16, device="cuda:1")
    for t in range(3):
        noise = torch.randn(latents.shape, generator=g).to(latents.device)
        plain = torch.randn(latents.shape).to(latents.device)
    """
    assert lines(src) == [(8, "MP019")]


def test_a_tensor_used_as_an_index_on_the_host_was_worked_on_there():
    # Beam search: the beams' source ids come to the host to index the host history, then go on to the GPU
    # that holds the state: no detour through the host (MP005), the host read them.
    src = """
    import torch

    hyps = torch.zeros(4, 1, dtype=torch.long)
    state = torch.randn(2, 4, 8, device="cuda:0")
    for _ in range(3):
        idx = torch.randint(0, 4, (4,), device="cuda:1")
        src = idx.cpu()
        hyps = torch.cat([READ, hyps[:, :1]], dim=1)
        state = state[:, src.to("cuda:0")]
    """
    assert lines(src.replace("READ", "hyps[src]")) == []
    assert lines(src.replace("READ", "hyps[src, :]")) == []
    assert [code for _, code in lines(src.replace("READ", "hyps"))] == ["MP005"]


HOOKED_STAGES = """
import torch
import torch.nn as nn

DEVS = ["cuda:0", "cuda:1"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleDict({"a": nn.Sequential(nn.Linear(8, 8)), "b": nn.Sequential(nn.Linear(8, 8))})

    def forward(self, x):
        h = x
        for stage in self.stages.values():
            h = stage(h)
        return h


def make_mover(device):
    def move_inputs(module, args):
        return tuple(a.to(device) for a in args)
    return move_inputs


model = Net()
for (name, stage), dev in zip(model.stages.items(), DEVS):
    stage.to(dev)
    HOOK
out = model(torch.randn(2, 8))
"""


def test_an_nn_sequential_with_a_pre_hook_gets_what_the_hook_hands_on():
    # accelerate-style input movers on each stage (an nn.Sequential): no mismatch is known at its first layer.
    assert lines(HOOKED_STAGES.replace("HOOK", "stage.register_forward_pre_hook(make_mover(dev))")) == []
    assert [code for _, code in lines(HOOKED_STAGES.replace("HOOK", "pass"))] == ["MP001", "MP001"]


def test_torch_tensor_of_a_list_of_gpu_tensors_reads_each_on_the_host():
    src = """
    import torch

    for step in range(3):
        losses = [torch.ones((), device="cuda:0"), torch.zeros((), device="cuda:0")]
        log = READ
    """
    assert lines(src.replace("READ", "torch.tensor(losses)")) == [(6, "MP020")]
    assert lines(src.replace("READ", "torch.tensor([losses[0], losses[1]])")) == [(6, "MP020")]
    for clean in ("torch.stack(losses)", "torch.tensor([1.0, 2.0])", "torch.tensor([l.cpu() for l in losses])"):
        assert lines(src.replace("READ", clean)) == [], clean
    # on two GPUs: the host is where they can meet (torch.stack would refuse them)
    two = src.replace('torch.zeros((), device="cuda:0")', 'torch.zeros((), device="cuda:1")')
    assert lines(two.replace("READ", "torch.tensor(losses)")) == []
