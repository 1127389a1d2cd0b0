"""Moving modules between virtual GPUs, inference mode and `Tensor.type(...)`: what real PyTorch
does on GPUs, the dry run does too, and the checks go on."""

import pytest
import torch
import torch.nn as nn
from dryrun_helpers import codes_at

import mpcheck


def quiet(**kw):
    return mpcheck.dryrun(report=None, **kw)


@pytest.mark.parametrize("backing", ["cpu", "meta"])
@pytest.mark.parametrize(
    "move, dst",
    [
        (lambda m: m.to("cuda:1"), "cuda:1"),
        (lambda m: m.cuda(1), "cuda:1"),
        (lambda m: m.to(torch.device("cuda", 1)), "cuda:1"),
        (lambda m: m.cpu(), "cpu"),
    ],
)
def test_a_module_moves_between_virtual_gpus_with_its_gradients(backing, move, dst):
    with quiet(gpus=2, backing=backing) as dr:
        m = nn.Linear(2, 2).to("cuda:0")
        m(torch.ones(3, 2, device="cuda:0")).sum().backward()
        weight = m.weight
        assert move(m) is m
        assert m.weight is weight  # moved in place (param.data = ...), as on real GPUs
        assert {p.device for p in m.parameters()} == {torch.device(dst)}
        assert m.weight.grad.device == torch.device(dst)
        if backing == "cpu" or dst != "cpu":  # meta-backed "cpu" parameters cannot meet real CPU inputs
            assert m(torch.ones(3, 2, device=dst)).device == torch.device(dst)
    assert dr.findings == []


@pytest.mark.parametrize("backing", ["cpu", "meta"])
@pytest.mark.parametrize("move", ["model.cuda()", "model.to('cuda:0')", "model.to('cuda')"])
def test_collapsing_a_split_model_is_reported_and_the_run_goes_on(script, dryrun_cli, backing, move):
    s = script(f"""
import torch
import torch.nn as nn
model = nn.Sequential(nn.Linear(4, 4).to("cuda:0"), nn.Linear(4, 4).to("cuda:1"))
model = {move}  # <- move
print("devices", sorted({{str(p.device) for p in model.parameters()}}))
model(torch.ones(2, 4, device="cuda:0")).sum().backward()  # <- run
print("reached the end")
""")
    status, report, err = dryrun_cli(s, "--gpus", "2", "--backing", backing)
    assert "Traceback" not in err, err
    assert report["stopped"] is None
    assert codes_at(report) == [("MP007", s.line("move"))]
    assert status == 1  # MP007 is an error-level finding


def test_inference_mode_tensors_move_and_count_as_fresh_data():
    with quiet(gpus=2) as dr:
        net = nn.Linear(2, 2).to("cuda:0")
        with torch.inference_mode():
            x = torch.ones(3, 2)
            y = net(x.to("cuda:0"))
            y = net(x.to("cuda:0"))  # inference tensors have no version counter: no repeat claimed
            assert y.to("cuda:1").device == torch.device("cuda:1")
            assert y.to("cuda:1").to("cuda:0").device == torch.device("cuda:0")
    assert dr.findings == []
    assert dr.ledger.total().count == 5
