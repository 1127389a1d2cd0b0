"""The virtual GPUs themselves: what torch answers, what works, what is restored."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mpcheck
from mpcheck.runtime.virtual.devices import VirtualDeviceError, VirtualGPUs


def quiet(**kw):
    return mpcheck.dryrun(report=None, **kw)


def test_torch_cuda_answers_as_n_gpus_and_is_restored():
    before = torch.cuda.is_available()
    with quiet(gpus=4, device_memory="24GiB"):
        assert torch.cuda.is_available()
        assert torch.cuda.device_count() == 4
        assert torch.cuda.current_device() == 0
        torch.cuda.set_device(2)
        assert torch.cuda.current_device() == 2
        assert torch.zeros(1, device="cuda").device == torch.device("cuda:2")
        with torch.cuda.device(3):
            assert torch.ones(1).cuda().get_device() == 3
        assert torch.cuda.current_device() == 2
        torch.cuda.synchronize()
        props = torch.cuda.get_device_properties(1)
        assert props.total_memory == 24 * 2**30
        x = torch.empty(1024, device="cuda:1")
        assert torch.cuda.memory_allocated(1) == 4096
        assert torch.cuda.max_memory_allocated(1) >= 4096
        del x
        assert torch.cuda.memory_allocated(1) == 0
        free, total = torch.cuda.mem_get_info(1)
        assert (free, total) == (24 * 2**30, 24 * 2**30)
        with pytest.raises(VirtualDeviceError, match="invalid device ordinal"):
            torch.zeros(1, device="cuda:4")
    assert torch.cuda.is_available() == before
    assert torch._C._len_torch_function_stack() == 0


@pytest.mark.parametrize(("memory", "part"), [("80GiB", "H100"), ("141GB", "H200")])
def test_the_virtual_gpu_answers_as_the_hopper_part_it_models(memory, part):
    # a program that keeps only data-centre GPUs (`"H100" in get_device_name(i)`) finds them all
    with quiet(gpus=2, device_memory=memory):
        names = [torch.cuda.get_device_name(i) for i in range(2)]
        assert all(part in n and "virtual" in n for n in names)
        assert torch.cuda.get_device_properties(0).name == names[0]
        assert torch.cuda.get_device_capability(1) == (9, 0)


def test_tensor_device_queries_and_moves():
    with quiet(gpus=2):
        x = torch.randn(3, 4)
        y = x.to("cuda:1")
        assert (y.device, y.is_cuda, y.get_device(), y.is_cpu) == (torch.device("cuda:1"), True, 1, False)
        assert x.device == torch.device("cpu") and not x.is_cuda
        assert y.data_ptr() != x.data_ptr()  # a move copies, as on real GPUs
        assert torch.equal(y.cpu(), x)
        assert y[1:].device == torch.device("cuda:1")  # views keep the device
        assert (y * 2).sum().device == torch.device("cuda:1")
        assert torch.zeros_like(y).device == torch.device("cuda:1")
        assert y.new_zeros(2).device == torch.device("cuda:1")
        assert y.to(torch.float16).device == torch.device("cuda:1")
        assert x.to(y).device == torch.device("cuda:1")
        with pytest.raises(VirtualDeviceError, match="can't convert cuda:1 device type tensor to numpy"):
            y.numpy()
    with VirtualGPUs(2):  # the virtual devices alone, without the checks: PyTorch's own error
        with pytest.raises(VirtualDeviceError, match="Expected all tensors to be on the same device"):
            torch.ones(2, device="cuda:1") + torch.ones(2, device="cuda:0")


def test_module_to_batchnorm_buffers_and_grads():
    with quiet(gpus=2):
        m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)).to("cuda:1")
        assert {p.device for p in m.parameters()} == {torch.device("cuda:1")}
        assert m[1].running_mean.device == torch.device("cuda:1")
        m(torch.randn(5, 4, device="cuda:1")).sum().backward()
        assert m[0].weight.grad.device == torch.device("cuda:1")
        assert m[1].num_batches_tracked.item() == 1


def _train(dev0, dev1, steps=3, clip=True):
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU()).to(dev0)
    b = nn.Linear(32, 4).to(dev1)
    params = list(a.parameters()) + list(b.parameters())
    opt = torch.optim.AdamW(params, lr=1e-2, foreach=False)
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    losses = []
    for _ in range(steps):
        loss = F.mse_loss(b(a(x.to(dev0)).to(dev1)), y.to(dev1))
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_cpu_backing_losses_are_bit_identical_to_a_cpu_run():
    plain = _train("cpu", "cpu")
    with quiet(gpus=2):
        virtual = _train("cuda:0", "cuda:1")
    assert virtual == plain


def test_optimizer_groups_tensors_per_virtual_device():
    seen = []
    with quiet(gpus=2):
        from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype

        p0 = torch.zeros(3, device="cuda:0")
        p1 = torch.zeros(3, device="cuda:1")
        groups = _group_tensors_by_device_and_dtype([[p0, p1, p0.clone()]])
        seen = sorted(str(dev) for dev, _ in groups)
        # foreach AdamW then runs one kernel per device: no mixed-device finding
        w0 = nn.Parameter(torch.randn(3, device="cuda:0"))
        w1 = nn.Parameter(torch.randn(3, device="cuda:1"))
        opt = torch.optim.AdamW([w0, w1], foreach=True)
        (w0.sum() + w1.sum().to("cuda:0")).backward()
        opt.step()
        assert opt.state[w1]["exp_avg"].device == torch.device("cuda:1")
    assert seen == ["cuda:0", "cuda:1"]


def test_grad_scaler_and_autocast_bf16():
    with quiet(gpus=2) as dr:
        lin = nn.Linear(8, 8).to("cuda:0")
        head = nn.Linear(8, 2).to("cuda:1")
        opt = torch.optim.SGD(list(lin.parameters()) + list(head.parameters()), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = lin(torch.randn(4, 8, device="cuda:0"))
            out = head(h.to("cuda:1"))
            sm = F.softmax(out, dim=-1)
        # autocast("cuda") is emulated: linear runs in bf16, softmax in float32, as on a GPU
        assert (h.dtype, out.dtype, sm.dtype) == (torch.bfloat16, torch.bfloat16, torch.float32)
        scaler.scale(out.float().sum()).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(list(lin.parameters()) + list(head.parameters()), 1.0)
        scaler.step(opt)
        scaler.update()
        assert scaler.get_scale() == 65536.0
        outside = lin(torch.randn(4, 8, device="cuda:0"))
        assert outside.dtype == torch.float32
    assert not [f for f in dr.findings if f.code == "MP001"]


def test_streams_and_events_do_not_hang_and_timing_is_a_noted_limit():
    with quiet(gpus=2) as dr:
        s = torch.cuda.Stream(device=1)
        x = torch.randn(4, device="cuda:1")
        with torch.cuda.stream(s):
            y = x * 2
        torch.cuda.current_stream(1).wait_stream(s)
        y.record_stream(s)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        end.record()
        end.synchronize()
        assert start.elapsed_time(end) == 0.0
    assert len(dr.limits) == 1 and "elapsed_time" in dr.limits[0][1]


def test_a_stream_of_another_gpu_makes_that_gpu_current_for_its_block():
    """As torch.cuda.set_stream does on GPUs: `device="cuda"` inside the block lands on the stream's GPU,
    and the device current before is current again after it (also after an exception inside)."""
    with quiet(gpus=2):
        s = torch.cuda.Stream(device="cuda:1")
        assert torch.cuda.current_device() == 0
        with torch.cuda.stream(s):
            assert torch.cuda.current_device() == 1
            assert torch.zeros(2, device="cuda").device == torch.device("cuda:1")
        assert torch.cuda.current_device() == 0
        with pytest.raises(ValueError), torch.cuda.stream(s):
            raise ValueError("inside")
        assert torch.cuda.current_device() == 0
        with torch.cuda.stream(None):  # PyTorch's no-op form
            assert torch.cuda.current_device() == 0
        torch.cuda.set_stream(s)
        assert torch.cuda.current_device() == 1


def test_meta_backing_holds_no_memory_and_answers_devices():
    with quiet(gpus=2, backing="meta") as dr:
        big = nn.Linear(8192, 8192).to("cuda:1")  # 256 MiB of parameters, none allocated
        out = big(torch.randn(4, 8192).to("cuda:1"))
        assert out.device == torch.device("cuda:1") and not out.is_meta
        assert "device='cuda:1'" in repr(out)
    assert dr.memory["cuda:1"]["params"] == (8192 * 8192 + 8192) * 4


def test_nested_virtual_gpus_are_refused_and_nothing_leaks():
    g = VirtualGPUs(2)
    with g:
        with pytest.raises(RuntimeError, match="already active"):
            g.__enter__()
    assert torch._C._len_torch_function_stack() == 0


def test_meta_attention_is_estimated_like_a_flash_kernel():
    import mpcheck

    def act(backing):
        with mpcheck.dryrun(gpus=1, backing=backing, report=None) as dr:
            q = torch.randn(1, 4, 256, 32, device="cuda:0", requires_grad=True)
            F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
            assert q.grad.device == torch.device("cuda:0")
        return dr.memory["cuda:0"]["activations"]

    # math path on the CPU would save a 4 x 256 x 256 attention matrix (1 MiB); flash saves none of it
    assert act("meta") < 1 * 2**20


def test_dataloader_pin_memory_with_workers_and_set_default_device():
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(8, 4))
    with quiet(gpus=2):
        for (x,) in DataLoader(data, batch_size=4, pin_memory=True, num_workers=1):
            assert x.cuda(non_blocking=True).device == torch.device("cuda:0")
        torch.set_default_device("cuda:1")
        try:
            assert torch.zeros(3).device == torch.device("cuda:1")
            assert torch.nn.Linear(2, 2).weight.device == torch.device("cuda:1")
        finally:
            torch.set_default_device(None)
        assert torch.zeros(3).device == torch.device("cpu")


def test_everything_patched_is_restored_exactly():
    from torch.autograd.function import BackwardCFunction, Function
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    watched = [
        (Function, "apply"),
        (BackwardCFunction, "apply"),
        (DataParallel, "forward"),
        (DistributedDataParallel, "__init__"),
        (torch._C, "_group_tensors_by_device_and_dtype"),
        (torch.cuda, "is_available"),
        (torch.cuda, "Stream"),
        (torch.autograd, "backward"),
        (torch.utils.checkpoint, "checkpoint"),
    ]
    before = [vars(o).get(n) if isinstance(o, type) else getattr(o, n) for o, n in watched]
    with quiet(gpus=2):
        pass
    after = [vars(o).get(n) if isinstance(o, type) else getattr(o, n) for o, n in watched]
    assert all(a is b for a, b in zip(before, after))

    class Double(torch.autograd.Function):  # a custom Function still works afterwards
        @staticmethod
        def forward(ctx, x):
            return 2 * x

        @staticmethod
        def backward(ctx, g):
            return 2 * g

    assert Double.apply(torch.ones(1)).item() == 2.0


def test_torch_load_with_a_cuda_map_location(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.arange(4.0), "nested": [torch.ones(2)], "step": 7}, path)
    with quiet(gpus=2):
        ckpt = torch.load(path, map_location="cuda:1")
        assert ckpt["w"].device == torch.device("cuda:1") and ckpt["step"] == 7
        assert ckpt["nested"][0].device == torch.device("cuda:1")
        lin = nn.Linear(4, 1).to("cuda:0")
        lin.weight.data.copy_(ckpt["w"].view(1, 4))  # copy_ across devices is allowed
        assert lin.weight.device == torch.device("cuda:0")
    assert torch.equal(torch.load(path)["w"], torch.arange(4.0))


def test_meta_backing_builds_nothing_real_on_the_cpu():
    from mpcheck.runtime.virtual.errors import MetaValueError

    with quiet(gpus=2, backing="meta") as dr:
        layer = nn.Linear(1024, 1024)  # built on the CPU: shapes only
        assert layer.weight.device == torch.device("cpu")
        assert layer.weight.untyped_storage().device.type == "meta"
        x = torch.randn(4, 1024)
        with pytest.raises(MetaValueError, match="needs the tensor's value"):
            x.sum().item()
        assert torch.tensor([1, 2, 3]).tolist() == [1, 2, 3]  # values the program hands in stay real
        layer.to("cuda:1")
        layer(x.to("cuda:1")).sum().backward()
    assert layer.weight.device == torch.device("meta")  # out of the dry run, the backing shows
    assert dr.memory["cuda:1"]["params"] == (1024 * 1024 + 1024) * 4
    assert "cuda:0" not in dr.memory or dr.memory["cuda:0"]["params"] == 0
