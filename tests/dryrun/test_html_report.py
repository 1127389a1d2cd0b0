"""The HTML report (issue 13): its data model alone, then the page of a split model run on
virtual GPUs (`--html`, `html=`, `write_html`). The page in a real browser: tests/browser/."""

import json
import re

import pytest

from mpcheck.runtime.checks.html.model import page_data
from mpcheck.runtime.checks.html.placement import ModuleRow
from mpcheck.runtime.checks.html.render import render
from mpcheck.runtime.commands.dryrun import main

SPLIT = """
import torch
import torch.nn as nn

class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.stage0 = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32)).to("cuda:0")
        self.stage1 = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)).to("cuda:1")

    def forward(self, x):
        h = self.stage0(x.to("cuda:0"))
        return self.stage1(h.to("cuda:1"))

def main():
    model = Split()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        out = model(torch.randn(8, 16))
        labels = torch.randint(4, (8,)).to("cuda:0")
        loss = nn.functional.cross_entropy(out, labels)  # <- loss
        loss.backward()
        opt.step()
        opt.zero_grad()

main()
"""


def _rows(spec):
    return [ModuleRow(path, typ, tuple(devs), nbytes) for path, typ, devs, nbytes in spec]


def test_lanes_hold_the_top_most_modules_wholly_on_one_device():
    rows = _rows(
        [
            ("model", "Net", [], 0),
            ("model.embed", "Embedding", ["cuda:0"], 1000),
            ("model.blocks", "ModuleList", [], 0),
            *[(f"model.blocks.{i}", "Block", [], 0) for i in range(6)],
            *[(f"model.blocks.{i}.fc", "Linear", ["cuda:0" if i < 3 else "cuda:1"], 100) for i in range(6)],
            *[(f"model.blocks.{i}.act", "GELU", [], 0) for i in range(6)],
            ("model.head", "Linear", ["cuda:1"], 500),
        ]
    )
    data = page_data({"findings": [], "transfers": {}, "memory": {}}, rows)
    lanes = {d["name"]: d for d in data["devices"]}
    assert list(lanes) == ["cuda:0", "cuda:1"]
    first = lanes["cuda:0"]["modules"]
    # blocks 0..2 (one type, consecutive) fold into one group; the embedding stands alone
    assert [n["path"] for n in first] == ["model.embed", "model.blocks.0-2"]
    group = first[1]
    assert group["type"] == "3 x Block" and group["bytes"] == 300
    assert [c["path"] for c in group["children"]] == ["model.blocks.0", "model.blocks.1", "model.blocks.2"]
    assert [c["path"] for c in group["children"][0]["children"]] == ["model.blocks.0.fc", "model.blocks.0.act"]
    assert lanes["cuda:0"]["param_bytes"] == 1300 and lanes["cuda:1"]["param_bytes"] == 800
    assert "model" not in json.dumps(lanes["cuda:1"]["modules"]).replace("model.", "")  # the spread root is not drawn


def test_findings_are_pinned_on_their_module_and_crossings_widen_with_bytes():
    rows = _rows([("m", "Net", [], 0), ("m.a", "Linear", ["cuda:0"], 10), ("m.b", "Linear", ["cuda:1"], 10)])
    finding = {
        "code": "MP001",
        "name": "missing-transfer",
        "severity": "error",
        "message": "input on cuda:0",
        "path": "train.py",
        "line": 7,
        "modules": ["m.b"],
        "devices": ["cuda:1", "cuda:0"],
        "suggestion": "move it with .to('cuda:1')",
    }
    pairs = [
        {"src": "cuda:0", "dst": "cuda:1", "phase": "forward", "count": 2, "bytes": 4000, "time_ms": 0.5},
        {"src": "cuda:1", "dst": "cuda:0", "phase": "backward", "count": 2, "bytes": 1000, "time_ms": None},
    ]
    data = page_data({"findings": [finding], "transfers": {"by_pair": pairs, "steps": 2}, "memory": {}}, rows)
    (f,) = data["findings"]
    assert (f["lane"], f["node"], f["site"], f["fix"]) == ("cuda:1", "m.b", "train.py:7", "move it with .to('cuda:1')")
    assert data["devices"][1]["findings"] == [f["id"]]
    wide, narrow = data["crossings"]
    assert wide["width"] == 12.0 and 1.5 < narrow["width"] < wide["width"]
    page = render(data)
    assert 'href="#finding-1"' in page and 'id="finding-1"' in page
    assert "cuda:0 to cuda:1, forward: 2 transfers, 4.0 KB, 500 us" in page  # the arc's aria-label
    assert "no time" in page  # an untimed crossing says so


