"""The last three false findings of the twelfth round of correct programs (session 24's report): data that
changes where no version counter sees it (a buffer written through `.data`, host memory refilled outside
torch), and a tensor read only inside torch.func's transforms. Each beside the bug that must still be found."""

from dryrun_helpers import codes_at

# A VQ-VAE codebook kept as a buffer and updated through `.data` each step (an EMA), then needed on cuda:1.
CODEBOOK = """
import torch
import torch.nn as nn


class Codebook(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("embed", torch.randn(64, 512))

    def forward(self, z):
        UPDATE
        return z @ self.embed.t()


book = Codebook().to("cuda:0")
for step in range(3):
    book(torch.randn(8, 512, device="cuda:0"))
    embed1 = book.embed.to("cuda:1")  # <- copy
"""


def test_a_buffer_written_through_data_is_no_repeat_nor_constant(script, dryrun_cli):
    update = "self.embed.data.mul_(0.99).add_(0.01 * z.mean(0))"
    status, report, err = dryrun_cli(script(CODEBOOK.replace("UPDATE", update)), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), report["findings"]
    s = script(CODEBOOK.replace("UPDATE", "pass"))  # never written: the same data copied each step
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP011", s.line("copy")) in codes_at(report), report["findings"]


# Host memory that torch.frombuffer wraps, refilled by `readinto` before each copy.
FROMBUFFER = """
import io
import torch
import torch.nn as nn

emb = nn.Embedding(256, 32).to("cuda:0")
stream = io.BytesIO(bytes(range(256)) * 4096)
buf = bytearray(64 * 256 * 4)
host = torch.frombuffer(buf, dtype=torch.int32).view(64, 256)
for step in range(3):
    REFILL
    batch = host.to("cuda:0")  # <- copy
    out = emb(batch.long() % 256)
"""


def test_host_memory_written_outside_torch_is_no_repeat(script, dryrun_cli):
    status, report, err = dryrun_cli(script(FROMBUFFER.replace("REFILL", "stream.readinto(buf)")), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), report["findings"]
    s = script(
        FROMBUFFER.replace(
            "torch.frombuffer(buf, dtype=torch.int32)", "torch.ones(64 * 256, dtype=torch.int32)"
        ).replace("REFILL", "pass")
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP011", s.line("copy")) in codes_at(report), report["findings"]


# Per-sample gradients (DP-SGD) with vmap(grad(...)) read the batch on cuda:0; it then goes on to cuda:1.
VMAP = """
import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap

a = nn.Linear(256, 1).to("cuda:0")
b = nn.Linear(256, 1).to("cuda:1")
params = {k: v.detach() for k, v in a.named_parameters()}


def sample_loss(p, x):
    return functional_call(a, p, (x.unsqueeze(0),)).pow(2).sum()


for step in range(2):
    x0 = torch.randn(128, 256).to("cuda:0")
    READ
    x1 = x0.to("cuda:1")  # <- detour
    out = b(x1)
"""


def test_a_tensor_read_inside_torch_func_transforms_is_no_detour(script, dryrun_cli):
    read = "per_sample = vmap(grad(sample_loss), in_dims=(None, 0))(params, x0)"
    status, report, err = dryrun_cli(script(VMAP.replace("READ", read)), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), report["findings"]
    s = script(VMAP.replace("READ", "pass"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert ("MP005", s.line("detour")) in codes_at(report), report["findings"]


def test_the_transforms_and_host_wrappers_are_restored_after_the_run(script, dryrun_cli):
    import torch
    import torch.func

    before = (torch.func.vmap, torch.vmap, torch.func.grad, torch.func.functional_call, torch.frombuffer)
    dryrun_cli(script(VMAP.replace("READ", "pass")), "--gpus", "2")
    assert (torch.func.vmap, torch.vmap, torch.func.grad, torch.func.functional_call, torch.frombuffer) == before
