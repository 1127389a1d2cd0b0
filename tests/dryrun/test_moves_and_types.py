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
    # No repeat claimed, but the way back unread is a round trip: what would change an inference tensor in
    # place is an op on it, which counts as its use where it arrived (round_trip.py).
    assert [(f.code, f.line) for f in dr.findings] == [("MP005", 67)]
    assert dr.ledger.total().count == 5


@pytest.mark.parametrize("backing", ["cpu", "meta"])
def test_tensor_type_converts_as_pytorch_does(backing):
    with quiet(gpus=2, backing=backing) as dr:
        x = torch.ones(2, device="cuda:1")
        assert x.type() == "torch.cuda.FloatTensor"
        assert x.type(torch.cuda.FloatTensor) is x  # same type: the tensor itself
        assert x.type(torch.float16).device == torch.device("cuda:1")  # a dtype keeps the device
        half = x.type(torch.cuda.HalfTensor)  # a CUDA type on a CUDA tensor keeps its index
        assert (half.device, half.dtype) == (torch.device("cuda:1"), torch.float16)
        host = x.type(torch.FloatTensor)
        assert host.device == torch.device("cpu") and host.type() == "torch.FloatTensor"
        assert x.type("torch.DoubleTensor").device == torch.device("cpu")
        torch.cuda.set_device(1)
        moved = torch.ones(2).type("torch.cuda.DoubleTensor")  # a CPU tensor goes to the current device
        assert (moved.device, moved.type()) == (torch.device("cuda:1"), "torch.cuda.DoubleTensor")
        assert torch.ones(2).type(torch.cuda.FloatTensor).device == torch.device("cuda:1")
    assert dr.findings == []


def test_a_tensor_typed_back_to_the_host_is_a_host_tensor(script, dryrun_cli):
    s = script("""
import torch
x = torch.ones(4, device="cuda:0")
host = x.type(torch.FloatTensor)
total = host + torch.ones(4)
print(float((host * torch.arange(4.0)).sum()))
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"], report["stopped"]) == (0, [], None), err


def test_sparse_tensor_types_are_a_listed_limit():
    with quiet(gpus=2):
        x = torch.ones(2, device="cuda:0")
        with pytest.raises(mpcheck.runtime.virtual.errors.DryRunLimitError, match="sparse tensors are not emulated"):
            x.type("torch.cuda.sparse.FloatTensor")
