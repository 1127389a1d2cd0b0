"""torch.cuda and torch.accelerator on virtual GPUs: device queries, set_device, streams and
events, memory queries (from the live tensors on each virtual GPU), seeds; CUDA graphs and
anything needing a real CUDA runtime stop with a clear message."""

from __future__ import annotations

import sys
from types import FrameType, SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

from mpcheck.runtime.capture.mode import MADE_AS
from mpcheck.runtime.virtual.errors import VirtualDeviceError
from mpcheck.runtime.virtual.patches.base import Patches, distinct
from mpcheck.runtime.virtual.streams import StreamContext, VirtualEvent, VirtualStream

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs

# The virtual GPU answers as the Hopper part it models (compute capability 9.0, 132 SMs, the link and copy
# costs measured on H200s): a program that picks its GPUs by name (`"H100" in get_device_name(i)`, to use
# only data-centre parts, or to turn on TF32 for Ampere and later) takes them as it would on such a machine.
# The memory given decides which: 80 GiB is an H100 SXM, more an H200 (141 GB).
_H100_MEMORY = 96 * 2**30


def virtual_gpu_name(device_memory: int) -> str:
    part = "H100 80GB HBM3" if device_memory <= _H100_MEMORY else "H200"
    return f"NVIDIA {part} (mpcheck virtual GPU)"


def install(g: VirtualGPUs, p: Patches) -> None:
    """torch.cuda and torch.accelerator answer for the virtual GPUs; nvtx ranges do nothing."""
    a = _Answers(g)
    cuda = torch.cuda
    for name, value in _cuda_table(a).items():
        p.set(cuda, name, distinct(value))
    p.set(cuda, "default_generators", _DefaultGenerators(g))
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        p.set(cuda.nvtx, name, distinct(a.none))
    # cuDNN never runs here: the tensors on virtual GPUs are CPU or meta tensors. A CUDA build of
    # torch (PyPI's default, also on machines without a GPU) would otherwise answer that they suit
    # cuDNN, and nn.LSTM/GRU/RNN.to("cuda:k") would call the CUDA-only `_cudnn_rnn_flatten_weight`.
    p.set(torch.backends.cudnn, "is_acceptable", distinct(lambda tensor: False))
    for name, dtype in _LEGACY_TYPES.items():
        if hasattr(cuda, name):
            p.set(cuda, name, _legacy_type(name, dtype))
    p.set(torch, "Generator", _virtual_generator(g, torch.Generator))
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        for name, value in _accelerator_table(a).items():
            if hasattr(acc, name):
                p.set(acc, name, distinct(value))


# The legacy typed constructors (`torch.cuda.IntTensor([0])`, `torch.cuda.FloatTensor(2, 3)`): PyTorch's are
# CUDA-only (a CPU build refuses them). Each makes a tensor of its dtype on the current device.
_LEGACY_TYPES = {
    "FloatTensor": torch.float32,
    "DoubleTensor": torch.float64,
    "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16,
    "ByteTensor": torch.uint8,
    "CharTensor": torch.int8,
    "ShortTensor": torch.int16,
    "IntTensor": torch.int32,
    "LongTensor": torch.int64,
    "BoolTensor": torch.bool,
}


def _legacy_type(name: str, dtype: torch.dtype) -> type:
    """`torch.cuda.<name>` on virtual GPUs: called, a tensor of `dtype` on the current GPU (from data, or of a
    shape), made by `torch.tensor` / `torch.empty` with `device="cuda"`, so the checks see a tensor made on the
    current device (MP004) at the user's line; `isinstance(t, torch.cuda.<name>)` asks the tensor's dtype and
    device; `t.type(torch.cuda.<name>)` converts, as the type's name says."""

    class LegacyTensorType(type):
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, torch.Tensor) and obj.dtype == dtype and obj.is_cuda

    def __new__(cls: type, *args: Any, device: Any = None) -> torch.Tensor:
        where = "cuda" if device is None else device
        token = MADE_AS.set(f"`torch.cuda.{name}(...)`")
        try:
            if len(args) == 1 and not isinstance(args[0], (int, torch.Size)):
                return torch.tensor(args[0], dtype=dtype, device=where)  # from data: a list, a tensor, an array
            shape = tuple(args[0]) if len(args) == 1 and isinstance(args[0], torch.Size) else args
            return torch.empty(shape if shape else (0,), dtype=dtype, device=where)
        finally:
            MADE_AS.reset(token)

    return LegacyTensorType(name, (), {"__new__": __new__, "__module__": "torch.cuda"})


