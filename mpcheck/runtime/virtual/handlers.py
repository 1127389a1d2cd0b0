"""The virtual-device mode's handlers of particular torch functions (the table: torchapi.py).

Each handler is called as handler(gpus, func, args, kwargs) in place of the generic path
(ops.generic), which it may call itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch

from mpcheck.runtime.virtual.errors import MetaValueError, VirtualDeviceError, user_line
from mpcheck.runtime.virtual.ops import PARAM, generic

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs

Handler = Callable[["VirtualGPUs", Any, tuple, dict], Any]


def to(g: VirtualGPUs, func, args, kwargs):
    t = args[0]
    rest = args[1:]
    other = None
    if rest and isinstance(rest[0], torch.Tensor):
        other = rest[0]
    elif isinstance(kwargs.get("other"), torch.Tensor):
        other = kwargs["other"]
    if other is not None:
        dst: str | None = g.device_of(other)
        dtype = other.dtype
        mf = kwargs.get("memory_format")
    else:
        rest, kwargs = _int_device_as_cuda(rest, kwargs)
        device, dtype, _nb, mf = torch._C._nn._parse_to(*rest, **{k: v for k, v in kwargs.items() if k != "copy"})
        dst = g.parse(device) if device is not None else None
        if device is not None and dst is None:
            dst = "meta" if device.type == "meta" else ("cpu" if device.type == "cpu" else None)
            if dst is None:
                return generic(g, func, args, kwargs)
    src = g.device_of(t)
    if dst == "meta":
        with torch._C.DisableTorchFunction():
            return func(*args, **kwargs)  # an explicit move to meta leaves the virtual devices
    if dst is None or dst == src or (dst == "cpu" and g.backing == "cpu" and src == "cpu"):
        # Stays where it is: only the dtype, layout or an explicit copy applies.
        kw: dict[str, Any] = {}
        if dtype is not None:
            kw["dtype"] = dtype
        if mf is not None:
            kw["memory_format"] = mf
        if kwargs.get("copy"):
            kw["copy"] = True
        if not kw:
            return t
        return generic(g, func, (t,), kw)
    return _transfer_tensor(g, t, dst, dtype=dtype, memory_format=mf)


def _int_device_as_cuda(rest: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """`.to(0)` / `.to(device=1)`: an integer device is the accelerator's index, CUDA on real GPUs; a CPU
    build's parser refuses it ("Cannot access accelerator device"), so name the CUDA device."""
    if rest and isinstance(rest[0], int) and not isinstance(rest[0], bool):
        rest = (torch.device("cuda", rest[0]), *rest[1:])
    dev = kwargs.get("device")
    if isinstance(dev, int) and not isinstance(dev, bool):
        kwargs = {**kwargs, "device": torch.device("cuda", dev)}
    return rest, kwargs


def device_new(g: VirtualGPUs, func, args, kwargs):
    """`torch.device(0)`: the accelerator's device 0, cuda:0 on real GPUs (a CPU build has none and
    refuses it). Any other form is PyTorch's own (`torch.device('cuda', 2)` is only a name until used)."""
    if len(args) == 1 and not kwargs and isinstance(args[0], int) and not isinstance(args[0], bool):
        return torch.device("cuda", args[0])
    with torch._C.DisableTorchFunction():
        return func(*args, **kwargs)


def parse_to(g: VirtualGPUs, func, args, kwargs):
    """torch._C._nn._parse_to, which Module.to calls: an integer device is CUDA's, as on real GPUs."""
    args, kwargs = _int_device_as_cuda(args, kwargs)
    with torch._C.DisableTorchFunction():
        return func(*args, **kwargs)


def _transfer_tensor(g: VirtualGPUs, t, dst: str, **kw):
    """g.transfer, and a moved parameter's copy counted as parameter memory on `dst`."""
    out = g.transfer(t, dst, **kw)
    if type(t) is PARAM:
        g.memory.note_param(t)
        g.memory.mark_param_storage(out)
    return out


def cuda(g: VirtualGPUs, func, args, kwargs):
    t = args[0]
    device = args[1] if len(args) > 1 else kwargs.get("device")
    dst = (
        f"cuda:{g.current}" if device is None else g.parse(device if not isinstance(device, int) else f"cuda:{device}")
    )
    if dst is None:
        raise VirtualDeviceError(f"Invalid device, must be cuda device, got {device!r}")
    if g.device_of(t) == dst:
        return t
    return _transfer_tensor(g, t, dst, memory_format=kwargs.get("memory_format"))


def cpu(g: VirtualGPUs, func, args, kwargs):
    t = args[0]
    if g.label_of(t) in (None, "cpu"):
        return generic(g, func, args, kwargs)
    return g.transfer(t, "cpu", memory_format=kwargs.get("memory_format"))


