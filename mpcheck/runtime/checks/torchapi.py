"""What the run-time checks know about torch's API: one table, name -> kind.

Shared by both faces (the checks see real and virtual devices alike). Teaching the
checks a torch function is one entry here (plus its test); lookups are by name, so
the order of the entries does not matter. No torch import: names only.

Two levels of names, two dicts of the one table:
- PYTHON_CALLS: Python-level calls the checking function mode (capture/mode.py) and the
  checker (checks/checker.py) see, keyed by the function's `__name__`. An entry counts
  only for a `torch.Tensor` attribute (as `torch.overrides.resolve_name` names it), except
  CPU_INDEX, which the checker applies to any function of that name;
- ATEN_OPS: aten ops the strict dispatch mode (capture/strict.py) sees, keyed by their
  overload packet's name (`aten.index_put_.default` -> "index_put_").
"""

from __future__ import annotations

from typing import Any

# The kinds. Plain ints: the function mode compares one per call.
CHECK = 0  # the devices of its tensor arguments are checked (anything not in the table)
PASS = 1  # metadata, or one tensor's own view: nothing to check, passed straight through
TO = 2  # Tensor.to: a transfer to the device (or tensor) it names
CUDA = 3  # Tensor.cuda: a transfer to a CUDA device
CPU = 4  # Tensor.cpu: a transfer to the CPU
COPY = 5  # Tensor.copy_: a transfer from its source tensor into the destination's device
SET_DATA = 6  # `param.data = t` (torch.Tensor.data.__set__): module placements may change
CPU_INDEX = 7  # checked, but CPU indices and values may sit next to tensors on another device
SKIP = 8  # strict mode: not checked (copies cross devices by design)
VIEW = 9  # a view or copy of one tensor on its own device: passed through; MP011's provenance follows it
LOSS = 10  # a loss (torch.nn.functional's): checked, and its predictions' way to this device looked at
BACKWARD = 11  # a backward pass begins (Tensor.backward, torch.autograd.backward / grad): passed through
DATA_ALIAS = 12  # `t.data` (torch.Tensor.data.__get__): an alias whose writes leave `t`'s version counter as it was
HOST_READ = (
    13  # its value read on the host (`.item()`, `bool(t)`): passed through; MP020 counts a GPU's (element_reads.py)
)

EXPORT = (
    14  # its data handed out whole (`.numpy()`, iterated, printed): passed through; a watched move was needed (MP016)
)

TRANSFERS = frozenset({TO, CUDA, CPU, COPY})

# Passed-through calls that read a tensor's metadata only (its shape, layout, device): no element of it. A move
# whose output only these read carried data nobody used (MP016, reduced_after_move.py). `__get__` is every
# property: one that gives a tensor (`.mT`, `.grad`) carries the data on instead (mode.py's `_pass_watched`).
METADATA_READS = frozenset(
    {
        "dim", "ndimension", "size", "numel", "nelement", "element_size", "is_contiguous", "stride",
        "storage_offset", "get_device", "is_floating_point", "is_complex", "is_pinned", "is_shared", "_is_view",
        "__get__", "__len__", "__hash__", "result_type", "is_same_size", "__dlpack_device__", "requires_grad_",
        "retain_grad",
    }
)  # fmt: skip

