"""MP006 without a graph asks what the user's frame holds (pingpong_report._holds_on_device), through
`frame.f_locals`. Before Python 3.13 that is a dict cached on the frame, refreshed on each read and
holding the frame's tensors until the frame ends: mpcheck empties the snapshot its read made, so that it
keeps no tensor alive, but never one the program (or a debugger) holds, `saved = locals()`."""

import sys
import weakref

import pytest
import torch

from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.sites import Site

S1 = Site("train.py", 10, "forward")
S2 = Site("train.py", 20, "forward")


def _gone(labels, t):  # the labels hold storages: let a temporary go as the program would
    labels.labels.pop(id(t.untyped_storage()))


def test_a_locals_dict_the_program_keeps_is_left_whole(labels):
    ck = Checker(labels, on_mismatch="raise", select=["MP006"])
    saved = locals()  # the program's own: a dict it reads later
    names = set(saved)
    with torch.no_grad():
        h = labels.label(torch.randn(4), "cuda:0")
        y = labels.label(h.clone(), "cuda:1")
        ck.on_transfer(h, y, "cuda:0", "cuda:1", site=S1, module_path=None)
        _gone(labels, h)
        del h  # what left cuda:0 is gone: the way back asks what the frame holds there
        ck.note_reads((y,), {})
        r = labels.label(y * 2, "cuda:1")
        back = labels.label(r.clone(), "cuda:0")
        ck.on_transfer(r, back, "cuda:1", "cuda:0", site=S2, module_path=None)
    assert names <= set(saved)
    assert saved["ck"] is ck


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="3.13's f_locals is a view: no snapshot to hold tensors")
def test_the_snapshot_the_read_made_keeps_no_tensor_alive(labels):
    ck = Checker(labels, on_mismatch="raise", select=["MP006"])
    with torch.no_grad():
        h = labels.label(torch.randn(4), "cuda:0")
        y = labels.label(h.clone(), "cuda:1")
        ck.on_transfer(h, y, "cuda:0", "cuda:1", site=S1, module_path=None)
        _gone(labels, h)
        del h
        ck.note_reads((y,), {})
        r = labels.label(y * 2, "cuda:1")
        back = labels.label(r.clone(), "cuda:0")
        ck.on_transfer(r, back, "cuda:1", "cuda:0", site=S2, module_path=None)
        freed = weakref.ref(r)
        _gone(labels, r)
        del r
        assert freed() is None  # the frame's f_locals snapshot, made by mpcheck's read, does not hold it
