"""MP014 at run time for a module that copies its own weights to its input's GPU (checks/weights_to_input.py): a
capsule layer placed on one GPU but handed its input on the other, whose forward moves its transformation weights
to the input, is reported at the weights' move; the input moved to the layer is clean, and so are a small weight
moved defensively (a temperature: the input is the larger side) and a weight of another module (a tied one)."""

CAPSULES = """
import torch
import torch.nn as nn


class Digits(nn.Module):
    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(0.05 * torch.randn(576, 10, 16, 8))

    def forward(self, u):
        return torch.einsum("bni,njdi->bnjd", u, self.W.to(u.device)).sum(1)  # <- weights


features = nn.Linear(8, 8).to("cuda:0")
digits = Digits().to("cuda:1")
for step in range(2):
    u = features(torch.randn(4, 576, 8, device="cuda:0"))
    v = digits(INPUT)  # <- call
    v.to("cuda:1").square().sum().backward()
print("done")
"""


def test_a_module_copying_its_weights_to_its_input_is_mp014_at_the_move(script, dryrun_cli):
    s = script(CAPSULES.replace("INPUT", "u"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    (f,) = report["findings"]
    assert (f["code"], f["line"], f["extra"]["scope"]) == ("MP014", s.line("weights"), "weights")
    assert f["devices"] == ["cuda:1", "cuda:0"] and f["modules"] == ["digits"]
    assert f["extra"]["weight_bytes"] == 576 * 10 * 16 * 8 * 4 and f["extra"]["input_bytes"] == 4 * 576 * 8 * 4
    assert f"train.py:{s.line('call')}" in f["message"] and "x.to('cuda:1')" in f["suggestion"]


def test_the_input_moved_to_the_module_is_clean(script, dryrun_cli):
    status, report, err = dryrun_cli(script(CAPSULES.replace("INPUT", 'u.to("cuda:1")')), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_a_small_weight_moved_to_a_large_input_or_another_modules_weight_is_not_reported(script, dryrun_cli):
    s = script(
        """
        import torch
        import torch.nn as nn


        class Scaled(nn.Module):
            def __init__(self):
                super().__init__()
                self.temperature = nn.Parameter(torch.ones(1))

            def forward(self, logits):
                return logits / self.temperature.to(logits.device)


        class TiedHead(nn.Module):
            def __init__(self, embed):
                super().__init__()
                self.embed = [embed]  # not a submodule: the weight is the embedding's
                self.bias = nn.Parameter(torch.zeros(1000))

            def forward(self, h):
                w = self.embed[0].weight.to(h.device)
                return h @ w.t() + self.bias.to(h.device)


        scale = Scaled().to("cuda:1")
        embed = nn.Embedding(1000, 64).to("cuda:1")
        head = TiedHead(embed).to("cuda:1")
        for step in range(2):
            x = torch.randn(64, 1000, device="cuda:0", requires_grad=True)
            scale(x).sum().backward()
            h = torch.randn(8, 64, device="cuda:0", requires_grad=True)
            head(h).sum().backward()
        print("done")
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
