"""What the virtual-device mode does with any torch call: device= onto the backing device, two
CUDA devices refused as PyTorch would, autocast applied, outputs labelled with the inputs'
device, and errors of the virtual devices themselves turned into clear dry-run messages."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.utils._device as _device_ctx

from mpcheck.runtime.capture.hooks import in_library_step
from mpcheck.runtime.checks.torchapi import PER_INDEX_PREFIXES, assigns_through_a_view
from mpcheck.runtime.virtual.allocations import HOST_OUTPUTS, UNKNOWN, copy_gradient_back
from mpcheck.runtime.virtual.autocast import ANY as AUTOCAST_ANY
from mpcheck.runtime.virtual.autocast import cast_inputs
from mpcheck.runtime.virtual.errors import (
    NEEDS_CUDA,
    DryRunLimitError,
    MetaValueError,
    VirtualDeviceError,
    call_name,
    user_line,
)
from mpcheck.runtime.virtual.patches.cuda import generator_type, real_generator

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs

PARAM = torch.nn.Parameter
# Functions that take device= (torch.empty, torch.zeros, ...): filled once torch is imported.
FACTORIES: set = set()
# Functions PyTorch lets take tensors on two devices: a copy between them, and what `Module.to`
# does to swap a parameter's data for its moved copy (`param.data = moved` after asking
# `torch._has_compatible_shallow_copy_type(param, moved)`). Filled once torch is imported.
MIXES_DEVICES: set = set()


# Factories that make a tensor from a shape alone (torch.empty, torch.randn, torch.arange, ...), not from
# values the program hands in (torch.tensor, torch.as_tensor): under meta backing, the CPU's are shapes only.
SHAPED_FACTORIES: set = set()

# Calls that build a new tensor from the values they are handed, wherever those are.
FROM_VALUES: set = set()

# The calls that run autograd's backward: the graph's ops may span devices.
AUTOGRAD_ENTRIES: set = set()

# Methods that read only the other tensor's shape (`a.expand_as(b)` is `a.expand(b.size())`): the result
# is a view of `a`, where `a` is, whatever device `b` is on.
SHAPE_OF_OTHER: set = set()


def build() -> None:
    if not FACTORIES:
        FACTORIES.update(_device_ctx._device_constructors())
    if not SHAPED_FACTORIES:
        SHAPED_FACTORIES.update(FACTORIES - {torch.tensor, torch.as_tensor, getattr(torch, "asarray", None)})
    if not FROM_VALUES:
        FROM_VALUES.update({torch.tensor, torch.Tensor.new_tensor})
    if not SHAPE_OF_OTHER:
        SHAPE_OF_OTHER.update({torch.Tensor.expand_as, torch.Tensor.view_as, torch.Tensor.reshape_as})
    if not AUTOGRAD_ENTRIES:
        AUTOGRAD_ENTRIES.update({torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})
    if not MIXES_DEVICES:
        # torch's stub types the property Tensor.data as a plain Tensor, which has no __set__
        data_set = torch.Tensor.data.__set__  # type: ignore[attr-defined]
        MIXES_DEVICES.update({torch.Tensor.copy_, torch._has_compatible_shallow_copy_type, data_set})


def scan(g: VirtualGPUs, args: tuple, kwargs: dict) -> tuple[str | None, str | None]:
    """(the op's device label, a second CUDA label that conflicts with it)."""
    dev = None
    other = None
    label_of = g.label_of
    host = False  # a tensor on the host, or of no virtual device, among them
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            items: Any = (a,)
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            items = a
        else:
            continue
        for t in items:
            if not isinstance(t, torch.Tensor):
                continue
            if type(t) is PARAM:
                g.memory.note_param(t)
            lab = label_of(t)
            if lab is None or lab == "cpu":
                host = True
                if lab is None:
                    continue
            if dev is None or (dev == "cpu" and lab != "cpu"):
                dev = lab
            elif lab != dev and lab != "cpu" and other is None:
                other = lab
    if host and other is None and dev is not None and dev != "cpu" and in_library_step():
        other = _host_tensor_beside_gpu(g, args, kwargs)
    return dev, other


def _host_tensor_beside_gpu(g: VirtualGPUs, args: tuple, kwargs: dict) -> str | None:
    """ "cpu" when a host tensor of one or more dimensions is among a call's tensors (on a GPU too).

    A host tensor beside GPU ones is otherwise let through here: the checks above this layer know
    where PyTorch takes one (a 0-dim scalar, CPU indices into a GPU tensor, CTC's lengths). Inside a
    step of torch's own optimizers they are not running, and there every host tensor but a 0-dim one (a
    step count, a learning rate) is an optimizer state left on the CPU beside its parameter: its
    `load_state_dict` put it where the parameter was then, and the model moved after."""
    for a in (*args, *kwargs.values()):
        items = (a,) if isinstance(a, torch.Tensor) else a if isinstance(a, (list, tuple)) else ()
        for t in items:
            if isinstance(t, torch.Tensor) and t.dim() > 0 and g.device_of(t) == "cpu":
                return "cpu"
    return None


def generic(g: VirtualGPUs, func, args, kwargs):
    target = None
    if _device_ctx.CURRENT_DEVICE is not None and kwargs.get("device") is None and func in FACTORIES:
        # torch.set_default_device("cuda:1") fills in device= in a mode at the bottom of the stack,
        # below this one: fill it in here so that the factory lands on the virtual device.
        kwargs = dict(kwargs)
        kwargs["device"] = _device_ctx.CURRENT_DEVICE
    if "device" in kwargs:
        target = g.parse(kwargs["device"])
        if target is not None:
            kwargs = dict(kwargs)
            kwargs["device"] = g.backing_device
            if kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
    if kwargs.get("pin_memory"):
        # torch.empty(n, pin_memory=True), torch.empty_like(m, pin_memory=True), m.new_empty(n, pin_memory=True):
        # a staging buffer for host-to-device copies. Page-locked memory means nothing without a GPU, and a
        # CPU build has no allocator for it.
        kwargs = {**kwargs, "pin_memory": False}
    if target is None and g.backing == "meta" and func in SHAPED_FACTORIES and _on_cpu(kwargs.get("device")):
        # A model built on the CPU, then moved (`Block().to(dev)`): its CPU tensors are shapes only too,
        # labelled "cpu", so that building it costs no real memory or time.
        kwargs = dict(kwargs)
        kwargs["device"] = g.backing_device
        kwargs.pop("pin_memory", None)
        target = "cpu"
    if target is None and kwargs.get("device") is not None and _on_cpu(kwargs["device"]):
        # `torch.zeros_like(p, device="cpu")`: on the CPU as asked, not where `p` is labelled.
        target = "cpu"
    if func in FROM_VALUES:
        # torch.tensor([l_a, l_b]) of 0-dim tensors: their values read on the host, whatever their devices; the
        # result where device= says, else on the CPU. w.new_tensor(data): data copied to w's device.
        dev, other = (scan(g, args[:1], {})[0] if func is not torch.tensor else "cpu"), None
    else:
        dev, other = scan(g, args[:1], {}) if func in SHAPE_OF_OTHER else scan(g, args, kwargs)
    if func is _GETITEM and args and isinstance(args[0], torch.Tensor):
        # `x[i]` is where `x` is: CPU indices may index a GPU's tensor, a 0-dim index is read as a Python
        # int wherever it is, and GPU indices into a CPU tensor are refused (the checks report that).
        dev = g.label_of(args[0]) or ("cpu" if args[0].device.type == "cpu" else dev)
    if kwargs.get("generator") is not None:
        _check_generator(kwargs["generator"], target or dev)
        kwargs["generator"] = real_generator(kwargs["generator"])
    if dev is not None and dev.startswith("cuda") and getattr(func, "__name__", "") in REFUSE_CPU_SCALARS:
        _check_cpu_scalars(g, func, args, kwargs, dev)
    if _autograd_entry(func):
        return _autograd_call(g, func, args, kwargs)
    if other is not None and getattr(func, "__name__", "").startswith(PER_INDEX_PREFIXES):
        groups = _index_groups(g, args, kwargs)
        if len(groups) > 1:
            return _per_device(g, func, args, kwargs, groups)
    if other is not None and func not in MIXES_DEVICES and not assigns_through_a_view(func, args, torch.Tensor):
        # Where the checks saw the call they reported it first; where they did not (a library optimizer's
        # step, which runs outside the checking mode: LBFGS concatenates every gradient), stopped.py makes
        # it MP001 at the user's line (never twice: it skips a line that holds a device finding).
        raise _refusal(
            f"Expected all tensors to be on the same device, but found at least two devices, {dev} and {other}!"
        )
    if dev is not None and dev.startswith("cuda") and func in AUTOCAST_ANY and torch.is_autocast_enabled("cuda"):
        args, kwargs = cast_inputs(func, args, kwargs)
    lab = target or dev
    writes = _writes_into_first(func, args)
    if writes:
        # `host.copy_(h)`, `ring[i].copy_(h)`, `host[:] = h`: written where the first tensor is. A GPU's data
        # copied into a host buffer leaves the buffer on the host (the call's ops must not label it a GPU's).
        lab = g.label_of(args[0]) or ("cpu" if args[0].device.type == "cpu" else None)
    # What the call's aten ops make goes where its outputs go (allocations.py); a backward's ops go
    # where their own inputs are, one node's device at a time.
    # A call some of whose outputs stay on the CPU labels its outputs itself (below): its aten ops would
    # otherwise give them all the call's device, and a storage keeps its first label.
    host = HOST_OUTPUTS.get(getattr(func, "__name__", ""))
    g.tls.op_device = None if func in AUTOGRAD_ENTRIES else (UNKNOWN if host is not None else (lab or UNKNOWN))
    try:
        out = func(*args, **kwargs)
    except (RuntimeError, NotImplementedError, AssertionError, TypeError) as e:
        out = _again_shapes_only(g, func, args, kwargs, e)
        if out is e:
            clear = _explain(g, func, e, dev or target)
            if clear is e:
                raise
            raise clear from e
    if writes and lab is not None and args[0].requires_grad:
        _gradient_to_source(g, func, args, kwargs, lab)
    if lab is not None and out is not None:
        if host is not None and isinstance(out, tuple):  # sizes PyTorch keeps on the CPU stay there
            g.label_outputs(tuple(o for i, o in enumerate(out) if i not in host), lab, args[0] if args else None)
        else:
            g.label_outputs(out, lab, args[0] if args else None)
    return out


def _gradient_to_source(g: VirtualGPUs, func: Any, args: tuple, kwargs: dict, lab: str) -> None:
    """`buf.copy_(h)`, `buf[:, :k].copy_(h)` or `buf[i] = h` with `h` on another device: in backward, the gradient
    for `h` goes back to `h`'s device, as CUDA's copy backward does (`grad.to(h.device)`: on the backing device,
    no op at all). The write's node is the written tensor's (CopyBackwards), or its base's for a view
    (CopySlices); either way its second gradient input is the source's."""
    src = args[1] if func is torch.Tensor.copy_ and len(args) > 1 else args[2] if len(args) > 2 else kwargs.get("src")
    if isinstance(src, torch.Tensor) and src.requires_grad:
        from_dev = g.label_of(src) or ("cpu" if src.device.type == "cpu" else None)
        if from_dev is not None and from_dev != lab:
            written = args[0]._base if args[0]._base is not None else args[0]
            copy_gradient_back(g, written, from_dev, only=1)


_GETITEM = torch.Tensor.__getitem__


def _writes_into_first(func: Any, args: tuple) -> bool:
    """A copy into the first tensor, which stays where it is: `copy_`, and an assignment through a view."""
    if not args or not isinstance(args[0], torch.Tensor):
        return False
    return func is torch.Tensor.copy_ or assigns_through_a_view(func, args, torch.Tensor)


# Calls whose CUDA kernels refuse a 0-dim CPU tensor that most ops take as a scalar (each seen raising on an
# H200, torch 2.11: `x.clamp(min=t)`, `F.mse_loss(a, t)`, `F.linear(x, w, t)`, `torch.addmm(t, a, b)`).
REFUSE_CPU_SCALARS = frozenset(
    {
        "clamp",
        "clamp_",
        "clamp_min",
        "clamp_min_",
        "clamp_max",
        "clamp_max_",
        "mse_loss",
        "smooth_l1_loss",
        "binary_cross_entropy",
        "linear",
        "addmm",
        "addmv",
        "baddbmm",
    }
)


def _check_cpu_scalars(g: VirtualGPUs, func: Any, args: tuple, kwargs: dict, dev: str) -> None:
    for a in (*args, *kwargs.values()):
        # (a tensor no virtual GPU labelled is the CPU's, or a meta-backed one labelled "cpu")
        if isinstance(a, torch.Tensor) and a.dim() == 0 and (g.label_of(a) or a.device.type) == "cpu":
            raise _refusal(
                f"Expected all tensors to be on the same device, but found at least two devices, {dev} and cpu! "
                f"({call_name(func)} on CUDA refuses a 0-dim CPU tensor that most ops take as a scalar)"
            )


def _check_generator(gen: Any, lab: str | None) -> None:
    """A generator draws only for tensors of its device type (CUDA checks the type, not the index)."""
    want = "cuda" if lab is not None and lab.startswith("cuda") else "cpu"
    have = generator_type(gen)
    if have != want:
        owner = "the CPU's" if have == "cpu" else "a CUDA one"
        raise _refusal(
            f"Expected a '{want}' device type for generator but found '{have}' (the generator is {owner}; the "
            f"tensor it draws for is on {lab or 'cpu'})"
        )


def _refusal(message: str) -> VirtualDeviceError:
    """What CUDA would raise here, marked as seen by no check: stopped.py makes it MP001 at the user's line."""
    error = VirtualDeviceError(message)
    error.mpcheck_unchecked = True  # type: ignore[attr-defined]
    return error


def _index_groups(g: VirtualGPUs, args: tuple, kwargs: dict) -> list[list[int]]:
    """The indices of a per-index call's lists, grouped by the device of the first list's tensor."""
    firsts = next(
        a for a in (*args, *kwargs.values()) if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)
    )
    by_dev: dict[str | None, list[int]] = {}
    for i, t in enumerate(firsts):
        by_dev.setdefault(g.label_of(t), []).append(i)
    return list(by_dev.values())