def _virtual_generator(g: VirtualGPUs, real: type) -> type:
    """`torch.Generator(device="cuda:1")` on virtual GPUs: a CPU generator (a subclass, so `isinstance(x,
    torch.Generator)` holds) whose `device` is the virtual GPU, so that ops.generic can refuse it for
    tensors of the other device type, as CUDA does (`generator_type` below)."""

    class Generator(real):
        def __new__(cls, device: Any = "cpu") -> Any:
            label = g.parse(device)
            obj: Any = real.__new__(cls, "cpu" if label is not None else device)
            obj._mpcheck_device = torch.device(label) if label is not None else None
            return obj

        @property
        def device(self) -> torch.device:
            return self._mpcheck_device or real.device.__get__(self)  # type: ignore[attr-defined]

    Generator.__module__, Generator.__qualname__ = "torch", "Generator"
    return Generator


class DefaultGenerator(torch.Generator):
    """`torch.cuda.default_generators[i]` on virtual GPUs: the host's default generator, which draws for every
    virtual GPU's random ops, labelled with GPU `i` (its `device`, and the type ops.generic checks a
    `generator=` against; a torch.Generator, so torch's argument parser takes it, and ops.generic hands the
    host's to the CPU op). Its state is the host's: saved and restored around a region (Megatron's RNG
    tracker swaps it), the region draws the same again, as on CUDA."""

    def __new__(cls, index: int) -> Any:
        obj: Any = torch.Generator.__new__(cls, "cpu")  # type: ignore[call-arg]
        obj._mpcheck_device = torch.device("cuda", index)
        return obj

    def __init__(self, index: int) -> None:
        pass

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self._mpcheck_device  # type: ignore[attr-defined]

    def get_state(self) -> torch.Tensor:
        return torch.default_generator.get_state()

    def set_state(self, new_state: torch.Tensor) -> Any:
        torch.default_generator.set_state(new_state)
        return self

    def manual_seed(self, seed: int) -> Any:
        torch.default_generator.manual_seed(seed)
        return self

    def seed(self) -> int:
        return torch.default_generator.seed()

    def initial_seed(self) -> int:
        return torch.default_generator.initial_seed()

    def __repr__(self) -> str:
        return f"<mpcheck: torch.cuda.default_generators[{self.device.index}], the host's generator>"


class _DefaultGenerators(tuple):
    """`torch.cuda.default_generators` on virtual GPUs: one DefaultGenerator per GPU, made when first read (the
    number of GPUs is read when the program first asks for one: CUDA_VISIBLE_DEVICES may hide some)."""

    _g: Any
    _made: tuple | None

    def __new__(cls, g: VirtualGPUs) -> Any:
        obj = super().__new__(cls)
        obj._g, obj._made = g, None
        return obj

    def _all(self) -> tuple:
        if self._made is None:
            self._made = tuple(DefaultGenerator(i) for i in range(self._g.n))
        return self._made

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, i: Any) -> Any:
        return self._all()[i]

    def __iter__(self) -> Any:
        return iter(self._all())

    def __repr__(self) -> str:
        return repr(self._all())


def real_generator(gen: Any) -> Any:
    """The generator a CPU op can take for `gen`: the host's default one for a virtual GPU's default generator."""
    return torch.default_generator if isinstance(gen, DefaultGenerator) else gen


def generator_type(gen: Any) -> str:
    """'cuda' for a generator made for a virtual GPU, else its own device's type."""
    virtual = getattr(gen, "_mpcheck_device", None)
    return virtual.type if virtual is not None else gen.device.type


