"""Virtual GPUs: `cuda:0..N-1` on a machine with none.

A tensor's C++ device cannot be `cuda` on a CPU build (autograd aborts the
process), so a virtual device is a Python-side label kept on the tensor's
untyped storage: PyTorch keeps that storage object for the storage's
lifetime, so views, `param.data = ...` and `Module.to()` keep the label.
The data itself lives on the *backing* device: `cpu` (real values) or
`meta` (shapes only, any size).

One TorchFunctionMode (`_VirtualMode`) does the rest:
- rewrites `device=` arguments and `Tensor.to/.cuda/.cpu` onto the backing
  device, labelling the results (a move always copies, as a real one does);
- answers `.device`, `.is_cuda`, `.is_cpu`, `.is_meta`, `.get_device()` with
  the virtual device;
- labels every other op's outputs with its inputs' device, and `.grad` with
  its parameter's (gradients are made by autograd in C++, unseen);
- behaves like PyTorch where PyTorch refuses (two CUDA devices in one op,
  `.numpy()` of a CUDA tensor); with meta backing, stops with a clear message
  where Python needs a value;
- emulates `autocast("cuda")` (a no-op on CPU tensors otherwise): see
  `_AUTOCAST_LOWER` / `_AUTOCAST_FP32`.
Around it, `torch.cuda` queries, `set_device`, `torch.cuda.device`, streams,
events, memory queries, the foreach/optimizer grouping by device, DataParallel
and DDP are patched while the virtual GPUs are active.

The checking core (core.py) sits *above* this mode on the mode stack and asks
`device_of()`; it never reads `t.device` itself.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from types import SimpleNamespace
from typing import Any, Callable

import torch
import torch.nn.functional as F
import torch.utils._device as _device_ctx
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.overrides import TorchFunctionMode

from mpcheck.runtime.virtual.links import Link, ModelTiming, parse_link

LABEL = "_mpcheck_vdev"
DEFAULT_DEVICE_MEMORY = 80 * 2**30  # an 80 GiB A100/H100; --device-memory changes it
VIRTUAL_GPU_NAME = "mpcheck virtual GPU"


class DryRunLimitError(RuntimeError):
    """A documented limit of the dry run was reached; the message names the user's line."""


class MetaValueError(DryRunLimitError):
    """Python needed a tensor's value, which meta backing does not have."""


class VirtualDeviceError(RuntimeError):
    """What PyTorch itself would raise on real GPUs (mixed devices, bad ordinal, numpy of a CUDA tensor)."""


def _user_site() -> str:
    from mpcheck.runtime.checks.sites import user_site

    s = user_site(2)
    return f"{s.path}:{s.line}" if s.line else "<unknown line>"


def _name(func: Any) -> str:
    n = getattr(func, "__name__", None)
    if n == "__get__":
        n = getattr(getattr(func, "__self__", None), "__name__", "attribute")
    return n or str(func)


# -- autocast("cuda") emulation ----------------------------------------------------
# On a CPU build autocast("cuda") sets its flag, but CPU and meta tensors never
# reach the CUDA autocast kernels, so nothing would be cast. The mode casts the
# inputs of CUDA autocast's main lists itself, at the Python call: ops that run
# in the lower precision, and ops that run in float32. (Ops autocast promotes,
# such as cat, are left alone: they see the dtypes they are given.)
def _autocast_lists() -> tuple[set, set]:
    T = torch.Tensor
    lower = {
        F.linear, F.bilinear, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d,
        F.conv_transpose3d, F.scaled_dot_product_attention, F.prelu,
        torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.addbmm, torch.baddbmm, torch.addmv, torch.mv,
        torch.einsum, torch.chain_matmul,
        T.matmul, T.__matmul__, T.__rmatmul__, T.mm, T.bmm, T.addmm, T.baddbmm, T.mv,
    }
    fp32 = {
        F.softmax, F.log_softmax, F.softmin, F.layer_norm, F.group_norm, F.cross_entropy, F.nll_loss, F.mse_loss,
        F.l1_loss, F.smooth_l1_loss, F.kl_div, F.binary_cross_entropy_with_logits, F.softplus, F.normalize,
        F.cosine_similarity, torch.softmax, torch.log_softmax, torch.layer_norm, torch.group_norm, torch.norm,
        torch.exp, torch.log, torch.log1p, torch.expm1, torch.pow, torch.rsqrt, torch.reciprocal, torch.cumsum,
        torch.cumprod, torch.prod, torch.sum,
        T.softmax, T.log_softmax, T.norm, T.exp, T.log, T.log1p, T.pow, T.__pow__, T.rsqrt, T.reciprocal,
        T.cumsum, T.sum, T.prod,
    }
    return lower, fp32


