"""A program stopped by PyTorch's own refusal of tensors on different devices, raised where no check looks
(a library's test in Python: parameters_to_vector over a split model), is MP001 at the user's line, with the
devices the library held; the checks' own findings are not repeated, and other crashes add nothing."""

import pytest
from dryrun_helpers import codes_at

import mpcheck

PARAMETERS_TO_VECTOR = """
import torch
import torch.nn as nn
from torch.nn.utils import parameters_to_vector

m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
m[0].to("cuda:0")
m[2].to("cuda:1")
out = m[2](m[1](m[0](torch.randn(5, 4, device="cuda:0"))).to("cuda:1"))
out.sum().backward()
flat = parameters_to_vector(m.parameters())  # <- stops
"""


@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_parameters_to_vector_over_a_split_model_is_mp001_at_the_call(script, dryrun_cli, backing):
    s = script(PARAMETERS_TO_VECTOR)
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", backing)
    assert status == 1
    assert report["stopped"].endswith(
        "TypeError: Found two parameters on different devices, this is currently not supported."
    )
    assert codes_at(report) == [("MP001", s.line("stops"))]
    f = report["findings"][0]
    assert f["severity"] == "error"
    assert sorted(f["devices"]) == ["cuda:0", "cuda:1"]  # what the library held: not in its message
    assert "Found two parameters on different devices" in f["message"]
    assert "group them by `p.device`" in f["suggestion"]


def test_a_flattening_per_device_runs_clean(script, dryrun_cli):
    s = script(
        PARAMETERS_TO_VECTOR.replace(
            "flat = parameters_to_vector(m.parameters())  # <- stops",
            "flat = [parameters_to_vector(p for p in m.parameters() if p.device == torch.device(d)) for d in ('cuda:0', 'cuda:1')]",
        )
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["stopped"], report["findings"]) == (0, None, [])


def test_a_crash_that_is_not_about_devices_adds_nothing(script, dryrun_cli):
    s = script(
        PARAMETERS_TO_VECTOR.replace(
            "flat = parameters_to_vector(m.parameters())  # <- stops", "flat = out.view(7, 3)  # <- stops"
        )
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1 and "RuntimeError" in report["stopped"]
    assert report["findings"] == []


def test_a_mismatch_the_checks_saw_is_not_reported_twice(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn

a = nn.Linear(4, 4).to("cuda:0")
b = nn.Linear(4, 4).to("cuda:1")
y = b(a(torch.randn(2, 4, device="cuda:0")))  # <- use
""")
    status, report, err = dryrun_cli(s, "--gpus", "2", "--on-mismatch", "raise")
    assert status == 1 and report["stopped"] is not None
    assert codes_at(report) == [("MP001", s.line("use"))]


def test_debug_mode_names_the_line_where_pytorch_refused_mixed_devices():
    # What a real GPU raises from an op the checks did not see (a call made after its signature was
    # checked, down a branch taken only now): the devices come from PyTorch's message.
    with pytest.raises(RuntimeError):
        with mpcheck.debug(report=None) as dbg:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
            )
    [f] = dbg.findings
    assert (f.code, f.devices, f.severity) == ("MP001", ("cuda:0", "cpu"), "error")
    assert f.path.endswith("test_stopped_on_device_error.py") and f.line == _line_of("raise RuntimeError(")
    with pytest.raises(KeyError):
        with mpcheck.debug(report=None) as dbg:
            raise KeyError("same device")  # a lookup that failed, whatever its key says: not PyTorch's refusal
    assert dbg.findings == []


def _line_of(text):
    import inspect

    lines, start = inspect.getsourcelines(test_debug_mode_names_the_line_where_pytorch_refused_mixed_devices)
    return start + next(i for i, line in enumerate(lines) if text in line)  # start: the line of `def`, lines[0]


def test_mpcheck_run_names_the_line_where_pytorch_refused_mixed_devices(monkeypatch, tmp_path, capsys):
    import json

    from mpcheck.runtime.commands import run as run_command

    monkeypatch.setattr(run_command, "cuda_available", lambda: True)
    out = tmp_path / "report.json"
    program = "raise RuntimeError('Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0!')"
    assert run_command.main(["--output-format", "json", "-o", str(out), "-c", program]) == 1
    [f] = json.loads(out.read_text())["findings"]
    assert (f["code"], f["line"], f["devices"]) == ("MP001", 1, ["cuda:1", "cuda:0"])
    assert "PyTorch stopped the program here" in f["message"]


LBFGS_OVER_TWO_GPUS = """
import torch
import torch.nn as nn

a = nn.Linear(4, 4).to("cuda:0")
b = nn.Linear(4, 2).to("cuda:1")
opt = torch.optim.LBFGS([*a.parameters(), *b.parameters()])


def closure():
    opt.zero_grad()
    loss = b(a(torch.randn(3, 4, device="cuda:0")).to("cuda:1")).pow(2).mean()
    loss.backward()
    return loss


opt.step(closure)  # <- stops
"""


def test_a_library_step_that_mixes_devices_is_mp001_at_the_call(script, dryrun_cli):
    # LBFGS concatenates every gradient in its step. A step given a closure runs inside the checking mode (the
    # closure is the user's forward), so the mode reports the concatenation, at the user's line
    s = script(LBFGS_OVER_TWO_GPUS)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert codes_at(report) == [("MP001", s.line("stops"))], err
    assert report["findings"][0]["message"].startswith("torch.cat:")


CPU_SCALARS = """
import torch
import torch.nn.functional as F

x = torch.randn(5, 3, device="cuda:1")
s = torch.tensor(0.5)
taken = x + s, torch.where(x > 0, x, s), x.pow(s), torch.lerp(x, x, s), x.clone().masked_fill_(x > 0, s)
CALL  # <- stops
"""


@pytest.mark.parametrize(
    "call",
    [
        "x.clamp(min=s)",
        "F.mse_loss(x.sum(), torch.tensor(1.0))",
        'F.linear(x, torch.ones(3, 3, device="cuda:1"), torch.tensor(0.0))',
        'torch.addmm(s, x, torch.ones(3, 3, device="cuda:1"))',
    ],
)
@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_kernels_that_refuse_a_0_dim_cpu_tensor_stop_with_mp001(script, dryrun_cli, call, backing):
    # Most ops take a 0-dim CPU tensor as a scalar next to CUDA tensors (the line before runs); these CUDA
    # kernels refuse it (each seen raising on an H200)
    s = script(CPU_SCALARS.replace("CALL", f"out = {call}"))
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", backing)
    assert status == 1 and "0-dim CPU tensor" in report["stopped"]
    assert codes_at(report) == [("MP001", s.line("stops"))]


def test_a_0_dim_cpu_tensor_where_cuda_takes_it_runs_clean(script, dryrun_cli):
    s = script(CPU_SCALARS.replace("CALL", "out = F.l1_loss(x.sum(), torch.tensor(1.0)) + x.clamp(min=0.5).sum()"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"], report["stopped"]) == (0, [], None)
