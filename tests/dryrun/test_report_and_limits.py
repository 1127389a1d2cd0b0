"""The dry run's report (memory estimate, link model, formats, exit status) and its limits."""

import json

import pytest

from mpcheck.runtime.commands.dryrun import main
from mpcheck.runtime.virtual.links import PRESETS, parse_bytes, parse_link


@pytest.mark.parametrize(
    "expr, what",
    [("loss.item() > 0", "`.item()`"), ("loss.tolist()", "`.tolist()`"), ("bool(loss > 0)", "`bool(tensor)`")],
)
def test_meta_backing_stops_where_a_value_is_needed(script, dryrun_cli, expr, what):
    s = script(f"""
import torch
import torch.nn as nn
net = nn.Linear(32, 1).to("cuda:1")
loss = net(torch.randn(4, 32).to("cuda:1")).mean()
if {expr}:  # <- value
    print("positive")
print("not reached")
""")
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", "meta")
    assert status == 1
    assert f"train.py:{s.line('value')}: {what}" in report["stopped"]
    assert "--backing cpu" in report["stopped"]
    assert "Traceback" not in err and "not reached" not in err
    assert report["memory"]["cuda:1"]["params"] == 33 * 4  # the report still comes


def test_memory_estimate_of_a_known_model_and_the_fit_check(script, dryrun_cli):
    s = script("""
import torch
import torch.nn as nn
a = nn.Linear(1024, 1024, bias=False).to("cuda:0")   # 4 MiB
b = nn.Linear(1024, 1024, bias=False).to("cuda:1")   # 4 MiB
opt = torch.optim.AdamW(list(a.parameters()) + list(b.parameters()))
x = torch.randn(256, 1024)                           # 1 MiB
loss = b(a(x.to("cuda:0")).to("cuda:1")).sum()
loss.backward()
opt.step()
""")
    status, report, _ = dryrun_cli(s, "--gpus", "2", "--backing", "meta", "--device-memory", "52MiB")
    mib = 2**20
    m0, m1 = report["memory"]["cuda:0"], report["memory"]["cuda:1"]
    # Each device peaks in the optimizer step, as a GPU's allocator would: parameters, gradients, AdamW's two
    # states and its foreach sqrt(exp_avg_sq) temporary (4 MiB each), plus cuBLAS's workspaces (32 + 1 MiB)
    # from the first matmul on; on cuda:1 also the loss (4 B, one 512-byte block). The forward's activations
    # (the input copies) are freed by then and are not added on top.
    assert (m0["params"], m0["grads"], m0["optimizer_state"]) == (4 * mib, 4 * mib, 8 * mib)
    assert (m1["params"], m1["grads"], m1["optimizer_state"]) == (4 * mib, 4 * mib, 8 * mib)
    assert m0["activations"] == 4 * mib + 33 * mib
    assert m1["activations"] == 4 * mib + 33 * mib + 512
    assert m0["total"] == m0["peak_allocated"] == 53 * mib
    assert m0["capacity"] == 52 * mib and m0["fits"] is False
    assert status == 1  # not a finding, but a dry run gates CI: a device that does not fit fails it
    status, report, _ = dryrun_cli(s, "--gpus", "2", "--backing", "meta", "--device-memory", "54MiB")
    assert [m["fits"] for m in report["memory"].values()] == [True, True] and status == 0


def test_the_help_states_the_exit_status(capsys):
    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "a virtual GPU's estimated memory does not fit in --device-memory" in out


def test_transfer_times_follow_the_chosen_link(script, dryrun_cli):
    s = script("""
import torch
x = torch.empty(25 * 10**6, dtype=torch.uint8)   # 25 MB
y = x.to("cuda:0").to("cuda:1")
""")
    _, report, _ = dryrun_cli(s, "--gpus", "2", "--backing", "meta", "--link", "pcie4")
    pair = [p for p in report["transfers"]["by_pair"] if p["src"] == "cuda:0"][0]
    assert pair["bytes"] == 25 * 10**6
    assert pair["time_ms"] == pytest.approx(0.021 + 25e6 / 25e9 * 1e3, rel=1e-6)  # 1.021 ms
    assert report["dryrun"]["link"]["name"] == "pcie4"


def test_link_presets_and_parsing():
    assert {k: v.gb_per_s for k, v in PRESETS.items()} == {"nvlink": 400.0, "pcie5": 50.0, "pcie4": 25.0}
    assert all(v.source for v in PRESETS.values())
    assert parse_link("100").gb_per_s == 100.0 and parse_link("64GB/s").gb_per_s == 64.0
    with pytest.raises(ValueError, match="unknown link"):
        parse_link("infiniband")
    assert parse_bytes("80GiB") == 80 * 2**30 and parse_bytes("141GB") == 141 * 10**9
    with pytest.raises(ValueError, match="memory size"):
        parse_bytes("lots")


def test_text_report_and_trace(tmp_path, script, capsys):
    s = script("""
import torch
h = torch.randn(64, 64).to("cuda:0")
h = (h @ h).to("cuda:1")
""")
    trace = tmp_path / "trace.json"
    status = main(["--gpus", "2", "--device-memory", "1KiB", "--color", "never", "--trace", str(trace), str(s.path)])
    err = capsys.readouterr().err
    assert status == 1  # 1 KiB is too small
    assert "mpcheck dry run: 2 virtual GPUs, cpu backing" in err
    assert "cuda:0 -> cuda:1" in err
    assert "NO:" in err  # 16 KiB on a 1 KiB device
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name", "").startswith("cuda:0 -> cuda:1") for e in events)


