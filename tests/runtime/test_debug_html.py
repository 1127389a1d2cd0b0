"""`mpcheck.debug(html=...)`: the debug mode's HTML page (the dry run's: tests/dryrun/test_html_report.py),
on labelled CPU tensors standing in for two GPUs."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mpcheck  # noqa: E402


def test_debug_writes_the_page_with_the_model_placed_and_its_memory(labels, tmp_path):
    stage0, stage1 = nn.Linear(8, 8), nn.Linear(8, 4)
    for p in stage0.parameters():
        labels.label(p, "cuda:0")
    for p in stage1.parameters():
        labels.label(p, "cuda:1")
    path = tmp_path / "debug.html"
    with mpcheck.debug(html=str(path), report=None, devices=labels):
        stage0(labels.label(torch.randn(2, 8), "cuda:0"))
        stage1(labels.label(torch.randn(2, 8), "cuda:1")).sum().backward()
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "mpcheck runtime report" in page
    assert 'id="lane-cuda:0"' in page and 'id="lane-cuda:1"' in page
    assert 'data-path="stage0"' in page and 'data-path="stage1"' in page
    # the debug mode's memory: parameters read from the model (no capacity without real GPUs)
    assert "memory peak" in page and "capacity unknown" in page
    assert "No device findings." in page