def _per_device(g: VirtualGPUs, func, args: tuple, kwargs: dict, groups: list[list[int]]):
    """A call that pairs its lists index by index (`torch._foreach_lerp_(ema, params, w)`) over lists
    that span several virtual GPUs: PyTorch runs it tensor by tensor then; here, one call per device
    (each checked as any call is: a pair of tensors on two devices still fails), the outputs put back
    in order."""
    n = sum(len(idx) for idx in groups)

    def pick(a: Any, idx: list[int]) -> Any:
        return [a[i] for i in idx] if isinstance(a, (list, tuple)) and len(a) == n else a

    outs: list[Any] = [None] * n
    returned_list = False
    for idx in groups:
        out = generic(g, func, tuple(pick(a, idx) for a in args), {k: pick(v, idx) for k, v in kwargs.items()})
        if isinstance(out, (list, tuple)):
            returned_list = True
            for i, o in zip(idx, out):
                outs[i] = o
    return outs if returned_list else None


def _autograd_entry(func: Any) -> bool:
    """torch.autograd.grad / backward: outputs and inputs from anywhere in the graph, on any devices."""
    return getattr(func, "__module__", None) == "torch.autograd" and getattr(func, "__name__", "") in (
        "grad",
        "backward",
    )


def _autograd_call(g: VirtualGPUs, func, args: tuple, kwargs: dict):
    """torch.autograd.grad / backward: run as they are; each gradient `grad` returns is on its input's
    device (not on the first device among the arguments, as a generic op's result)."""
    out = func(*args, **kwargs)
    if getattr(func, "__name__", "") == "grad" and isinstance(out, tuple):
        inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
        inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs or ())
        for inp, grad in zip(inputs, out):
            lab = g.label_of(inp) if isinstance(inp, torch.Tensor) else None
            if lab is not None and isinstance(grad, torch.Tensor):
                g.label(grad, lab)
    return out