def test_a_7b_sized_model_stays_a_few_hundred_kb():
    """A Llama-7B's module tree (32 layers of 11 modules) over 4 GPUs, with a full timeline."""
    spec = [("model", "Llama", [], 0), ("model.embed", "Embedding", ["cuda:0"], 262_144_000)]
    for i in range(32):
        dev = [f"cuda:{i // 8}"]
        spec.append((f"model.layers.{i}", "DecoderLayer", [], 0))
        for sub in ("q_proj", "k_proj", "v_proj", "o_proj"):
            spec.append((f"model.layers.{i}.attn.{sub}", "Linear", dev, 33_554_432))
        spec.append((f"model.layers.{i}.attn", "Attention", [], 0))
        spec.append((f"model.layers.{i}.mlp", "MLP", [], 0))
        for sub in ("gate", "up", "down"):
            spec.append((f"model.layers.{i}.mlp.{sub}", "Linear", dev, 90_177_536))
        spec.append((f"model.layers.{i}.norm1", "RMSNorm", dev, 8192))
        spec.append((f"model.layers.{i}.norm2", "RMSNorm", dev, 8192))
    events = [
        {
            "src": f"cuda:{k % 3}",
            "dst": f"cuda:{k % 3 + 1}",
            "phase": "forward",
            "bytes": 33_554_432,
            "ts_s": k * 1e-3,
            "dur_ms": 0.1,
            "step": k // 6,
            "module": f"model.layers.{8 * (k % 3 + 1)}",
            "site": "train.py:40",
        }
        for k in range(200_000)
    ]
    data = page_data({"findings": [], "transfers": {}, "memory": {}}, _rows(spec), events=events)
    page = render(data)
    assert len(page.encode()) < 400_000
    assert data["timeline"]["dropped"] > 0
    assert sum(d["module_count"] for d in data["devices"]) == len(spec) - 1  # every module but the spread root


def test_eight_devices_each_get_a_lane_and_neighbouring_labels_do_not_stack():
    """A pipeline over 8 GPUs: 8 lanes side by side, each hop's arc at the same height (their labels
    do not overlap), the forward arcs above the line and the backward ones below."""
    rows = _rows([("m", "Net", [], 0)] + [(f"m.stage{i}", "Linear", [f"cuda:{i}"], 64) for i in range(8)])
    pairs = [
        {"src": f"cuda:{i}", "dst": f"cuda:{i + 1}", "phase": ph, "count": 1, "bytes": 100, "time_ms": 0.1}
        for i in range(7)
        for ph in ("forward", "backward")
    ]
    data = page_data({"findings": [], "transfers": {"by_pair": pairs, "steps": 1}, "memory": {}}, rows)
    page = render(data)
    assert [d["name"] for d in data["devices"]] == [f"cuda:{i}" for i in range(8)]
    assert page.count('class="lane"') == 8 and 'class="band" width="2080"' in page
    apexes = re.findall(r'<g class="crossing fwd".*?<text x="[^"]+" y="([^"]+)"', page)
    assert len(apexes) == 7 and len(set(apexes)) == 1


def _modules_in(page):
    return set(re.findall(r'data-path="([^"]+)"', page))


def test_dryrun_html_option_writes_one_self_contained_page(script, tmp_path, capsys):
    s = script(SPLIT)
    html = tmp_path / "report.html"
    status = main(["--gpus", "2", "--html", str(html), str(s.path)])
    capsys.readouterr()
    assert status == 1  # MP008: the labels on cuda:0, the logits on cuda:1
    page = html.read_text()
    # self-contained: no file or address is loaded from elsewhere
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|https?://", page)
    assert page.count("<style>") == 1 and "<script>" in page
    for dev in ("cuda:0", "cuda:1"):
        assert f'id="lane-{dev}"' in page
    assert {"model.stage0", "model.stage0.0", "model.stage1", "model.stage1.2"} <= _modules_in(page)
    assert f"train.py:{s.line('loss')}" in page and "MP008" in page
    assert "cuda:0 to cuda:1, forward" in page and "cuda:1 to cuda:0, backward" in page
    assert "memory estimate" in page
    assert "Transfers on a timeline" in page and "No transfer times were kept" not in page


def test_write_html_after_the_dry_run_and_the_placement_of_a_model_given(tmp_path):
    import torch
    import torch.nn as nn

    import mpcheck

    with mpcheck.dryrun(2, report=None) as dr:
        a = nn.Linear(8, 8).to("cuda:0")
        b = nn.Linear(8, 8).to("cuda:1")
        b(a(torch.randn(2, 8, device="cuda:0")).to("cuda:1")).sum().backward()
    path = tmp_path / "late.html"
    dr.write_html(str(path))
    page = path.read_text()
    assert {"a", "b"} <= _modules_in(page)  # roots named after the variables that hold them
    assert "cuda:0 to cuda:1, forward: 1 transfers" in page
    # no html= at the start: no transfer was kept for the timeline, and the page says why
    assert "No transfer times were kept" in page


def test_no_html_before_the_run(tmp_path):
    import mpcheck

    with pytest.raises(RuntimeError, match="no report before the run"):
        mpcheck.dryrun(2, report=None).write_html(str(tmp_path / "x.html"))
