"""Check once per signature (capture/signatures.py) on virtual GPUs: a module call like one checked clean
runs with the checking mode aside, its transfers still counted; a new signature, a placement change, a
re-check step or --every-call checks it again, so every bug family still gets caught."""

import pytest
import torch
import torch.nn as nn

import mpcheck
from mpcheck.runtime.capture.mode import CheckingMode
from mpcheck.runtime.capture.signatures import CLEAN_AFTER
from mpcheck.runtime.virtual.errors import VirtualDeviceError


def checking_mode_on() -> bool:
    from torch.overrides import _get_current_function_mode_stack

    return any(isinstance(m, CheckingMode) for m in _get_current_function_mode_stack())


class Stage(nn.Module):
    def __init__(self, dev):
        super().__init__()
        self.lin = nn.Linear(8, 8, device=dev)
        self.seen: list[bool] = []

    def forward(self, x):
        self.seen.append(checking_mode_on())
        return self.lin(x)


class Split(nn.Module):
    def __init__(self, route=None):
        super().__init__()
        self.s0, self.s1 = Stage("cuda:0"), Stage("cuda:1")
        self.route = route  # a data-dependent branch: called with the step's number

    def forward(self, x, step=0):
        h = self.s0(x.to("cuda:0"))
        bad = self.route(step) if self.route is not None else None
        if bad == "entry":
            return self.s1(h)  # bug: h stays on cuda:0
        out = self.s1(h.to("cuda:1"))
        if bad == "op":
            out = out + h  # bug: h is on cuda:0
        return out


def run(steps, route=None, **kw):
    """(model, dryrun) after `steps` training steps of a Split built on the virtual GPUs."""
    with mpcheck.dryrun(2, report=None, **kw) as dr:
        model = Split(route)
        for i in range(steps):
            model(torch.randn(2, 8), i).sum().backward()
            dr.step()
    return model, dr


def test_a_clean_signature_runs_unchecked_once_checked_clean_enough_and_every_transfer_is_counted():
    model, dr = run(CLEAN_AFTER + 2)
    assert dr.findings == []
    assert model.s1.seen == [True] * CLEAN_AFTER + [False, False]
    forward = dr.ledger.by_pair()[("cuda:0", "cuda:1", "forward")]
    assert forward.count == CLEAN_AFTER + 2  # one hop per step, the unchecked ones included
    assert dr.ledger.by_pair()[("cuda:1", "cuda:0", "backward")].count == CLEAN_AFTER + 2


def test_every_call_checks_every_call():
    model, _ = run(CLEAN_AFTER + 2, recheck_every=0)
    assert model.s1.seen == [True] * (CLEAN_AFTER + 2)


def test_a_re_check_step_catches_a_branch_taken_only_later():
    # The first step after the signature was checked clean takes the bad branch. Cached, PyTorch's own
    # error (here the virtual GPUs') stops it; a re-check every step reports it with mpcheck's finding
    # and the program goes on (move).
    def route(step):
        return "op" if step == CLEAN_AFTER else None

    with pytest.raises(VirtualDeviceError):
        run(CLEAN_AFTER + 1, route=route)
    _, dr = run(CLEAN_AFTER + 1, route=route, recheck_every=1)
    assert [f.code for f in dr.findings] == ["MP001"]


def test_a_nested_module_called_with_inputs_on_new_devices_is_checked_inside_an_unchecked_call():
    model, dr = run(CLEAN_AFTER + 2, route=lambda step: "entry" if step == CLEAN_AFTER + 1 else None)
    assert [(f.code, f.modules) for f in dr.findings] == [("MP001", ("model.s1",))]
    assert model.s1.seen == [True] * CLEAN_AFTER + [False, True]