PYTHON_CALLS: dict[str, int] = {
    # metadata of one tensor
    "dim": PASS,
    "ndimension": PASS,
    "size": PASS,
    "numel": PASS,
    "nelement": PASS,
    "element_size": PASS,
    "is_contiguous": PASS,
    "stride": PASS,
    "storage_offset": PASS,
    "untyped_storage": PASS,
    "storage": PASS,
    "data_ptr": PASS,
    "get_device": PASS,
    "is_floating_point": PASS,
    "is_complex": PASS,
    "is_pinned": PASS,
    "is_shared": PASS,
    "_is_view": PASS,
    "type": PASS,
    "type_as": PASS,  # `a.type_as(b)` is `a.to(b.options())`: a conversion to b's device and dtype
    "__get__": PASS,  # every Tensor property getter: .device, .shape, .grad, ...
    # its value, printed or converted
    "__len__": PASS,
    "__repr__": EXPORT,
    "__str__": EXPORT,
    "__format__": EXPORT,
    "__hash__": PASS,
    "tolist": HOST_READ,
    "item": HOST_READ,
    "__bool__": HOST_READ,
    "__int__": HOST_READ,
    "__float__": HOST_READ,
    "__index__": HOST_READ,
    "__iter__": EXPORT,
    "__contains__": PASS,
    "numpy": EXPORT,
    "__array__": EXPORT,
    "__dlpack__": EXPORT,
    "__dlpack_device__": PASS,
    # autograd bookkeeping, pickling, subclassing
    "register_hook": PASS,
    "requires_grad_": PASS,
    "retain_grad": PASS,
    "backward": BACKWARD,
    "__reduce_ex__": PASS,
    "__deepcopy__": PASS,
    "__setstate__": PASS,
    "_make_subclass": PASS,
    "as_subclass": PASS,
    # metadata of two tensors, or a new tensor built from values (from any device, read on the host, or copied
    # where `self` is): nothing that mixes devices
    "result_type": PASS,
    "is_same_size": PASS,
    "new_tensor": PASS,  # w.new_tensor(data): a copy of data on w's device
    # a view or copy of one tensor on its own device
    "detach": VIEW,
    "detach_": VIEW,
    "clone": VIEW,
    "contiguous": VIEW,
    "view": VIEW,
    "reshape": VIEW,
    "flatten": VIEW,
    # the other tensor gives only its shape, from any device (`a.expand_as(b)` is `a.expand(b.size())`)
    "expand_as": VIEW,
    "view_as": VIEW,
    "reshape_as": VIEW,
    # memory placement without a device change
    "share_memory_": PASS,
    "pin_memory": PASS,
    "record_stream": PASS,
    # transfers
    "to": TO,
    "cuda": CUDA,
    "cpu": CPU,
    "copy_": COPY,
    # setters: only torch.Tensor.data's moves data; any other (`p.grad = None`) passes
    "__set__": SET_DATA,
    # indexing: x_cuda[cpu_index], x_cuda[0:2] = cpu_tensor
    "__getitem__": CPU_INDEX,
    "__setitem__": CPU_INDEX,
    "index_put_": CPU_INDEX,
    "index_put": CPU_INDEX,
    "_index_put_impl_": CPU_INDEX,
    # packed sequences: their lengths and batch sizes live on the CPU by PyTorch's rule, next to data
    # on any device (pack_padded_sequence refuses lengths on a GPU)
    "_pack_padded_sequence": CPU_INDEX,
    "_pad_packed_sequence": CPU_INDEX,
    # CTC: the input and target lengths are read on the host (PyTorch copies them there itself), and
    # cuDNN's kernel wants the targets there too: CPU tensors next to log-probabilities on a GPU
    "ctc_loss": CPU_INDEX,
}

ATEN_OPS: dict[str, int] = {
    # copies cross devices by design
    "_to_copy": SKIP,
    "copy_": SKIP,
    "_copy_from": SKIP,
    "_copy_from_and_resize": SKIP,
    "to": SKIP,
    "lift_fresh": SKIP,
    "detach": SKIP,
    "alias": SKIP,
    "_local_scalar_dense": SKIP,
    "set_": SKIP,
    "record_stream": SKIP,
    # index ops take CPU indices next to GPU tensors
    "index": CPU_INDEX,
    "index_put_": CPU_INDEX,
    "index_put": CPU_INDEX,
    "_index_put_impl_": CPU_INDEX,
    "index_select": CPU_INDEX,
    "_pack_padded_sequence": CPU_INDEX,
    "_pad_packed_sequence": CPU_INDEX,
    "ctc_loss": CPU_INDEX,
    "_ctc_loss": CPU_INDEX,
    "_use_cudnn_ctc_loss": CPU_INDEX,
    "_cudnn_ctc_loss": CPU_INDEX,
}

# The names the checker lets mix CPU tensors with other devices, whatever their namespace.
CPU_INDEX_NAMES = frozenset(name for name, kind in PYTHON_CALLS.items() if kind == CPU_INDEX)
# Of those, the ones whose first argument is the tensor indexed: CPU indices may index a GPU's tensor, but a
# CPU tensor refuses a GPU's indices ("indices should be either on cpu or on the same device as the indexed
# tensor").
INDEXED_FIRST = frozenset({"__getitem__", "__setitem__", "index_put_", "index_put", "_index_put_impl_"})
# Calls over lists of tensors that pair their lists index by index (`torch._foreach_lerp_(ema, params, w)`,
# the fused optimizers' kernels): the i-th tensors of the lists must share a device, but the lists may
# span several devices (a split model's parameters; PyTorch takes its per-tensor path then).
PER_INDEX_PREFIXES = ("_foreach_", "_fused_")


def sparse_parts(t: Any) -> tuple[Any, ...] | None:
    """A sparse tensor's own tensors, its values first, then its indices (COO, CSR, CSC, BSR, BSC);
    None for a strided tensor. A sparse tensor has no storage or strides of its own: where it lives is
    where its values are, and a copy of it moves these."""
    layout = str(t.layout)
    if layout == "torch.strided":
        return None
    if layout == "torch.sparse_coo":
        return (t._values(), t._indices())
    if layout in ("torch.sparse_csr", "torch.sparse_bsr"):
        return (t.values(), t.crow_indices(), t.col_indices())
    if layout in ("torch.sparse_csc", "torch.sparse_bsc"):
        return (t.values(), t.ccol_indices(), t.row_indices())
    return None