def tensor_type(g: VirtualGPUs, func, args, kwargs):
    """`Tensor.type()`: its type name says where it lives ('torch.cuda.FloatTensor'); `Tensor.type(T)` with a
    type, a type's name or a dtype converts as PyTorch does: a dtype keeps the device; a type whose device type
    is the tensor's keeps its device (and index), another one moves it (CUDA types: to the current device)."""
    t = args[0]
    new = args[1] if len(args) > 1 else kwargs.get("dtype")
    lab = g.label_of(t)
    rest = {k: v for k, v in kwargs.items() if k != "dtype"}
    if new is None:
        if lab is None:
            return func(*args, **kwargs)
        name = func(t).rsplit(".", 1)[1]  # torch.FloatTensor or torch.meta.FloatTensor: FloatTensor
        return f"torch.cuda.{name}" if lab.startswith("cuda") else f"torch.{name}"
    if isinstance(new, torch.dtype):
        return to(g, torch.Tensor.to, (t, new), rest)
    if new is torch.Tensor:
        name = "torch.Tensor"
    elif isinstance(new, type):
        name = f"{new.__module__}.{new.__name__}"
    elif isinstance(new, str):
        name = new
    else:
        return func(*args, **kwargs)  # PyTorch's own TypeError
    parsed = _tensor_type_name(name)
    if parsed is None:
        if "sparse" in name and (lab is not None or ".cuda." in name):
            raise g.limit(f"`Tensor.type({name!r})`", "sparse tensors are not emulated on virtual GPUs")
        return func(*args, **kwargs)  # a CPU tensor's sparse conversion, or PyTorch's own "invalid type"
    device_type, dtype = parsed
    if device_type == "cuda":
        dst = lab if lab is not None and lab.startswith("cuda") else f"cuda:{g.current}"
    else:
        dst = "cpu"
    return to(g, torch.Tensor.to, (t, dst, dtype), rest)


def type_as(g: VirtualGPUs, func, args, kwargs):
    """`a.type_as(b)`: `a.to(b.options())` in PyTorch, so `a` goes to `b`'s device (and dtype), measured on
    2x H200 (tests/gpu/test_gpu_precision.py): a conversion, not an op that mixes devices."""
    t = args[0]
    other = args[1] if len(args) > 1 else kwargs["other"]
    return to(g, torch.Tensor.to, (t, g.device_of(other), other.dtype), {})


def _tensor_type_name(name: str) -> tuple[str, torch.dtype] | None:
    """('cuda' or 'cpu', dtype) of a dense tensor type's name ('torch.cuda.HalfTensor'), else None."""
    if name == "torch.Tensor":
        return "cpu", torch.get_default_dtype()
    device_type, _, short = name.removeprefix("torch.").rpartition(".")
    if device_type not in ("", "cuda"):
        return None  # torch.sparse.*, torch.cuda.sparse.*, or not a tensor type
    cpu_type = getattr(torch, short, None)
    dtype = getattr(cpu_type, "dtype", None) if short.endswith("Tensor") else None
    if not isinstance(dtype, torch.dtype):
        return None
    return device_type or "cpu", dtype


def device_get(g: VirtualGPUs, func, args, kwargs):
    lab = g.label_of(args[0])
    if lab is None:
        return func(*args, **kwargs)
    return torch.device(lab)


def is_cuda_get(g, func, args, kwargs):
    lab = g.label_of(args[0])
    return func(*args) if lab is None else lab.startswith("cuda")


def is_cpu_get(g, func, args, kwargs):
    lab = g.label_of(args[0])
    return func(*args) if lab is None else lab == "cpu"


def is_meta_get(g, func, args, kwargs):
    return func(*args) if g.label_of(args[0]) is None else False


def get_device(g, func, args, kwargs):
    lab = g.label_of(args[0])
    if lab is None:
        return func(*args, **kwargs)
    return int(lab.split(":")[1]) if lab.startswith("cuda") else -1


def grad_get(g, func, args, kwargs):
    grad = func(*args, **kwargs)
    if grad is not None:
        lab = g.label_of(args[0])
        if lab is not None and g.label_of(grad) is None:
            g.label(grad, lab)
    return grad


