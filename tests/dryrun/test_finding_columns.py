"""A run-time finding names the column of the operator or call that reported it, not just its line
(`file:line:col` as the linter prints it), even when an earlier event on the same line was seen first."""

from dryrun_helpers import codes_at


def _column(report, code, line):
    cols = [f["column"] for f in report["findings"] if f["code"] == code and f["line"] == line]
    assert cols, codes_at(report)
    return cols[0]


def test_a_mismatch_names_the_operator_column(script, dryrun_cli):
    s = script(
        """
        import torch
        a = torch.ones(3, device="cuda:0")
        b = torch.ones(3, device="cuda:1")
        total = torch.zeros(1).sum() + (a + b)  # <- mix
        """
    )
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    assert status == 1
    text = s.path.read_text().splitlines()[s.line("mix") - 1]
    # The failing op is `a + b`, not the first torch call on the line (`torch.zeros`).
    assert _column(report, "MP001", s.line("mix")) == text.index("a + b") + 1


def test_a_wrap_names_its_call_not_the_models_construction_on_the_same_line(script, dryrun_cli):
    s = script(
        """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(4, 4).to("cuda:0")
                self.b = nn.Linear(4, 4).to("cuda:1")
            def forward(self, x):
                return self.b(self.a(x).to("cuda:1"))

        net = nn.DataParallel(Net())  # <- wrap
        """
    )
    status, report, _ = dryrun_cli(s, "--gpus", "2")
    text = s.path.read_text().splitlines()[s.line("wrap") - 1]
    assert _column(report, "MP002", s.line("wrap")) == text.index("nn.DataParallel") + 1