# -- the virtual GPUs ---------------------------------------------------------------
class VirtualGPUs:
    """N virtual CUDA devices backed by `cpu` or `meta` tensors; also the core's `Devices` for the dry run."""

    name = "virtual"

    def __init__(
        self,
        gpus: int,
        *,
        backing: str = "cpu",
        device_memory: int = DEFAULT_DEVICE_MEMORY,
        link: str | float | Link = "nvlink",
    ) -> None:
        if not isinstance(gpus, int) or gpus < 1:
            raise ValueError(f"gpus must be a positive integer, got {gpus!r}")
        if backing not in ("cpu", "meta"):
            raise ValueError(f"backing must be 'cpu' or 'meta', got {backing!r}")
        self.n = gpus
        self.backing = backing
        self.backing_device = torch.device(backing)
        self.device_memory = int(device_memory)
        self.link = parse_link(link)
        self.current = 0
        self.devices = [f"cuda:{i}" for i in range(gpus)]
        # Live labelled storages on the virtual GPUs: id(storage) -> (device, nbytes, weakref).
        self.live: dict[int, tuple[str, int, Any]] = {}
        self.allocated = {d: 0 for d in self.devices}
        self.peak = dict(self.allocated)
        # What the memory estimate needs (estimate.py reads these).
        self.params: dict[int, weakref.ref] = {}
        # Storages known to hold parameters: their bytes per device, now and at most.
        self.param_keys: set[int] = set()
        self.param_bytes = {d: 0 for d in self.devices}
        self.param_peak = {d: 0 for d in self.devices}
        self.optimizers: dict[int, weakref.ref] = {}
        self.backward_calls = 0
        self.activation_peak = {d: 0 for d in self.devices}
        self.static_peak: dict[str, dict[str, int]] = {}
        # Limits met on the way that did not stop the run (event timing, ...): (site, text).
        self.limits: list[tuple[str, str]] = []
        self._limit_seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._parse_cache: dict[Any, str | None] = {}
        self._mode: _VirtualMode | None = None
        self._patches: _Patches | None = None
        self._hooks: list[Any] = []
        self.active = False
        # The function modes to restore where autograd runs Python code without them (a custom
        # Function's backward, activation checkpointing's recompute): this mode, and the checking
        # mode above it once the dry run has started its session.
        self.mode_stack: list[Any] = []

    # -- labels -----------------------------------------------------------------
    def label_of(self, t: torch.Tensor) -> str | None:
        try:
            return getattr(t.untyped_storage(), LABEL, None)
        except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested, functional wrappers
            return None

    def device_of(self, t: torch.Tensor) -> str:
        """The virtual device of `t` ("cuda:1"), else its real one ("cpu", "meta")."""
        lab = self.label_of(t)
        if lab is not None:
            return lab
        d = t.device
        return d.type if d.index is None else f"{d.type}:{d.index}"

    def _label(self, t: torch.Tensor, dev: str) -> None:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return
        if getattr(st, LABEL, None) is not None:
            return
        if dev == "cpu" and self.backing == "cpu":
            return  # unlabelled CPU-backed tensors are real CPU tensors
        setattr(st, LABEL, dev)
        if dev.startswith("cuda"):
            self._register(st, dev)

    def _register(self, st: Any, dev: str) -> None:
        key = id(st)
        nbytes = st.nbytes()
        live = self.live

        def _freed(_ref: Any, key: int = key) -> None:
            entry = live.pop(key, None)
            if entry is not None:
                self.allocated[entry[0]] -= entry[1]
                if key in self.param_keys:
                    self.param_keys.discard(key)
                    self.param_bytes[entry[0]] -= entry[1]

        with self._lock:
            old = live.pop(key, None)
            if old is not None:
                self.allocated[old[0]] -= old[1]
            live[key] = (dev, nbytes, weakref.ref(st, _freed))
            cur = self.allocated[dev] + nbytes
            self.allocated[dev] = cur
            if cur > self.peak[dev]:
                self.peak[dev] = cur

    def _label_outputs(self, out: Any, dev: str, first: Any) -> None:
        if isinstance(out, torch.Tensor):
            if out is not first:  # an in-place op keeps its own device
                self._label(out, dev)
        elif isinstance(out, (tuple, list)):
            for o in out:
                if isinstance(o, torch.Tensor) and o is not first:
                    self._label(o, dev)

    def _note_param(self, p: torch.Tensor) -> None:
        ref = self.params.get(id(p))
        if ref is None or ref() is not p:
            self.params[id(p)] = weakref.ref(p)
        self._mark_param_storage(p)

    def _mark_param_storage(self, t: torch.Tensor) -> None:
        try:
            key = id(t.untyped_storage())
        except (RuntimeError, NotImplementedError, TypeError):
            return
        if key in self.param_keys:
            return
        entry = self.live.get(key)
        if entry is None:
            return
        dev, nbytes, _ref = entry
        self.param_keys.add(key)
        cur = self.param_bytes[dev] + nbytes
        self.param_bytes[dev] = cur
        if cur > self.param_peak[dev]:
            self.param_peak[dev] = cur

    # -- device strings -----------------------------------------------------------
    def parse(self, d: Any) -> str | None:
        """The virtual device meant by a `device=` value ("cuda:k"), or None when it is not a CUDA device."""
        if d is None:
            return None
        key = d if isinstance(d, (str, int)) else None
        if key is not None and key in self._parse_cache and not (isinstance(d, str) and d == "cuda"):
            return self._parse_cache[key]
        if isinstance(d, int) and not isinstance(d, bool):
            typ, idx = "cuda", d
        else:
            try:
                dev = d if isinstance(d, torch.device) else torch.device(d)
            except (RuntimeError, TypeError):
                return None
            typ, idx = dev.type, dev.index
        if typ != "cuda":
            out = None
        else:
            if idx is None:
                return f"cuda:{self.current}"  # depends on set_device: never cached
            if not 0 <= idx < self.n:
                raise VirtualDeviceError(
                    f"CUDA error: invalid device ordinal (cuda:{idx} does not exist: the dry run has "
                    f"{self.n} virtual GPU{'s' if self.n > 1 else ''}, cuda:0..cuda:{self.n - 1})"
                )
            out = f"cuda:{idx}"
        if key is not None:
            self._parse_cache[key] = out
        return out

    def normalize(self, device_like: Any) -> str | None:
        """The core's Devices.normalize: 'cuda' / 1 / torch.device('cuda', 1) -> 'cuda:1'; 'cpu', 'meta' as is."""
        if device_like is None:
            return None
        v = self.parse(device_like)
        if v is not None:
            return v
        try:
            d = device_like if isinstance(device_like, torch.device) else torch.device(device_like)
        except (RuntimeError, TypeError):
            return None
        return d.type if d.index is None else f"{d.type}:{d.index}"

    def peak_allocated(self, device: str) -> int | None:
        return self.peak.get(device)

    def index(self, d: Any) -> int:
        if d is None:
            return self.current
        if isinstance(d, int):
            return d
        v = self.parse(d)
        if v is None:
            raise ValueError(f"expected a CUDA device, got {d!r}")
        return int(v.split(":")[1])

    # -- moves (also the core's Devices.move) -----------------------------------------
    def transfer(self, t: torch.Tensor, dst: str, *, dtype: Any = None, memory_format: Any = None) -> torch.Tensor:
        """A copy of `t` on `dst` ("cuda:k" or "cpu"), differentiable like `Tensor.to`."""
        kw: dict[str, Any] = {"copy": True}
        if dtype is not None:
            kw["dtype"] = dtype
        if memory_format is not None:
            kw["memory_format"] = memory_format
        with torch._C.DisableTorchFunction():
            out = torch.Tensor.to(t, self.backing_device, **kw)
        self._label(out, dst)
        return out

    def move(self, t: torch.Tensor, device: str) -> torch.Tensor:
        return self.transfer(t, device)

    def start_transfer(self, src: str, dst: str, nbytes: int) -> ModelTiming:
        return ModelTiming(self.link.time_ms(nbytes))

    # -- limits ---------------------------------------------------------------------
    def note_limit(self, text: str) -> None:
        site = _user_site()
        if (site, text) not in self._limit_seen:
            self._limit_seen.add((site, text))
            self.limits.append((site, text))

    def limit(self, what: str, why: str) -> DryRunLimitError:
        return DryRunLimitError(f"{_user_site()}: {what} is beyond the dry run: {why}")

    # -- install / remove ------------------------------------------------------------
    def __enter__(self) -> "VirtualGPUs":
        if self.active:
            raise RuntimeError("these virtual GPUs are already active")
        patches = _Patches()
        try:
            _ACTIVE.append(self)
            _install_patches(self, patches)
            self._hooks.append(register_optimizer_step_post_hook(self._after_step))
            self._mode = _VirtualMode(self)
            self._mode.__enter__()
            self.mode_stack = [self._mode]
        except BaseException:
            for h in self._hooks:
                h.remove()
            self._hooks.clear()
            patches.restore()
            _ACTIVE.remove(self)
            raise
        self._patches = patches
        self.active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.active = False
        try:
            if self._mode is not None:
                self._mode.__exit__(*exc)
        finally:
            self._mode = None
            self.mode_stack = []
            for h in self._hooks:
                h.remove()
            self._hooks.clear()
            if self._patches is not None:
                self._patches.restore()
                self._patches = None
            if self in _ACTIVE:
                _ACTIVE.remove(self)

    # -- memory snapshots (the numbers are interpreted in estimate.py) ---------------------
    def _before_backward(self) -> None:
        from mpcheck.runtime.virtual.memory import snapshot_activations

        self.backward_calls += 1
        snapshot_activations(self)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        from mpcheck.runtime.virtual.memory import snapshot_step
        from mpcheck.runtime.capture.hooks import in_outer_step

        self.optimizers[id(optimizer)] = weakref.ref(optimizer)
        if not in_outer_step():  # a step inside a step (super().step()): the outer one reads memory
            snapshot_step(self)