def needs_value(what: str) -> Handler:
    """The handler of a function that reads a tensor's value (`what` names it in the message)."""

    def value(g: VirtualGPUs, func, args, kwargs):
        t = args[0]
        lab = g.label_of(t)
        # Unlabelled too: a tensor an autograd hook made during backward (a gradient's norm kept for a log),
        # which this mode never saw made, holds no value either.
        if g.backing == "meta" and isinstance(t, torch.Tensor) and t.is_meta:
            if func is torch.Tensor.item and _called_from("grad_scaler.py"):
                return 0.0  # GradScaler asks whether any gradient was inf/nan: on meta, assume none
            raise MetaValueError(
                f"{user_line()}: {what} needs the tensor's value, but with --backing meta tensors hold shapes only. "
                f"Run with --backing cpu (real values, small models) to go past this line."
            )
        if lab is not None and lab.startswith("cuda") and func in (torch.Tensor.numpy, torch.Tensor.__array__):
            raise VirtualDeviceError(
                f"can't convert {lab} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
                "memory first."
            )
        return func(*args, **kwargs)

    return value


def _called_from(filename: str) -> bool:
    """Is the handler's caller (past torch's dispatch and mpcheck's modes) in `filename`?"""
    f: FrameType | None = sys._getframe(2)
    for _ in range(8):
        if f is None:
            return False
        fn = f.f_code.co_filename
        if fn.endswith(filename):
            return True
        if not (fn.endswith("overrides.py") or "mpcheck" in fn):
            return False
        f = f.f_back
    return False


def tensor_repr(g: VirtualGPUs, func, args, kwargs):
    t = args[0]
    lab = g.label_of(t)
    if lab is None:
        return func(*args, **kwargs)
    if t.is_meta:
        return f"tensor(..., device='{lab}', size={tuple(t.shape)}, dtype={t.dtype})"
    s = func(*args, **kwargs)
    if lab.startswith("cuda") and s.endswith(")"):
        s = s[:-1] + f", device='{lab}')"
    return s


def noop_self(g, func, args, kwargs):
    return args[0] if func is torch.Tensor.pin_memory else None


def is_pinned(g, func, args, kwargs):
    return False if g.label_of(args[0]) is not None else func(*args, **kwargs)


def backward(g: VirtualGPUs, func, args, kwargs):
    g.before_backward()
    grad = args[1] if len(args) > 1 else kwargs.get("gradient")
    if isinstance(grad, torch.Tensor) and grad.dim() == 0 and g.device_of(grad) != g.device_of(args[0]):
        # A 0-dim gradient on another device is copied to the output's by autograd (its engine's
        # validate_outputs); any other is refused ("invalid gradient at index 0 - expected device ...").
        grad = g.transfer(grad, g.device_of(args[0]))
        args, kwargs = (args[0], grad, *args[2:]), {k: v for k, v in kwargs.items() if k != "gradient"}
    return generic(g, func, args, kwargs)


def pack_padded(g: VirtualGPUs, func, args, kwargs):
    """`pack_padded_sequence`'s kernel reads the lengths on the host and refuses them on a GPU, in
    PyTorch's words (checks/op_error.py reads them, on real GPUs as here); with meta backing, real
    host lengths are what it needs (made from data, they are)."""
    lengths = args[1] if len(args) > 1 else kwargs.get("lengths")
    if isinstance(lengths, torch.Tensor):
        dev = g.device_of(lengths)
        if dev.startswith("cuda"):
            raise VirtualDeviceError(
                f"'lengths' argument should be a 1D CPU int64 tensor, but got {lengths.dim()}D {dev} {_scalar_type(lengths)} tensor"
            )
    return generic(g, func, args, kwargs)


def _scalar_type(t: torch.Tensor) -> str:
    """PyTorch's name of `t`'s scalar type ("Long"), as its messages write it."""
    with torch._C.DisableTorchFunction():
        return t.type().rsplit(".", 1)[-1].removesuffix("Tensor")


def flash_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    out, _lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )
    return out


def sdpa(g: VirtualGPUs, func, args, kwargs):
    # On meta tensors PyTorch picks the math path, which saves the whole T x T attention matrix for
    # backward; a GPU runs a flash / memory-efficient kernel that saves only the log-sum-exp. Use the
    # flash kernel's meta function so that the activation estimate is a GPU's.
    # A mask that requires grad (a learned attention bias) is one the CPU flash kernel refuses, and a GPU's
    # memory-efficient kernel gives a gradient: PyTorch's own path then (its estimate saves the matrix).
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    learned_mask = isinstance(mask, torch.Tensor) and mask.requires_grad
    if g.backing == "meta" and not kwargs.get("enable_gqa") and len(args) >= 3 and not learned_mask:
        q = args[0]
        if isinstance(q, torch.Tensor) and q.dim() == 4 and (g.label_of(q) or "").startswith("cuda"):
            return generic(g, flash_sdpa, args, kwargs)
    return generic(g, func, args, kwargs)


def storage(g, func, args, kwargs):
    return func(*args, **kwargs)
