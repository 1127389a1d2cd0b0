"""Session 39: signal windows made on the host (`torch.hann_window`) as buffers of a loss module, and a trained
parameter of spelled-out small size (`nn.Parameter(torch.full((ACT,), -0.5))`, ACT a constant of the module)
copied next to its use on every forward (MP011 leaves it: one launch)."""

from __future__ import annotations

from lint_helpers import findings, lines

# ----------------------------------------------------------------- windows registered as buffers

STFT_LOSS = """
import torch
import torch.nn as nn


class STFTLoss(nn.Module):
    def __init__(self, resolutions=((512, 128), (256, 64))):
        super().__init__()
        self.resolutions = resolutions
        for n_fft, _ in resolutions:
            self.register_buffer(f"win{n_fft}", torch.WINDOW(n_fft))

    def forward(self, y_hat, y):
        loss = 0.0
        for n_fft, hop in self.resolutions:
            win = getattr(self, f"win{n_fft}")
            s_hat = torch.stft(y_hat, n_fft, hop, window=win, return_complex=True).abs()
            s = torch.stft(y, n_fft, hop, window=win, return_complex=True).abs()
            loss = loss + (s - s_hat).abs().mean()
        return loss


def main():
    crit = STFTLoss().to("cuda:0")
    y_hat = torch.randn(2, 4096, device="cuda:1")
    return crit(y_hat, torch.randn(2, 4096).to(y_hat.device))


main()
"""


def test_a_loss_whose_window_buffers_are_on_another_gpu_than_the_signal():
    for window in ("hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"):
        found = findings(STFT_LOSS.replace("WINDOW", window), "MP001")
        assert [f.line for f in found] == [26], window
        assert "cuda:1" in found[0].message and "cuda:0" in found[0].message


def test_the_loss_moved_next_to_the_signal_is_clean():
    assert findings(STFT_LOSS.replace("WINDOW", "hann_window").replace('.to("cuda:0")', '.to("cuda:1")')) == []


def test_a_window_made_on_the_signals_gpu_in_forward_is_clean():
    src = STFT_LOSS.replace("WINDOW", "hann_window").replace(
        'win = getattr(self, f"win{n_fft}")', "win = torch.hann_window(n_fft, device=y.device)"
    )
    assert findings(src) == []


# ----------------------------------------------------------------- a small trained parameter moved to its use

POLICY = """
import torch
import torch.nn as nn
from torch.distributions import Normal

OBS, ACT = 12, SIZE


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(OBS, 64)
        self.mu = nn.Linear(64, ACT)
        self.log_std = nn.Parameter(torch.full((ACT,), -0.5))

    def place(self, a, b):
        self.to(a)
        self.mu.to(b)
        self.out_dev = torch.device(b)
        return self

    def forward(self, obs):
        h = self.encoder(obs).to(self.out_dev)
        mu = self.mu(h)
        return Normal(mu, self.log_std.exp().to(mu.device))


policy = Policy().place("cuda:0", "cuda:1")
dist = policy(torch.randn(4, OBS, device="cuda:0"))
"""


def test_a_small_parameter_of_constant_size_copied_each_forward_is_one_launch():
    assert findings(POLICY.replace("SIZE", "3"), "MP011") == []


def test_a_large_parameter_copied_each_forward_stays_reported():
    # 64 Ki floats (256 KiB): over the threshold, copied over and its gradient back on every step.
    found = findings(POLICY.replace("SIZE", "65536"), "MP011")
    assert [f.line for f in found] == [25]


def test_a_constant_bound_twice_at_the_top_level_is_no_spelled_out_size():
    src = POLICY.replace("SIZE", "3").replace("\n\nclass Policy", "\nif OBS > 8:\n    ACT = 65536\n\n\nclass Policy")
    assert [f.line for f in findings(src, "MP011")] == [28]


# ----------------------------------------------------------------- a copy made twice once per run

EVAL_TWICE = """
import torch
import torch.nn as nn


def main():
    model = nn.Linear(64, 64).to("cuda:1")
    xq, yq = torch.randn(4096, 64), torch.randn(4096, 64)
    before = ((model(xq.to("cuda:1")) - yq.to("cuda:1")) ** 2).mean()
    after = ((model(xq.to("cuda:1") * 2) - yq.to("cuda:1")) ** 2).mean()
    return before, after


CALL
"""


def test_a_copy_made_twice_in_code_that_runs_once_is_no_repeat():
    assert findings(EVAL_TWICE.replace("CALL", 'if __name__ == "__main__":\n    main()'), "MP011") == []


def test_the_same_copies_in_a_function_called_in_a_loop_are_repeats():
    src = EVAL_TWICE.replace("CALL", "for _ in range(10):\n    main()")
    assert sorted(set(lines(src, "MP011"))) == [10]


# ----------------------------------------------------------------- a submodule of a model loaded whole

LOADED = """
import torch
import torch.nn as nn


def place(model, plan):
    for name, gpu in plan.items():
        module = model.get_submodule(name)
        module.to(torch.device("cuda", gpu))
    return model


model = place(torch.load("gpt.pt", map_location="cuda:0", weights_only=False), {"h.0": 0, "h.1": 1})
"""


def test_a_submodule_of_a_model_loaded_whole_is_a_module_moved_in_place():
    assert findings(LOADED, "MP001") == []


# ----------------------------------------------------------------- set_device, then a stage built on it

STAGES = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, gpus):
        super().__init__()
        self.stages = nn.ModuleList()
        for i, gpu in enumerate(gpus):
            BODY
        self.head = nn.Linear(8, 2).to(f"cuda:{gpus[-1]}")

    def forward(self, x):
        for stage in self.stages:
            x = stage(x.to(next(stage.parameters()).device))
        return self.head(x)


net = Net([0, 1])
"""


def test_a_stage_built_index_less_right_after_set_device_in_its_block_is_what_was_set():
    body = "torch.cuda.set_device(gpu)\n            self.stages.append(nn.Linear(8, 8).cuda())"
    assert findings(STAGES.replace("BODY", body), "MP004") == []


def test_a_set_device_of_an_outer_block_leaves_the_stages_index_less_placement_reported():
    src = (
        STAGES.replace("BODY", "self.stages.append(nn.Linear(8, 8).cuda())")
        .replace(
            "        self.stages = nn.ModuleList()",
            "        self.stages = nn.ModuleList()\n        torch.cuda.set_device(1)",
        )
        .replace('.to(f"cuda:{gpus[-1]}")', '.to("cuda:0")')
    )
    assert lines(src, "MP004") == [12]