# -- the mode ---------------------------------------------------------------------------
_VALUE_FUNCS: dict[Any, str] = {}
_SPECIAL: dict[Any, Callable] = {}
_AUTOCAST_LOWER: set = set()
_AUTOCAST_FP32: set = set()
_PARAM = torch.nn.Parameter
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


class _VirtualMode(TorchFunctionMode):
    def __init__(self, gpus: VirtualGPUs) -> None:
        super().__init__()
        self.g = gpus

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        h = _SPECIAL.get(func)
        if h is not None:
            return h(self.g, func, args, kwargs)
        return _generic(self.g, func, args, kwargs)


def _scan(g: VirtualGPUs, args: tuple, kwargs: dict) -> tuple[str | None, str | None]:
    """(the op's device label, a second CUDA label that conflicts with it)."""
    dev = None
    other = None
    label_of = g.label_of
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
            if type(t) is _PARAM:
                g._note_param(t)
            lab = label_of(t)
            if lab is None:
                continue
            if dev is None or (dev == "cpu" and lab != "cpu"):
                dev = lab
            elif lab != dev and lab != "cpu" and other is None:
                other = lab
    return dev, other


def _generic(g: VirtualGPUs, func, args, kwargs):
    target = None
    if _device_ctx.CURRENT_DEVICE is not None and kwargs.get("device") is None and func in _FACTORIES:
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
    dev, other = _scan(g, args, kwargs)
    if other is not None and func is not torch.Tensor.copy_:
        raise VirtualDeviceError(
            f"Expected all tensors to be on the same device, but found at least two devices, {dev} and {other}!"
        )
    if dev is not None and dev.startswith("cuda") and func in _AUTOCAST_ANY and torch.is_autocast_enabled("cuda"):
        args, kwargs = _autocast(func, args, kwargs)
    try:
        out = func(*args, **kwargs)
    except (RuntimeError, NotImplementedError, AssertionError, TypeError) as e:
        clear = _explain(g, func, e, dev or target)
        if clear is e:
            raise
        raise clear from e
    lab = target or dev
    if lab is not None and out is not None:
        g._label_outputs(out, lab, args[0] if args else None)
    return out