def assigns_through_a_view(func: Any, args: tuple[Any, ...], tensor: type) -> bool:
    """`x[:, 4:] = h`, `x[0] = h`, `x[...] = h`: an assignment whose index holds no tensor is a copy into a
    view of `x` (PyTorch's set_item calls copy_), which crosses devices as `copy_` does. With a tensor or
    a list in the index (`x[idx] = h`) it is index_put_, whose values must be on x's device: checked."""
    if getattr(func, "__name__", "") != "__setitem__" or len(args) < 2:
        return False
    index = args[1]
    parts = index if isinstance(index, tuple) else (index,)
    return not any(isinstance(p, (tensor, list, tuple)) for p in parts)


# The recurrent kernels (torch.lstm, torch.gru, ...): their packed-sequence overload takes the batch
# sizes (int64, argument 1) on the CPU, as PackedSequence keeps them, next to data on any device.
CPU_BATCH_SIZES_NAMES = frozenset({"lstm", "gru", "rnn_tanh", "rnn_relu"})

# What the strict mode names an aten CPU_INDEX op for the checker: a name in CPU_INDEX_NAMES.
ATEN_CPU_INDEX_AS = "__getitem__"


# Python-level functions that run a backward pass, by module and qualified name
# (torch.overrides.resolve_name names neither): passed through whatever devices their tensors are on,
# since autograd takes outputs and inputs from anywhere in the graph (`torch.autograd.grad(loss_on_cuda1,
# params_on_cuda0)`); they end the forward pass of the code that calls them (a hand-written pipeline
# schedule sends gradients back along the stages next).
BACKWARD_FUNCTIONS = frozenset({"torch.autograd.grad", "torch.autograd.backward"})


# torch functions (not Tensor methods) of PYTHON_CALLS' PASS names, by their full names.
PASS_FUNCTIONS = frozenset({"torch.result_type", "torch.is_same_size"})


def python_call_kind(name: str, full: str | None, qualified: str | None = None) -> int:
    """The kind of a Python-level call: `name` its `__name__`, `full` what
    `torch.overrides.resolve_name` gives ("torch.Tensor.to"), None when it gives nothing;
    `qualified`: its `__module__` and `__qualname__` ("torch.autograd.grad")."""
    if qualified in BACKWARD_FUNCTIONS:
        return BACKWARD
    kind = PYTHON_CALLS.get(name, CHECK)
    if kind == SET_DATA:
        return SET_DATA if full == "torch.Tensor.data.__set__" else PASS
    if name == "__get__" and full == "torch.Tensor.data.__get__":
        return DATA_ALIAS
    if kind in TRANSFERS:
        return kind if full == f"torch.Tensor.{name}" else CHECK
    if kind in (PASS, VIEW, BACKWARD, HOST_READ):
        return kind if full is None or full.startswith("torch.Tensor.") or full in PASS_FUNCTIONS else CHECK
    if kind in (CHECK, CPU_INDEX) and is_loss(name) and (full or "").startswith("torch.nn.functional."):
        return LOSS  # (`F.ctc_loss` too, whose lengths may stay on the host: the checker allows them by name)
    return CHECK  # CPU_INDEX included: checked, the checker allows the CPU indices


def needs_full_name(name: str) -> bool:
    """Does python_call_kind's answer for a function of this `__name__` depend on its `full` name? Not for
    a name outside the table (nor a CPU_INDEX one) that is no loss's: those are CHECK whatever `full` is,
    so the capture layer need not resolve it (torch.overrides' table costs ~7 ms to build)."""
    kind = PYTHON_CALLS.get(name, CHECK)
    if kind in (CHECK, CPU_INDEX):
        return is_loss(name)
    return True


def aten_op_kind(packet_name: str) -> int:
    """The kind of an aten op by its overload packet's name: SKIP, CPU_INDEX or CHECK."""
    return ATEN_OPS.get(packet_name, CHECK)


# Loss functions (torch.nn.functional's, by name): their tensors are predictions and targets, so a
# mismatch there is fixed by moving the targets to the predictions' device, not by moving a module.
_LOSSES_NOT_NAMED_LOSS = frozenset(
    {"cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"}
)


def is_loss(name: str) -> bool:
    """Is a function of this `__name__` a loss (`F.cross_entropy`, `F.mse_loss`, ...)?"""
    return name.endswith("_loss") or name in _LOSSES_NOT_NAMED_LOSS


# Elementwise equality of two tensors: outside a forward, predictions against targets (an accuracy).
_COMPARISONS = frozenset({"__eq__", "__ne__", "eq", "ne"})


def is_comparison(name: str) -> bool:
    """Is a function of this `__name__` an elementwise equality test (`pred == y`, `torch.eq`)?"""
    return name in _COMPARISONS


def is_loss_module(module: object) -> bool:
    """Is `module` a torch.nn loss criterion (nn.CrossEntropyLoss, nn.MSELoss, ...)? By its classes'
    module and names, with no torch import: torch.nn.modules.loss's classes all end in `Loss`."""
    return any(c.__module__ == "torch.nn.modules.loss" and c.__name__.endswith("Loss") for c in type(module).__mro__)
