"""Another file's helper run with the importer's arguments (summary._inlined, summarized.call_inlined), a
class of another file split by its constructor's arguments (summary 'parts'), a device property and the
first parameter of a split instance across files."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze, summarize

ALL = frozenset(c.code for c in codes.CODES)

HELPERS = textwrap.dedent(
    """\
    import torch

    def stage_device(k):
        return f"cuda:{k % 2}"

    def move_all(batch, device):
        return [t.to(device) for t in batch]

    def hop(x, k):
        return [x.to(f"cuda:{k % 2}")]

    @torch.no_grad()
    def decorated(batch, device):
        return [t.to(device) for t in batch]

    def reads_default(batch, device=torch.device("cuda:1")):
        return [t.to(device) for t in batch]
    """
)


def _summary():
    return summarize("helpers.py", HELPERS, "helpers")


def test_a_short_helper_of_unknown_result_carries_its_text_and_a_decorated_one_or_one_with_a_name_in_a_default_not():
    s = _summary()["functions"]
    assert s["stage_device"]["source"].startswith("def stage_device(k):")
    assert s["move_all"]["free"] == {}
    assert "source" not in s["decorated"] and "source" not in s["reads_default"]


def test_the_importer_runs_the_helper_with_its_arguments():
    src = textwrap.dedent(
        """\
        import torch
        import torch.nn as nn
        from helpers import move_all, stage_device

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(4, 4).to(stage_device(0))
                self.b = nn.Linear(4, 2).to(stage_device(1))

            def forward(self, x):
                return self.b(self.a(x.to("cuda:0")).to("cuda:1"))

        def train(loader):
            net = Net()
            for batch in loader:
                x, y = move_all(batch, "cuda:0")
                loss = nn.functional.mse_loss(net(x), y)
        """
    )
    r = analyze("train.py", src, ALL, "train", {"helpers": _summary()})
    assert [(f.line, f.code) for f in r.findings] == [(18, "MP008")]
    r = analyze(
        "train.py",
        src.replace('move_all(batch, "cuda:0")', 'move_all(batch, "cuda:1")'),
        ALL,
        "train",
        {"helpers": _summary()},
    )
    assert r.findings == []


def test_a_helper_that_moves_an_activation_gives_its_device_and_no_step_of_the_other_file():
    # Its steps would name lines of the other file (MP006's chains): dropped, the result off any chain.
    src = textwrap.dedent(
        """\
        import torch.nn as nn
        from helpers import hop

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(4, 4).to("cuda:0")

            def forward(self, x):
                h = self.a(x.to("cuda:0"))
                (p,) = hop(h, 1)
                return p + h
        """
    )
    r = analyze("net.py", src, ALL, "net", {"helpers": _summary()})
    assert [(f.line, f.code) for f in r.findings] == [(12, "MP001")]
    loop = src.replace(
        "(p,) = hop(h, 1)\n        return p + h", "for k in range(6):\n            (h,) = hop(h, k)\n        return h"
    )
    assert "for k in range(6)" in loop
    assert analyze("net.py", loop, ALL, "net", {"helpers": _summary()}).findings == []


def test_parts_placed_on_constructor_arguments_are_a_split_where_the_arguments_differ():
    model = textwrap.dedent(
        """\
        import torch.nn as nn

        class Two(nn.Module):
            def __init__(self, d0, d1):
                super().__init__()
                self.a = nn.Linear(4, 4).to(d0)
                self.b = nn.Linear(4, 4).to(d1)

            def forward(self, x):
                return self.b(self.a(x.to(self.a.weight.device)).to(self.b.weight.device))
        """
    )
    project = {"model": summarize("model.py", model, "model")}
    assert project["model"]["classes"]["Two"]["split"] is None
    src = 'import torch.nn as nn\nfrom model import Two\nnet = nn.DataParallel(Two("cuda:0", "cuda:1"))\n'
    assert [(f.line, f.code) for f in analyze("main.py", src, ALL, "main", project).findings] == [(3, "MP002")]
    same = src.replace('Two("cuda:0", "cuda:1")', 'Two("cuda:0", "cuda:0")')
    assert analyze("main.py", same, ALL, "main", project).findings == []


def test_a_device_property_and_the_first_parameter_of_a_split_class_of_another_file():
    model = textwrap.dedent(
        """\
        import torch.nn as nn

        class Split(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(4, 4).to("cuda:0")
                self.b = nn.Linear(4, 1).to("cuda:1")

            @property
            def device(self):
                return next(self.parameters()).device

            def forward(self, x):
                return self.b(self.a(x).to("cuda:1"))
        """
    )
    s = summarize("model.py", model, "model")["classes"]["Split"]
    assert s["attrs"] == {"device": {"device": "cuda:0"}} and s["first"] == "cuda:0"


def test_another_files_generator_gives_what_it_yields_in_order():
    helpers = textwrap.dedent(
        """\
        import torch.nn as nn

        def placed(blocks, devices):
            for i, block in enumerate(blocks):
                yield block.to(devices[i % len(devices)])
        """
    )
    src = textwrap.dedent(
        """\
        import torch
        import torch.nn as nn
        from helpers import placed

        class Net(nn.Module):
            def __init__(self, devices):
                super().__init__()
                self.blocks = nn.ModuleList(placed([nn.Linear(4, 4) for _ in range(4)], devices))

            def forward(self, x):
                for block in self.blocks:
                    x = block(x.to("cuda:0"))
                return x

        Net(["cuda:0", "cuda:1"])(torch.randn(2, 4))
        """
    )
    summary = summarize("helpers.py", helpers, "helpers")
    assert summary["functions"]["placed"]["source"].startswith("def placed(blocks, devices):")
    r = analyze("train.py", src, ALL, "train", {"helpers": summary})
    assert [(f.line, f.code) for f in r.findings] == [(12, "MP001")]
    assert "cuda:1" in r.findings[0].message
    r = analyze(
        "train.py", src.replace('["cuda:0", "cuda:1"]', '["cuda:0", "cuda:0"]'), ALL, "train", {"helpers": summary}
    )
    assert r.findings == []