# What a kernel that only exists for CUDA says when it is handed a CPU or meta tensor.
_NEEDS_CUDA = __import__("re").compile(
    r"not compiled with CUDA|must be (a )?CUDA|is_cuda\(\)|CUDA tensor|expected .*cuda|'CUDA' backend|"
    r"CUDA error|no CUDA|requires CUDA|only supports CUDA|CUDA (is )?not available",
    __import__("re").IGNORECASE,
)


def _explain(g: VirtualGPUs, func, e: BaseException, dev: str | None) -> BaseException:
    """Turn errors that come from the virtual devices themselves into clear dry-run messages."""
    if isinstance(e, (DryRunLimitError, VirtualDeviceError)):
        return e
    msg = str(e)
    first = msg.strip().splitlines()[0] if msg.strip() else type(e).__name__
    if g.backing == "meta" and ("meta" in msg.lower() or "data-dependent" in msg or "data dependent" in msg):
        return MetaValueError(
            f"{_user_site()}: {_name(func)}() needs tensor values (its result depends on them), but with "
            f"--backing meta tensors hold shapes only ({first}). Run with --backing cpu (real values, small "
            f"models) to go past this line."
        )
    if dev is not None and dev.startswith("cuda") and _NEEDS_CUDA.search(msg):
        return DryRunLimitError(
            f"{_user_site()}: {_name(func)}() needs a real CUDA kernel ({first}). Custom CUDA kernels and "
            f"extensions cannot run on virtual GPUs; guard them (e.g. a CPU fallback) to dry-run the rest."
        )
    return e


def _autocast(func, args, kwargs):
    target = torch.get_autocast_dtype("cuda") if func in _AUTOCAST_LOWER else torch.float32

    def cast(a):
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype not in (torch.float64, target):
            return torch.Tensor.to(a, target)
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            return type(a)(cast(x) for x in a)
        return a

    with torch._C.DisableTorchFunction():
        return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


_AUTOCAST_ANY: set = set()
_FACTORIES: set = set()


# -- special handlers -------------------------------------------------------------------
def _to(g: VirtualGPUs, func, args, kwargs):
    t = args[0]
    rest = args[1:]
    other = None
    if rest and isinstance(rest[0], torch.Tensor):
        other = rest[0]
    elif isinstance(kwargs.get("other"), torch.Tensor):
        other = kwargs["other"]
    if other is not None:
        dst = g.device_of(other)
        dtype = other.dtype
        mf = kwargs.get("memory_format")
    else:
        device, dtype, _nb, mf = torch._C._nn._parse_to(*rest, **{k: v for k, v in kwargs.items() if k != "copy"})
        dst = g.parse(device) if device is not None else None
        if device is not None and dst is None:
            dst = "meta" if device.type == "meta" else ("cpu" if device.type == "cpu" else None)
            if dst is None:
                return _generic(g, func, args, kwargs)
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
        return _generic(g, func, (t,), kw)
    return _transfer_tensor(g, t, dst, dtype=dtype, memory_format=mf)


def _transfer_tensor(g: VirtualGPUs, t, dst: str, **kw):
    """g.transfer, and a moved parameter's copy counted as parameter memory on `dst`."""
    out = g.transfer(t, dst, **kw)
    if type(t) is _PARAM:
        g._note_param(t)
        g._mark_param_storage(out)
    return out


def _cuda(g: VirtualGPUs, func, args, kwargs):
    t = args[0]
    device = args[1] if len(args) > 1 else kwargs.get("device")
    dst = f"cuda:{g.current}" if device is None else g.parse(device if not isinstance(device, int) else f"cuda:{device}")
    if dst is None:
        raise VirtualDeviceError(f"Invalid device, must be cuda device, got {device!r}")
    if g.device_of(t) == dst:
        return t
    return _transfer_tensor(g, t, dst, memory_format=kwargs.get("memory_format"))


def _cpu(g: VirtualGPUs, func, args, kwargs):
    t = args[0]
    if g.label_of(t) in (None, "cpu"):
        return _generic(g, func, args, kwargs)
    return g.transfer(t, "cpu", memory_format=kwargs.get("memory_format"))


def _device_get(g: VirtualGPUs, func, args, kwargs):
    lab = g.label_of(args[0])
    if lab is None:
        return func(*args, **kwargs)
    return torch.device(lab)


def _is_cuda_get(g, func, args, kwargs):
    lab = g.label_of(args[0])
    return func(*args) if lab is None else lab.startswith("cuda")


def _is_cpu_get(g, func, args, kwargs):
    lab = g.label_of(args[0])
    return func(*args) if lab is None else lab == "cpu"


def _is_meta_get(g, func, args, kwargs):
    return func(*args) if g.label_of(args[0]) is None else False


