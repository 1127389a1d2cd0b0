"""Session 32: a helper that builds a new module on every call, called in one class's `__init__` (which splits its
copy) and again elsewhere (whose copy is moved whole), gives each caller its own modules."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str, code: str) -> list:
    """The findings of `code`, with the GPU counts the linter assumes by default."""
    return [f for f in analyze("t.py", textwrap.dedent(src), ALL, "m", {}, (2, 4, 8)).findings if f.code == code]


BUILT_TWICE = """
import torch
import torch.nn as nn


def build():
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))


class SplitRunner(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = build()
        for i, layer in enumerate(self.net):
            layer.to("cuda:0" if i < 2 else "cuda:1")


def main():
    model = build().to("cuda:0")
    for _ in range(3):
        model(torch.randn(4, 8, device="cuda:0"))
    runner = SplitRunner()
    LAST


if __name__ == "__main__":
    main()
"""


def test_a_helper_copy_split_in_an_init_is_not_the_copy_moved_whole_elsewhere():
    assert findings(BUILT_TWICE.replace("LAST", "pass"), "MP007") == []


def test_moving_the_split_copy_itself_is_still_reported():
    found = findings(BUILT_TWICE.replace("LAST", "runner.net.to('cuda:0')"), "MP007")
    assert [f.line for f in found] == [23]