def _on_cpu(device: Any) -> bool:
    """Does a factory's `device=` value (None: the default device) put its tensor on the CPU?"""
    if device is None:
        return True
    if isinstance(device, str):
        return device == "cpu"
    return isinstance(device, torch.device) and device.type == "cpu"


def _again_shapes_only(g: VirtualGPUs, func, args: tuple, kwargs: dict, error: BaseException) -> Any:
    """With meta backing, a call that mixed shape-only tensors with real ones (a 0-dim `torch.tensor(0.5)`
    as `masked_fill`'s value, lengths that PyTorch keeps on the host, a CPU tensor made from data beside
    one built on the CPU as a shape) and failed: PyTorch's meta kernels refuse what its CUDA and CPU
    kernels accept (`Tensor on device cpu is not on the expected device meta`). The virtual devices were
    checked already (scan()), so the call runs again with the real tensors as shapes, each keeping its
    virtual device. `error` is returned where there is nothing to retry; the retry's own error is raised
    (explained) where it fails too: an op that needs values."""
    if g.backing != "meta":
        return error
    real: dict[int, Any] = {}

    def gather(a: Any) -> None:
        if isinstance(a, torch.Tensor):
            if a.device.type != "meta" and id(a) not in real:
                real[id(a)] = a
        elif isinstance(a, (list, tuple)):
            for x in a:
                gather(x)

    for a in (*args, *kwargs.values()):
        gather(a)
    if not real:
        return error
    before = g.tls.op_device
    g.tls.op_device = UNKNOWN  # the shape copies are labelled below, with their tensors' own devices
    try:
        shapes = {}
        for key, t in real.items():
            m = t.detach().to("meta").requires_grad_(t.requires_grad) if t.is_leaf else t.to("meta")
            g.label(m, g.label_of(t) or "cpu")
            shapes[key] = m
    finally:
        g.tls.op_device = before

    def swap(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return shapes.get(id(a), a)
        if isinstance(a, (list, tuple)) and any(isinstance(x, (torch.Tensor, list, tuple)) for x in a):
            return type(a)(swap(x) for x in a) if not hasattr(a, "_fields") else type(a)(*(swap(x) for x in a))
        return a

    args = tuple(swap(a) for a in args)
    kwargs = {k: swap(v) for k, v in kwargs.items()}
    try:
        return func(*args, **kwargs)
    except (RuntimeError, NotImplementedError, AssertionError, TypeError) as again:
        clear = _explain(g, func, again, None)
        raise clear from again


def _explain(g: VirtualGPUs, func, e: BaseException, dev: str | None) -> BaseException:
    """Turn errors that come from the virtual devices themselves into clear dry-run messages."""
    if isinstance(e, (DryRunLimitError, VirtualDeviceError)):
        return e
    msg = str(e)
    first = msg.strip().splitlines()[0] if msg.strip() else type(e).__name__
    if first.startswith("Could not run ") and ". " in first:
        first = first.split(". ", 1)[0]  # the dispatcher's first sentence, not its list of every backend
    if g.backing == "meta" and ("meta" in msg.lower() or "data-dependent" in msg or "data dependent" in msg):
        return MetaValueError(
            f"{user_line()}: {call_name(func)}() needs tensor values (its result depends on them), but with "
            f"--backing meta tensors hold shapes only ({first}). Run with --backing cpu (real values, small "
            f"models) to go past this line."
        )
    if dev is not None and dev.startswith("cuda") and NEEDS_CUDA.search(msg):
        return DryRunLimitError(
            f"{user_line()}: {call_name(func)}() needs a real CUDA kernel ({first}). Custom CUDA kernels and "
            f"extensions cannot run on virtual GPUs; guard them (e.g. a CPU fallback) to dry-run the rest."
        )
    return e