def test_command_line_errors(tmp_path, capsys):
    assert main(["--gpus", "2", str(tmp_path / "missing.py")]) == 2
    assert "missing.py" in capsys.readouterr().err
    assert main(["--link", "warp", "-c", "pass"]) == 2
    assert "unknown link" in capsys.readouterr().err
    assert main(["--gpus", "0", "-c", "pass"]) == 2


def test_abbreviated_options_keep_their_values(tmp_path, capsys):
    # argparse accepts `--gp 3` for `--gpus 3`: the value is the option's, not the program.
    out = tmp_path / "r.json"
    code = "import torch, sys; sys.exit(torch.cuda.device_count())"
    assert main(["--gp", "3", "--li", "pcie4", "--output-f", "json", "-o", str(out), "-c", code]) == 3
    report = json.loads(out.read_text())
    assert report["dryrun"]["gpus"] == 3 and report["dryrun"]["link"]["name"] == "pcie4"


def test_dash_c_program_and_its_status(capsys):
    code = "import torch, sys; x = torch.ones(1).cuda(); sys.exit(0 if x.is_cuda else 5)"
    assert main(["--gpus", "1", "--output-format", "json", "-c", code]) == 0


def test_nccl_runs_as_gloo_and_says_so(script, dryrun_cli):
    s = script("""
import torch.distributed as dist
dist.init_process_group("nccl", rank=0, world_size=1)  # <- nccl
print("backend", dist.get_backend())
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, report["stopped"]
    assert report["stopped"] is None
    [limit] = report["limits"]
    assert limit["site"].endswith(f"train.py:{s.line('nccl')}")
    assert "gloo" in limit["message"] and "NCCL" in limit["message"]


def test_a_cuda_only_kernel_is_a_clear_limit(script, dryrun_cli):
    s = script("""
import torch

@torch.library.custom_op("mpcheck_dryrun_test::fused", mutates_args=())
def fused(x: torch.Tensor) -> torch.Tensor:
    if not x.is_cuda:
        raise RuntimeError("fused: expected x.is_cuda() to be true (input must be a CUDA tensor)")
    return x.clone()

y = fused(torch.randn(4).to("cuda:0"))  # <- kernel
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1
    assert f"train.py:{s.line('kernel')}" in report["stopped"]
    assert "needs a real CUDA kernel" in report["stopped"]


def test_output_paths_are_those_of_the_launch_folder_when_the_program_changes_folder(
    tmp_path, script, capsys, monkeypatch
):
    (tmp_path / "elsewhere").mkdir()
    s = script("""
import os
import torch
os.chdir("elsewhere")
h = torch.randn(4).to("cuda:0").to("cuda:1")
""")
    monkeypatch.chdir(tmp_path)
    argv = ["--gpus", "2", "--output-format", "json", "-o", "report.json", "--trace", "trace.json", str(s.path)]
    assert main(argv) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "report.json").read_text())["transfers"]["total"]["count"] == 2
    assert "traceEvents" in json.loads((tmp_path / "trace.json").read_text())
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_cuda_graph_classes_stay_classes_and_stop_only_when_made(script, dryrun_cli):
    """transformers names torch.cuda.CUDAGraph in signatures at import (`CUDAGraph | None`): under the dry
    run it was a function, and the import failed (TypeError: unsupported operand type(s) for |)."""
    s = script("""
from typing import Optional
import torch

def capture(g: torch.cuda.CUDAGraph | None = None, ctx: Optional[torch.cuda.graph] = None) -> None:
    return None

x = torch.ones(2, device="cuda:1")
assert not isinstance(x, (torch.cuda.CUDAGraph, torch.cuda.graph))
g = torch.cuda.CUDAGraph()  # <- made
""")
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    assert status == 1
    assert (
        report["stopped"]
        == f"{s.path}:{s.line('made')}: CUDA graphs is beyond the dry run: they capture real CUDA kernels"
    )


def test_a_crash_is_in_the_report_with_its_line_notes_and_limits(script, dryrun_cli):
    s = script("""
import torch
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
end.record()
print(start.elapsed_time(end))  # <- timing
x = torch.ones(2, device="cuda:0")

def check(t):
    raise ValueError(f"bad batch on {t.device}")  # <- crash

check(x)
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 1 and "Traceback" in err  # the program's own traceback, as python prints it
    assert report["stopped"] == f"{s.path}:{s.line('crash')}: ValueError: bad batch on cuda:0"
    assert any("stopped before its end" in n for n in report["notes"])
    assert [lim["site"] for lim in report["limits"]] == [f"{s.path}:{s.line('timing')}"]


def test_a_crash_on_something_only_real_cuda_has_is_listed_as_a_limit(script, dryrun_cli):
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # An earlier test of this process (tests/gpu) started real CUDA: the legacy storage is made there.
        pytest.skip("real CUDA is live in this process")
    s = script("""
import torch
x = torch.ones(2, device="cuda:0")
buf = torch.cuda.FloatStorage(2)  # <- legacy
""")
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    site = f"{s.path}:{s.line('legacy')}"
    # A CPU build of torch refuses a legacy CUDA storage ("not compiled with CUDA"); a CUDA build (PyPI's
    # default, also on a machine with no GPU) reaches CUDA itself, which the dry run stops as beyond it.
    # Either way, at that line.
    assert status == 1 and report["stopped"].startswith(f"{site}: ")
    if "is beyond the dry run" in report["stopped"]:  # the stop says it is the dry run's limit
        return
    assert "Torch not compiled with CUDA enabled" in report["stopped"]
    (limit,) = report["limits"]
    assert limit["site"] == site and "not necessarily a bug in the program" in limit["message"]