def _get_device(g, func, args, kwargs):
    lab = g.label_of(args[0])
    if lab is None:
        return func(*args, **kwargs)
    return int(lab.split(":")[1]) if lab.startswith("cuda") else -1


def _grad_get(g, func, args, kwargs):
    grad = func(*args, **kwargs)
    if grad is not None:
        lab = g.label_of(args[0])
        if lab is not None and g.label_of(grad) is None:
            g._label(grad, lab)
    return grad


def _value(g: VirtualGPUs, func, args, kwargs):
    t = args[0]
    lab = g.label_of(t)
    if lab is not None and g.backing == "meta" and t.is_meta:
        if func is torch.Tensor.item and _called_from("grad_scaler.py"):
            return 0.0  # GradScaler asks whether any gradient was inf/nan: on meta, assume none
        what = _VALUE_FUNCS.get(func, _name(func))
        raise MetaValueError(
            f"{_user_site()}: {what} needs the tensor's value, but with --backing meta tensors hold shapes only. "
            f"Run with --backing cpu (real values, small models) to go past this line."
        )
    if lab is not None and lab.startswith("cuda") and func in (torch.Tensor.numpy, torch.Tensor.__array__):
        raise VirtualDeviceError(
            f"can't convert {lab} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."
        )
    return func(*args, **kwargs)


def _called_from(filename: str) -> bool:
    f = sys._getframe(2)
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


def _repr(g: VirtualGPUs, func, args, kwargs):
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


def _noop_self(g, func, args, kwargs):
    return args[0] if func is torch.Tensor.pin_memory else None


def _is_pinned(g, func, args, kwargs):
    return False if g.label_of(args[0]) is not None else func(*args, **kwargs)


def _backward(g: VirtualGPUs, func, args, kwargs):
    g._before_backward()
    return _generic(g, func, args, kwargs)


def _flash_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    out, _lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )
    return out


def _sdpa(g: VirtualGPUs, func, args, kwargs):
    # On meta tensors PyTorch picks the math path, which saves the whole T x T attention matrix for
    # backward; a GPU runs a flash / memory-efficient kernel that saves only the log-sum-exp. Use the
    # flash kernel's meta function so that the activation estimate is a GPU's.
    if g.backing == "meta" and not kwargs.get("enable_gqa") and len(args) >= 3:
        q = args[0]
        if isinstance(q, torch.Tensor) and q.dim() == 4 and (g.label_of(q) or "").startswith("cuda"):
            return _generic(g, _flash_sdpa, args, kwargs)
    return _generic(g, func, args, kwargs)


def _storage(g, func, args, kwargs):
    return func(*args, **kwargs)


def _build_tables() -> None:
    if _SPECIAL:
        return
    T = torch.Tensor
    _SPECIAL.update(
        {
            T.to: _to,
            T.cuda: _cuda,
            T.cpu: _cpu,
            T.device.__get__: _device_get,
            T.is_cuda.__get__: _is_cuda_get,
            T.is_cpu.__get__: _is_cpu_get,
            T.is_meta.__get__: _is_meta_get,
            T.get_device: _get_device,
            T.grad.__get__: _grad_get,
            T.__repr__: _repr,
            T.pin_memory: _noop_self,
            T.record_stream: _noop_self,
            T.is_pinned: _is_pinned,
            T.backward: _backward,
            T.untyped_storage: _storage,
            F.scaled_dot_product_attention: _sdpa,
        }
    )
    _VALUE_FUNCS.update(
        {
            T.item: "`.item()`",
            T.tolist: "`.tolist()`",
            T.__bool__: "`bool(tensor)` (an `if` or `while` on a tensor)",
            T.__int__: "`int(tensor)`",
            T.__float__: "`float(tensor)`",
            T.__index__: "using a tensor as an index",
            T.__complex__: "`complex(tensor)`",
            T.numpy: "`.numpy()`",
            T.__array__: "converting to a NumPy array",
            T.__format__: "formatting a tensor's value (f-string)",
            T.is_nonzero: "`.is_nonzero()`",
            T.equal: "`.equal()`",
            T.allclose: "`.allclose()`",
            torch.equal: "`torch.equal()`",
            torch.allclose: "`torch.allclose()`",
            torch.is_nonzero: "`torch.is_nonzero()`",
        }
    )
    for f in _VALUE_FUNCS:
        _SPECIAL[f] = _value
    _FACTORIES.update(_device_ctx._device_constructors())
    lower, fp32 = _autocast_lists()
    lower.add(_flash_sdpa)
    _AUTOCAST_LOWER.update(lower)
    _AUTOCAST_FP32.update(fp32)
    _AUTOCAST_ANY.update(lower | fp32)


# -- patches ---------------------------------------------------------------------------
class _Patches:
    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any, bool]] = []

    def set(self, obj: Any, name: str, value: Any) -> None:
        if isinstance(obj, type):
            # The raw descriptor from the class dict: getattr would give a bound classmethod.
            had = name in vars(obj)
            old = vars(obj).get(name)
        else:
            had = hasattr(obj, name)
            old = getattr(obj, name, None)
        self._saved.append((obj, name, old, had))
        setattr(obj, name, value)

    def set_item(self, d: dict, key: Any, value: Any) -> None:
        self._saved.append((d, key, d.get(key), key in d))
        d[key] = value

    def restore(self) -> None:
        while self._saved:
            obj, name, old, had = self._saved.pop()
            if isinstance(obj, dict):
                if had:
                    obj[name] = old
                else:
                    obj.pop(name, None)
            elif had:
                setattr(obj, name, old)
            else:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass


