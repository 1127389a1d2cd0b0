"""MP001 for an optimizer whose state stayed where its parameters were when the state was made (by its
first step() or by load_state_dict()), after the model was moved (devices/optimizers.py)."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))

NET = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 8)
        self.dec = nn.Linear(8, 8)

    def place(self):
        self.enc.to("cuda:0")
        self.dec.to("cuda:1")
        return self

    def forward(self, x):
        return self.dec(self.enc(x.to("cuda:0")).to("cuda:1"))


"""


def findings(body: str) -> list:
    src = NET + textwrap.dedent(body)
    return [f for f in analyze("t.py", src, ALL, "m", {}).findings if f.code == "MP001"]


def step_lines(body: str) -> list[int]:
    """The lines, counted in `body`, of the MP001 findings."""
    offset = NET.count("\n")
    return sorted(f.line - offset for f in findings(body))


RESUME = """
def main(path, resume):
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ckpt = torch.load(path, map_location="cpu")
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    model.place()
    for _ in range(3):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_state_loaded_before_the_model_is_split_is_reported_at_the_step():
    got = findings(RESUME)
    assert [f.line - NET.count("\n") for f in got] == [13]
    message = got[0].message
    assert "Adam's state is on cpu" in message
    assert "load_state_dict(...)` at line" in message
    assert "cuda:0 and cuda:1" in message
    assert "Place the model before `opt.load_state_dict(...)`" in message


def test_state_loaded_after_the_split_is_clean():
    fixed = RESUME.replace("    model.place()\n", "").replace(
        '    opt.load_state_dict(ckpt["opt"])\n', '    model.place()\n    opt.load_state_dict(ckpt["opt"])\n'
    )
    assert step_lines(fixed) == []


def test_an_optimizer_built_before_the_move_without_state_is_clean():
    # It holds the parameters themselves, which Module.to moves in place: the usual order is fine.
    assert (
        step_lines(
            """
            model = Net()
            opt = torch.optim.AdamW(model.parameters())
            model.place()
            for _ in range(2):
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
            """
        )
        == []
    )


def test_a_step_taken_before_the_move_leaves_its_state_behind():
    body = """
    model = nn.Linear(8, 8)
    opt = torch.optim.RMSprop(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    model.to("cuda:0")
    model(torch.randn(2, 8, device="cuda:0")).sum().backward()
    opt.step()
    """
    got = findings(body)
    assert [f.line - NET.count("\n") for f in got] == [8]
    assert "its first `step()` at line" in got[0].message


def test_moved_back_before_the_step_is_clean():
    body = """
    model = Net().place()
    opt = torch.optim.Adam(model.parameters())
    for epoch in range(2):
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
        model.cpu()
        torch.save(model.state_dict(), "m.pt")
        model.place()
    """
    assert step_lines(body) == []


def test_sgd_without_momentum_keeps_no_state():
    body = RESUME.replace(
        "torch.optim.Adam(model.parameters(), lr=1e-3)", "torch.optim.SGD(model.parameters(), lr=0.1)"
    )
    assert step_lines(body) == []
    with_momentum = body.replace("lr=0.1)", "lr=0.1, momentum=0.9)")
    assert step_lines(with_momentum) == [13]


def test_adagrad_makes_its_state_when_it_is_built():
    body = """
    model = Net()
    opt = torch.optim.Adagrad(model.parameters())
    model.place()
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    """
    assert step_lines(body) == [6]


def test_a_move_to_a_device_not_known_says_nothing():
    body = RESUME.replace("def main(path, resume):", "def main(path, resume, device):").replace(
        "    model.place()\n", "    model.to(device)\n"
    )
    assert step_lines(body) == []


def test_state_loaded_on_one_path_only_is_reported():
    body = """
    def main(path, resume):
        model = Net()
        opt = torch.optim.Adam(model.parameters())
        if resume:
            opt.load_state_dict(torch.load(path))
        model.place()
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
    """
    assert step_lines(body) == [9]


def test_param_groups_and_a_rebound_name_are_followed():
    body = """
    model = nn.Linear(8, 8)
    opt = torch.optim.Adam([{"params": model.parameters(), "lr": 1e-3}])
    opt.load_state_dict(torch.load("opt.pt"))
    model = model.to("cuda:1")
    model(torch.randn(2, 8, device="cuda:1")).sum().backward()
    opt.step()
    """
    assert step_lines(body) == [7]


def test_a_filtered_parameter_list_is_not_followed():
    # Which parameters are in it is not known: nothing is said.
    body = RESUME.replace("model.parameters()", "[p for p in model.parameters() if p.requires_grad]")
    assert step_lines(body) == []


def test_the_step_in_a_helper_names_its_caller():
    body = """
    def train(model, opt):
        model(torch.randn(2, 8)).sum().backward()
        opt.step()


    def main():
        model = Net()
        opt = torch.optim.Adam(model.parameters())
        opt.load_state_dict(torch.load("opt.pt"))
        model.place()
        train(model, opt)
    """
    got = findings(body)
    assert [f.line - NET.count("\n") for f in got] == [4]
    assert "when called by `train(model, opt)`" in got[0].message


SAM = """
import torch
import torch.nn as nn


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, **kwargs):
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)

    @torch.no_grad()
    def first_step(self):
        shared = self.param_groups[0]["params"][0].device
        norm = torch.norm(torch.stack([p.grad.norm().to(shared) for g in self.param_groups for p in g["params"]]))
        for group in self.param_groups:
            scale = group["rho"] / (norm + 1e-12)
            for p in group["params"]:
                p.add_(p.grad * SCALE)


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 8).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


model = Split()
opt = SAM(model.parameters(), torch.optim.SGD, lr=0.1)
model(torch.randn(2, 8)).sum().backward()
opt.first_step()
"""


def test_a_hand_written_optimizer_loops_over_a_parameter_on_each_device():
    src = textwrap.dedent(SAM)
    got = [f for f in analyze("t.py", src.replace("SCALE", "scale"), ALL, "m", {}).findings if f.code == "MP001"]
    assert [f.line for f in got] == [18]
    assert "cuda:0" in got[0].message and "cuda:1" in got[0].message
    fixed = src.replace("SCALE", "scale.to(p)")
    assert [f for f in analyze("t.py", fixed, ALL, "m", {}).findings if f.code == "MP001"] == []
