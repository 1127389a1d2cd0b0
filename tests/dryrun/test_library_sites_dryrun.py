"""On virtual GPUs too, a finding inside an installed library's code points at the user's line."""

from dryrun_helpers import codes_at

MODELING = """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64, device="cuda:1")
        self.register_buffer("table", torch.randn(256, 64))  # 64 KiB on the CPU

    def forward(self, x):
        return self.lin(x) + self.table.to(x.device)  # library line: copied on every call
"""


def test_a_repeat_inside_a_library_model_points_at_the_users_call(script, dryrun_cli, tmp_path):
    pkg = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "fakemodels"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "modeling_fake.py").write_text(MODELING)
    lib_line = next(i for i, line in enumerate(MODELING.splitlines(), 1) if "library line" in line)
    s = script(f"""
import sys
sys.path.insert(0, {str(pkg.parent)!r})
import torch
from fakemodels.modeling_fake import Model

model = Model()
for step in range(3):
    out = model(torch.randn(256, 64, device="cuda:1"))  # <- call
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert codes_at(report) == [("MP011", s.line("call"))]
    (f,) = report["findings"]
    assert f["message"].endswith(f"(in fakemodels/modeling_fake.py:{lib_line})")