class _Answers:
    """What torch.cuda's functions answer on the virtual GPUs `g` (shared by torch.accelerator)."""

    def __init__(self, g: VirtualGPUs) -> None:
        self.g = g
        self.streams: dict[int, VirtualStream] = {}

    def idx(self, device: Any = None) -> int:
        return self.g.index(device)

    def dev(self, device: Any = None) -> str:
        return f"cuda:{self.g.index(device)}"

    def set_device(self, device: Any) -> None:
        i = self.g.index(device)
        if i < 0:
            return
        if i >= self.g.n:
            raise VirtualDeviceError(f"CUDA error: invalid device ordinal (cuda:{i}; the dry run has {self.g.n} GPUs)")
        self.g.current = i

    def exchange(self, device: int) -> int:
        prev = self.g.current
        if device is not None and device >= 0:
            self.set_device(device)
        return prev

    def set_stream(self, stream: Any) -> None:
        """torch.cuda.set_stream: the stream's device becomes the current one (PyTorch sets it too)."""
        if isinstance(stream, VirtualStream):
            self.set_device(stream.device.index)

    def current_stream(self, device: Any = None) -> VirtualStream:
        i = self.idx(device)
        if i not in self.streams:
            self.streams[i] = VirtualStream(i)
        return self.streams[i]

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        d = self.dev(device)
        return {
            "allocated_bytes.all.current": self.g.allocated[d],
            "allocated_bytes.all.peak": self.g.peak[d],
            "reserved_bytes.all.current": self.g.allocated[d],
            "reserved_bytes.all.peak": self.g.peak[d],
        }

    def reset_peak(self, device: Any = None) -> None:
        d = self.dev(device)
        self.g.peak[d] = self.g.allocated[d]

    def props(self, device: Any = None) -> SimpleNamespace:
        i = self.idx(device)
        return SimpleNamespace(
            name=virtual_gpu_name(self.g.device_memory),
            total_memory=self.g.device_memory,
            major=9,
            minor=0,
            multi_processor_count=132,
            is_integrated=False,
            is_multi_gpu_board=False,
            index=i,
            L2_cache_size=50 * 2**20,
            gcnArchName="",
            uuid=f"virtual-{i}",
        )

    def lazy_init(self) -> None:
        f: FrameType | None = sys._getframe(1)
        while f is not None and f.f_code.co_name == "patched":
            f = f.f_back
        caller = f.f_code.co_name if f is not None else "?"
        raise self.g.limit(f"torch.cuda.{caller}()", "it needs a real CUDA runtime, which the dry run does not emulate")

    def graph_limit(self, *a: Any, **k: Any) -> None:
        raise self.g.limit("CUDA graphs", "they capture real CUDA kernels")

    def graph_class(self, cls: type) -> type:
        """`cls` (torch.cuda.CUDAGraph, torch.cuda.graph) as a class that stops at the limit when made: still a
        class, so that code importing under the dry run can name it (`graph: torch.cuda.CUDAGraph | None`
        in a signature, `isinstance(x, torch.cuda.graph)`)."""
        limit = self.graph_limit

        def __new__(klass: type, *a: Any, **k: Any) -> Any:
            return limit()

        return type(cls.__name__, (cls,), {"__new__": __new__, "__module__": cls.__module__})

    def device_index(self) -> type:
        """torch.accelerator.device_index: the context manager that makes a device current for its block
        (DataParallel's parallel_apply enters one per replica). PyTorch's exchanges the device in C."""
        exchange = self.exchange

        class device_index:
            def __init__(self, device: int | None, /) -> None:
                self.idx, self.prev_idx = device, -1

            def __enter__(self) -> None:
                if self.idx is not None:
                    self.prev_idx = exchange(self.idx)

            def __exit__(self, *exc: Any) -> None:
                if self.idx is not None:
                    exchange(self.prev_idx)

        return device_index

    @staticmethod
    def none(*a: Any, **k: Any) -> None:
        return None

    # The host's default generator draws for every virtual GPU's random ops (their tensors are CPU or meta
    # tensors), so a GPU's RNG state is the host's: saved and restored around a region (checkpoint's
    # preserve_rng_state, a dropout replayed), the region draws the same again, as on CUDA.
    @staticmethod
    def rng_state(device: Any = "cuda") -> torch.Tensor:
        with torch._C.DisableTorchFunction():
            return torch.get_rng_state()

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
        with torch._C.DisableTorchFunction():
            torch.set_rng_state(new_state)

    @staticmethod
    def set_rng_state_all(new_states: Any) -> None:
        states = list(new_states)
        if states:
            with torch._C.DisableTorchFunction():
                torch.set_rng_state(states[0])