def test_an_exception_in_an_unchecked_call_checks_the_next_call_again():
    with mpcheck.dryrun(2, report=None) as dr:
        model = Split(route=lambda step: "op" if step == CLEAN_AFTER else None)
        for i in range(CLEAN_AFTER + 1):
            try:
                model(torch.randn(2, 8), i)
            except VirtualDeviceError:
                pass
        model(torch.randn(2, 8), CLEAN_AFTER)  # the same bad branch: checked now
    assert [f.code for f in dr.findings] == ["MP001"]


def test_a_new_signature_is_checked():
    with mpcheck.dryrun(2, report=None) as dr:
        model = Split()
        model(torch.randn(2, 8))
        model.s1(torch.randn(2, 8, device="cuda:0"))  # inputs on a device the clean calls never had
    assert [(f.code, f.modules) for f in dr.findings] == [("MP001", ("model.s1",))]


def test_a_placement_change_checks_again():
    with mpcheck.dryrun(2, report=None) as dr:
        model = Split()
        for _ in range(CLEAN_AFTER + 1):
            model(torch.randn(2, 8))
        model.s1.to("cuda:0")  # the hop now goes to the wrong device
        model(torch.randn(2, 8))
    assert model.s1.seen == [True] * CLEAN_AFTER + [False, True]
    # The move left the whole model on cuda:0: a collapse (MP007 at the move), and the mismatch the checked call
    # found after it is counted there.
    assert [f.code for f in dr.findings] == ["MP007"]
    assert dr.findings[0].extra.get("mismatches_after"), dr.findings[0]


def test_load_state_dict_with_assign_onto_another_device_checks_again():
    with mpcheck.dryrun(2, report=None) as dr:
        model = Split()
        model(torch.randn(2, 8))
        moved = {k: v.to("cuda:0") for k, v in model.s1.state_dict().items()}
        model.s1.load_state_dict(moved, assign=True)
        model(torch.randn(2, 8))
    assert [f.code for f in dr.findings] == ["MP001"]


def test_repeated_transfers_are_still_found_on_unchecked_calls():
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(128, 128, device="cuda:1")
            self.mask = torch.ones(128, 128)  # on the CPU, copied on every call

        def forward(self, x):
            return self.lin(x) * self.mask.to("cuda:1")  # repeat

    with mpcheck.dryrun(2, report=None) as dr:
        model = Masked()
        for _ in range(3):
            model(torch.randn(128, 128, device="cuda:1"))
            dr.step()
    assert [f.code for f in dr.findings] == ["MP011"]


LATE_BRANCH = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8).to("cuda:0")
        self.b = nn.Linear(8, 8).to("cuda:1")
    def forward(self, x, step):
        h = self.a(x.to("cuda:0"))
        out = self.b(h.to("cuda:1"))
        if step == 3:
            out = out + h  # <- bug
        return out

net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(4):
    net(torch.randn(2, 8), step).sum().backward()
    opt.step()  # a step ends here
"""


@pytest.mark.parametrize(
    "opts, caught",
    [((), False), (("--every-call",), True), (("--recheck-every", "2"), True), (("--recheck-every", "5"), False)],
)
def test_the_command_line_options(script, dryrun_cli, monkeypatch, opts, caught):
    # By default the fourth call's signature was checked clean three times (CLEAN_AFTER): it runs unchecked and its bad branch
    # stops on the virtual GPUs' own error, which is still MP001 at that line (stopped.py). Checked (every call, or a
    # re-check after step 2), it is MP001 and the program goes on.
    monkeypatch.delenv("MPCHECK_RECHECK_EVERY", raising=False)
    s = script(LATE_BRANCH)
    status, report, _ = dryrun_cli(s, "--gpus", "2", *opts)
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP001", s.line("bug"))]
    assert (report.get("stopped") is None) == caught


def test_a_negative_recheck_every_is_a_usage_error(script, dryrun_cli, capsys):
    s = script(LATE_BRANCH)
    status, report, err = dryrun_cli(s, "--gpus", "2", "--recheck-every", "-1")
    assert status == 2 and report is None
    assert "--recheck-every must be 0 (every call) or more" in err