class VirtualStream(torch.Stream):
    """A CUDA stream that orders nothing: every op on virtual GPUs runs at once, in program order.
    (A torch.Stream underneath, on the CPU, so that `tensor.record_stream(s)` accepts it.)"""

    def __new__(cls, device: Any = None, priority: int = 0, **_: Any) -> "VirtualStream":
        return super().__new__(cls, device="cpu")

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        g = _ACTIVE[-1]
        self._vdevice = torch.device(f"cuda:{g.index(device)}")
        self.priority = priority
        self.cuda_stream = 0

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self._vdevice

    def wait_event(self, event: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> "VirtualEvent":
        event = event if event is not None else VirtualEvent()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def is_capturing(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<virtual cuda stream on {self._vdevice}>"


class VirtualEvent:
    """A CUDA event that is always complete; it measures no time (there is none to measure)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.recorded = False

    def record(self, stream: Any = None) -> None:
        self.recorded = True

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: Any) -> float:
        _ACTIVE[-1].note_limit(
            "CUDA event timing: virtual GPUs run nothing on a GPU, so Event.elapsed_time() returns 0.0 ms"
        )
        return 0.0


class _StreamContext:
    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def __enter__(self) -> Any:
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        pass


_ACTIVE: list[VirtualGPUs] = []


def _install_patches(g: VirtualGPUs, p: _Patches) -> None:
    _build_tables()
    cuda = torch.cuda
    streams: dict[int, VirtualStream] = {}

    def idx(device: Any = None) -> int:
        return g.index(device)

    def dev(device: Any = None) -> str:
        return f"cuda:{g.index(device)}"

    def set_device(device: Any) -> None:
        i = g.index(device)
        if i < 0:
            return
        if i >= g.n:
            raise VirtualDeviceError(f"CUDA error: invalid device ordinal (cuda:{i}; the dry run has {g.n} GPUs)")
        g.current = i

    def exchange(device: int) -> int:
        prev = g.current
        if device is not None and device >= 0:
            set_device(device)
        return prev

    def current_stream(device: Any = None) -> VirtualStream:
        i = idx(device)
        if i not in streams:
            streams[i] = VirtualStream(i)
        return streams[i]

    def memory_stats(device: Any = None) -> dict[str, int]:
        d = dev(device)
        return {
            "allocated_bytes.all.current": g.allocated[d],
            "allocated_bytes.all.peak": g.peak[d],
            "reserved_bytes.all.current": g.allocated[d],
            "reserved_bytes.all.peak": g.peak[d],
        }

    def reset_peak(device: Any = None) -> None:
        d = dev(device)
        g.peak[d] = g.allocated[d]

    def props(device: Any = None) -> SimpleNamespace:
        i = idx(device)
        return SimpleNamespace(
            name=VIRTUAL_GPU_NAME, total_memory=g.device_memory, major=9, minor=0, multi_processor_count=132,
            is_integrated=False, is_multi_gpu_board=False, index=i, L2_cache_size=50 * 2**20,
            gcnArchName="", uuid=f"virtual-{i}",
        )

    def lazy_init() -> None:
        f = sys._getframe(1)
        while f is not None and f.f_code.co_name == "patched":
            f = f.f_back
        caller = f.f_code.co_name if f is not None else "?"
        raise g.limit(f"torch.cuda.{caller}()", "it needs a real CUDA runtime, which the dry run does not emulate")

    def graph_limit(*a: Any, **k: Any) -> None:
        raise g.limit("CUDA graphs", "they capture real CUDA kernels")

    def none(*a: Any, **k: Any) -> None:
        return None

    def rng_state(device: Any = "cuda") -> torch.Tensor:
        with torch._C.DisableTorchFunction():
            return torch.get_rng_state()

    table: dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": lambda: g.n,
        "current_device": lambda: g.current,
        "set_device": set_device,
        "_exchange_device": exchange,
        "_maybe_exchange_device": exchange,
        "synchronize": none,
        "is_initialized": lambda: True,
        "init": none,
        "_lazy_init": lazy_init,
        "get_device_name": lambda device=None: VIRTUAL_GPU_NAME,
        "get_device_capability": lambda device=None: (9, 0),
        "get_device_properties": props,
        "get_arch_list": lambda: ["sm_90"],
        "is_bf16_supported": lambda including_emulation=True: True,
        "memory_allocated": lambda device=None: g.allocated[dev(device)],
        "max_memory_allocated": lambda device=None: g.peak[dev(device)],
        "memory_reserved": lambda device=None: g.allocated[dev(device)],
        "max_memory_reserved": lambda device=None: g.peak[dev(device)],
        "mem_get_info": lambda device=None: (g.device_memory - g.allocated[dev(device)], g.device_memory),
        "memory_stats": memory_stats,
        "memory_summary": lambda device=None, abbreviated=False: (
            f"{VIRTUAL_GPU_NAME} {dev(device)}: allocated {g.allocated[dev(device)]} B, peak {g.peak[dev(device)]} B"
        ),
        "reset_peak_memory_stats": reset_peak,
        "reset_max_memory_allocated": reset_peak,
        "reset_accumulated_memory_stats": none,
        "empty_cache": none,
        "ipc_collect": none,
        "set_per_process_memory_fraction": none,
        "manual_seed": none,
        "manual_seed_all": none,
        "seed": none,
        "seed_all": none,
        "initial_seed": lambda: torch.initial_seed(),
        "get_rng_state": rng_state,
        "get_rng_state_all": lambda: [rng_state() for _ in range(g.n)],
        "set_rng_state": none,
        "set_rng_state_all": none,
        "Stream": VirtualStream,
        "Event": VirtualEvent,
        "stream": _StreamContext,
        "StreamContext": _StreamContext,
        "current_stream": current_stream,
        "default_stream": current_stream,
        "set_stream": none,
        "is_current_stream_capturing": lambda: False,
        "CUDAGraph": graph_limit,
        "graph": graph_limit,
        "make_graphed_callables": graph_limit,
    }
    for name, value in table.items():
        p.set(cuda, name, _distinct(value))
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        p.set(cuda.nvtx, name, _distinct(none))
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        acc_table = {
            "is_available": lambda: True,
            "device_count": lambda: g.n,
            "current_accelerator": lambda check_available=False: torch.device("cuda"),
            "current_device_index": lambda: g.current,
            "current_device_idx": lambda: g.current,
            "set_device_index": set_device,
            "set_device_idx": set_device,
            "synchronize": none,
            "current_stream": current_stream,
            "set_stream": none,
            "empty_cache": none,
            "memory_allocated": lambda device=None: g.allocated[dev(device)],
            "max_memory_allocated": lambda device=None: g.peak[dev(device)],
            "memory_reserved": lambda device=None: g.allocated[dev(device)],
            "max_memory_reserved": lambda device=None: g.peak[dev(device)],
            "memory_stats": memory_stats,
            "reset_peak_memory_stats": reset_peak,
            "get_memory_info": lambda device=None: (g.device_memory - g.allocated[dev(device)], g.device_memory),
        }
        for name, value in acc_table.items():
            if hasattr(acc, name):
                p.set(acc, name, _distinct(value))

    # The foreach kernels, the optimizers and clip_grad_norm_ group tensors by
    # (device, dtype) in C++, which sees only the backing device: group by the
    # virtual device instead, as real GPUs would.
    p.set(torch._C, "_group_tensors_by_device_and_dtype", lambda tll, with_indices=False: _group(g, tll, with_indices))

    orig_backward = torch.autograd.backward

    def backward(*a: Any, **k: Any) -> Any:
        g._before_backward()
        return orig_backward(*a, **k)

    p.set(torch.autograd, "backward", backward)
    # DataLoader(pin_memory=True) pins batches in a thread of its own, where no function mode runs:
    # page-locked memory means nothing without a GPU, so pinning returns the batch as it is.
    import torch.utils.data._utils.pin_memory as pin

    p.set(pin, "pin_memory", lambda data, device=None: data)
    _patch_autograd_python(g, p)
    _patch_load(g, p)
    _patch_parallel(g, p)
    _patch_distributed(g, p)


def _with_modes(g: VirtualGPUs, fn: Callable) -> Callable:
    """Run `fn` under the dry run's function modes when autograd calls it without any (the engine
    does not carry the mode stack into backward), so backward-time Python sees virtual devices."""

    def run(*a: Any, **k: Any) -> Any:
        if torch._C._len_torch_function_stack() or not g.active or not g.mode_stack:
            return fn(*a, **k)
        for m in g.mode_stack:
            torch._C._push_on_torch_function_stack(m)
        try:
            return fn(*a, **k)
        finally:
            for _ in g.mode_stack:
                torch._C._pop_torch_function_stack()

    return run


def _patch_autograd_python(g: VirtualGPUs, p: _Patches) -> None:
    import torch.utils.checkpoint as ckpt
    from torch.autograd.function import BackwardCFunction, Function

    orig_checkpoint = ckpt.checkpoint

    def checkpoint(function: Callable, *args: Any, **kwargs: Any) -> Any:
        return orig_checkpoint(_with_modes(g, function), *args, **kwargs)

    p.set(ckpt, "checkpoint", checkpoint)
    # Its determinism check compares each saved tensor's device in forward and in recompute; pack
    # hooks run with or without the modes depending on who saves: compare virtual devices always.
    checks = getattr(ckpt, "_allowed_determinism_checks_to_fns", None)
    default = getattr(ckpt, "_DEFAULT_DETERMINISM_MODE", None)
    if isinstance(checks, dict) and default in checks:
        p.set_item(checks, default, lambda x: {"shape": x.shape, "dtype": x.dtype,
                                                "device": torch.device(g.device_of(x))})

    orig_apply = Function.__dict__["apply"].__func__

    def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig_apply(cls, *args, **kwargs)
        # Remember where the outputs live: their gradients arrive in backward unlabelled.
        outs = out if isinstance(out, tuple) else (out,)
        node = next((o.grad_fn for o in outs if isinstance(o, torch.Tensor) and o.grad_fn is not None), None)
        if node is not None:
            try:
                node._mpcheck_devs = [g.label_of(o) if isinstance(o, torch.Tensor) else None for o in outs]
            except AttributeError:  # a node type without a __dict__
                pass
        return out

    p.set(Function, "apply", classmethod(apply))

    orig_bw = BackwardCFunction.apply

    def backward_apply(self: Any, *grads: Any) -> Any:
        devs = getattr(self, "_mpcheck_devs", None)
        if devs:
            for grad, dev in zip(grads, devs):
                if dev is not None and isinstance(grad, torch.Tensor) and g.label_of(grad) is None:
                    g._label(grad, dev)
        return _with_modes(g, orig_bw)(self, *grads)

    p.set(BackwardCFunction, "apply", backward_apply)


def _patch_load(g: VirtualGPUs, p: _Patches) -> None:
    """torch.load(..., map_location="cuda:k"): load on the CPU, then move every tensor to the virtual device."""
    orig_load = torch.load

    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        dev = g.parse(map_location) if isinstance(map_location, (str, int, torch.device)) else None
        if dev is None:
            return orig_load(f, map_location, *args, **kwargs)
        obj = orig_load(f, "cpu", *args, **kwargs)

        def move(x: Any) -> Any:
            if isinstance(x, torch.nn.Parameter):
                return torch.nn.Parameter(g.transfer(x.detach(), dev), requires_grad=x.requires_grad)
            if isinstance(x, torch.Tensor):
                return g.transfer(x, dev)
            if isinstance(x, dict):
                return type(x)((k, move(v)) for k, v in x.items())
            if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
                return type(x)(move(v) for v in x)
            return x

        return move(obj)

    p.set(torch, "load", load)


def _distinct(value: Any) -> Any:
    """A new function object per patched name: torch._dynamo, when first imported (an optimizer imports it),
    maps torch functions to rules and refuses one object under two names."""
    if isinstance(value, type):
        return type(value.__name__, (value,), {})

    def patched(*a: Any, **k: Any) -> Any:
        return value(*a, **k)

    patched.__name__ = getattr(value, "__name__", "patched")
    return patched


def _group(g: VirtualGPUs, tensorlistlist: list, with_indices: bool) -> dict:
    out: dict = {}
    first = tensorlistlist[0]
    n_lists = len(tensorlistlist)
    for i, t in enumerate(first):
        key = (torch.device(g.device_of(t)), t.dtype)
        entry = out.get(key)
        if entry is None:
            entry = out[key] = ([[] for _ in range(n_lists)], [] if with_indices else None)
        lists, indices = entry
        for j in range(n_lists):
            lists[j].append(tensorlistlist[j][i] if len(tensorlistlist[j]) > i else None)
        if with_indices:
            indices.append(i)
    return out


def _patch_parallel(g: VirtualGPUs, p: _Patches) -> None:
    """DataParallel cannot replicate onto virtual GPUs (scatter and broadcast are CUDA kernels): it runs its
    module once on device_ids[0], after the checking core has reported a split model at the wrap."""
    from torch.nn.parallel import DataParallel

    def dp_forward(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        dst = f"cuda:{self.device_ids[0]}" if isinstance(self.device_ids[0], int) else g.parse(self.device_ids[0])

        def to_dst(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return x.to(dst)
            if isinstance(x, (list, tuple)):
                return type(x)(to_dst(v) for v in x)
            if isinstance(x, dict):
                return {k: to_dst(v) for k, v in x.items()}
            return x

        return self.module(*to_dst(inputs), **to_dst(kwargs))

    p.set(DataParallel, "forward", dp_forward)

    # DataParallel's internals are CUDA collectives (torch._C._scatter, _broadcast, ...), absent from a CPU
    # build; calling them by hand around a manual split is a misuse anyway (MP003 in the linter).
    import torch.nn.parallel.comm as comm

    def comm_limit(name: str) -> Callable:
        def limited(*a: Any, **k: Any) -> Any:
            raise g.limit(
                f"torch.nn.parallel {name}",
                "DataParallel's scatter/gather/broadcast are CUDA collectives. To move a tensor to the next "
                "stage of a model split by hand, use tensor.to('cuda:k')",
            )

        return limited

    for name in ("scatter", "gather", "broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced"):
        if hasattr(comm, name):
            p.set(comm, name, comm_limit(name))


def _patch_distributed(g: VirtualGPUs, p: _Patches) -> None:
    try:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:  # pragma: no cover - torch built without distributed
        return
    if not dist.is_available():  # pragma: no cover
        return
    orig_init = dist.init_process_group

    def init_process_group(backend: Any = None, *a: Any, **k: Any) -> Any:
        b = str(backend or "").lower()
        if "nccl" in b:
            raise g.limit(
                "NCCL",
                "it needs real GPUs. Use backend='gloo' for the dry run (one process is enough to check "
                "placement and the DDP wrap)",
            )
        return orig_init(backend or "gloo", *a, **k)

    p.set(dist, "init_process_group", init_process_group)
    orig_ddp_init = DistributedDataParallel.__init__

    def ddp_init(self: Any, module: Any, device_ids: Any = None, output_device: Any = None, *a: Any, **k: Any) -> None:
        if g.backing == "meta":
            raise g.limit(
                "DistributedDataParallel with --backing meta",
                "DDP broadcasts and all-reduces real tensor data; run with --backing cpu",
            )
        devices = {g.device_of(t) for t in module.parameters()} | {g.device_of(t) for t in module.buffers()}
        if len(devices) > 1 or device_ids is not None:
            # The checking core reports device_ids on a split model (MP002) at the user's line; DDP itself
            # runs on the backing device, where device_ids would name a real GPU: go on without them.
            device_ids = None
            output_device = None
        orig_ddp_init(self, module, device_ids, output_device, *a, **k)

    p.set(DistributedDataParallel, "__init__", ddp_init)