def _cuda_table(a: _Answers) -> dict[str, Any]:
    return {
        "is_available": lambda: True,
        "device_count": lambda: a.g.n,
        "current_device": lambda: a.g.current,
        "set_device": a.set_device,
        "_exchange_device": a.exchange,
        "_maybe_exchange_device": a.exchange,
        "synchronize": a.none,
        "is_initialized": lambda: True,
        "init": a.none,
        "_lazy_init": a.lazy_init,
        "get_device_name": lambda device=None: virtual_gpu_name(a.g.device_memory),
        "get_device_capability": lambda device=None: (9, 0),
        "get_device_properties": a.props,
        "get_arch_list": lambda: ["sm_90"],
        "is_bf16_supported": lambda including_emulation=True: True,
        "memory_allocated": lambda device=None: a.g.allocated[a.dev(device)],
        "max_memory_allocated": lambda device=None: a.g.peak[a.dev(device)],
        "memory_reserved": lambda device=None: a.g.allocated[a.dev(device)],
        "max_memory_reserved": lambda device=None: a.g.peak[a.dev(device)],
        "mem_get_info": lambda device=None: (a.g.device_memory - a.g.allocated[a.dev(device)], a.g.device_memory),
        "memory_stats": a.memory_stats,
        "memory_summary": lambda device=None, abbreviated=False: (
            f"{virtual_gpu_name(a.g.device_memory)} {a.dev(device)}: allocated {a.g.allocated[a.dev(device)]} B, peak {a.g.peak[a.dev(device)]} B"
        ),
        "reset_peak_memory_stats": a.reset_peak,
        "reset_max_memory_allocated": a.reset_peak,
        "reset_accumulated_memory_stats": a.none,
        "empty_cache": a.none,
        "ipc_collect": a.none,
        "set_per_process_memory_fraction": a.none,
        "manual_seed": a.none,
        "manual_seed_all": a.none,
        "seed": a.none,
        "seed_all": a.none,
        "initial_seed": lambda: torch.initial_seed(),
        "get_rng_state": a.rng_state,
        "get_rng_state_all": lambda: [a.rng_state() for _ in range(a.g.n)],
        "set_rng_state": a.set_rng_state,
        "set_rng_state_all": a.set_rng_state_all,
        "Stream": VirtualStream,
        "Event": VirtualEvent,
        "stream": StreamContext,
        "StreamContext": StreamContext,
        "current_stream": a.current_stream,
        "default_stream": a.current_stream,
        "set_stream": a.set_stream,
        "is_current_stream_capturing": lambda: False,
        "CUDAGraph": a.graph_class(torch.cuda.CUDAGraph),
        "graph": a.graph_class(torch.cuda.graph),
        "make_graphed_callables": a.graph_limit,
    }


def _accelerator_table(a: _Answers) -> dict[str, Any]:
    return {
        "is_available": lambda: True,
        "device_count": lambda: a.g.n,
        "current_accelerator": lambda check_available=False: torch.device("cuda"),
        "current_device_index": lambda: a.g.current,
        "current_device_idx": lambda: a.g.current,
        "set_device_index": a.set_device,
        "set_device_idx": a.set_device,
        "device_index": a.device_index(),
        "synchronize": a.none,
        "current_stream": a.current_stream,
        "set_stream": a.set_stream,
        "empty_cache": a.none,
        "memory_allocated": lambda device=None: a.g.allocated[a.dev(device)],
        "max_memory_allocated": lambda device=None: a.g.peak[a.dev(device)],
        "memory_reserved": lambda device=None: a.g.allocated[a.dev(device)],
        "max_memory_reserved": lambda device=None: a.g.peak[a.dev(device)],
        "memory_stats": a.memory_stats,
        "reset_peak_memory_stats": a.reset_peak,
        "get_memory_info": lambda device=None: (a.g.device_memory - a.g.allocated[a.dev(device)], a.g.device_memory),
    }
