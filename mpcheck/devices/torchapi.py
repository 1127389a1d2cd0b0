"""What the model knows about PyTorch's API, by canonical name (names.canonical):
the names it merges, and the sets of names the handlers of library.py read.
Which handler a call gets is decided by library.py's table alone."""

from __future__ import annotations

from collections.abc import Container

# Public re-exports of the same object, mapped to one canonical name (names.canonical).
# At most one prefix matches a name: none is a prefix of another (tests/test_devices_layout.py).
REEXPORT_PREFIXES = (
    ("torch.nn.parallel.data_parallel.", "torch.nn.parallel."),
    ("torch.nn.parallel.distributed.", "torch.nn.parallel."),
    ("torch.nn.parallel.scatter_gather.", "torch.nn.parallel."),
    ("torch.nn.parallel.replicate.", "torch.nn.parallel."),
    ("torch.nn.parallel.parallel_apply.", "torch.nn.parallel."),
    ("torch.cuda.comm.", "torch.nn.parallel.comm."),
    ("torch.nn.modules.container.", "torch.nn."),
    ("torch.nn.modules.module.", "torch.nn."),
    ("torch.nn.parameter.", "torch.nn."),
)
REEXPORTS = {
    "torch.nn.DataParallel": "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.data_parallel": "torch.nn.parallel.data_parallel",
}

DATA_PARALLEL = frozenset({"torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel"})
DDP = frozenset({"torch.nn.parallel.DistributedDataParallel"})

# DataParallel's internals (torch.nn.parallel) and the collectives it uses.
PARALLEL_PRIMITIVES = frozenset(
    {
        "torch.nn.parallel.scatter",
        "torch.nn.parallel.gather",
        "torch.nn.parallel.replicate",
        "torch.nn.parallel.parallel_apply",
        "torch.nn.parallel.scatter_kwargs",
        "torch.nn.parallel.comm.broadcast",
        "torch.nn.parallel.comm.broadcast_coalesced",
        "torch.nn.parallel.comm.reduce_add",
        "torch.nn.parallel.comm.reduce_add_coalesced",
        "torch.nn.parallel.comm.scatter",
        "torch.nn.parallel.comm.gather",
    }
)

SET_DEVICE = frozenset({"torch.cuda.set_device"})
DEVICE_CONTEXT = frozenset({"torch.cuda.device"})
# `with torch.cuda.device_of(t):` makes the GPU that holds `t` the current device (a CPU tensor changes nothing).
DEVICE_OF_CONTEXT = frozenset({"torch.cuda.device_of"})
NO_GRAD = frozenset(
    {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"}
)
DEFAULT_DEVICE_CHANGERS = ("set_default_device", "set_default_tensor_type", "set_default_dtype")

BUILTINS = frozenset(
    {
        "range",
        "enumerate",
        "zip",
        "len",
        "list",
        "tuple",
        "reversed",
        "super",
        "isinstance",
        "getattr",
        "dict",
        "sorted",
        "next",
        "iter",
        "print",
        "min",
        "max",
        "sum",
        "int",
        "float",
        "str",
        "setattr",
        "hasattr",
        "map",
        "filter",
        "any",
        "all",
        "abs",
        "divmod",
        "type",
        "id",
        "round",
        "math.ceil",
        "math.floor",
    }
)

DTYPE_NAMES = frozenset(
    {
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "half",
        "float",
        "double",
        "int64",
        "long",
        "int32",
        "int",
        "int16",
        "short",
        "int8",
        "uint8",
        "bool",
        "complex64",
        "complex128",
        "cfloat",
        "cdouble",
        "float8_e4m3fn",
        "float8_e5m2",
    }
)

FACTORIES = frozenset(
    {
        "zeros",
        "ones",
        "empty",
        "full",
        "rand",
        "randn",
        "randint",
        "randperm",
        "arange",
        "linspace",
        "logspace",
        "eye",
        "tensor",
        "as_tensor",
        "from_numpy",
        "empty_strided",
        "tril_indices",
        "triu_indices",
        "normal",
        "bernoulli",
        # signal windows (`torch.hann_window(n_fft)`): a 1-D tensor made from a length, on the host by default
        *("hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"),
    }
)
# Factories that draw from tensors when given them (`torch.normal(mean, std)`, `torch.bernoulli(p)`): then on
# their device, as an op; given numbers and a size, on the host or device= as any factory.
DRAWN_FROM_TENSORS = frozenset({"normal", "bernoulli"})
# Factories that make a tensor from a shape alone (no data handed in): made on the device they are moved to,
# they cost neither the host's fill nor the copy (MP019).
SHAPE_FACTORIES = frozenset(
    {"zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "linspace", "logspace", "eye"}
    | {"hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"}
)
# Factories that make a tensor of host data (a NumPy array): a constant when made in __init__.
# (torch.tensor(x) of an unknown x may be a 0-d scalar, too small to matter: not here.)
HOST_DATA_FACTORIES = frozenset({"from_numpy"})
# torch.nn classes with no forward of their own (calling one raises): a subclass that writes none runs nothing.
MODULES_WITHOUT_FORWARD = frozenset({"Module", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})
# Factories that give back the host memory they are handed, with no copy (a CPU tensor's `.numpy()` array,
# or the tensor itself): the value is the same, and its way through the host stays idle (MP005).
HOST_MEMORY_VIEWS = frozenset({"from_numpy", "as_tensor"})

LIKE_FACTORIES = frozenset(
    {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"}
)
# Functions that read an argument on the host and refuse it on a GPU: name -> (keyword, position,
# what torch asks for). The packing is planned on the host from the lengths.
HOST_ARGUMENTS: dict[str, tuple[str, int, str]] = {
    "torch.nn.utils.rnn.pack_padded_sequence": ("lengths", 1, "a 1-D CPU int64 tensor"),
}
CUDA_TENSOR_TYPES = frozenset(
    {
        "FloatTensor",
        "DoubleTensor",
        "HalfTensor",
        "BFloat16Tensor",
        "IntTensor",
        "LongTensor",
        "ShortTensor",
        "ByteTensor",
        "CharTensor",
        "BoolTensor",
    }
)

# Tensor methods whose tensor arguments must be on the receiver's device.
# Methods of a torch.distributions object that compute with a value given (`dist.log_prob(actions)`): the value
# must be where the distribution's parameters are (Categorical gathers the logits at it, Normal subtracts its mean).
DISTRIBUTION_VALUE_METHODS = frozenset({"log_prob", "cdf", "icdf"})
SAME_DEVICE_METHODS = frozenset(
    {
        "add",
        "add_",
        "sub",
        "sub_",
        "mul",
        "mul_",
        "div",
        "div_",
        "matmul",
        "mm",
        "bmm",
        "addmm",
        "masked_fill",
        "masked_fill_",
        "index_select",
        "gather",
        "scatter",
        "scatter_",
        "scatter_add",
        "scatter_add_",
        "where",
        "index_add",
        "index_add_",
        "masked_scatter",
        "masked_scatter_",
        "lerp",
        "lerp_",
        "addcmul",
        "addcmul_",
        "addcdiv",
        "addcdiv_",
        "maximum",
        "minimum",
        # tensor bounds (`boxes.clamp(min=torch.zeros_like(limits), max=limits)`): elementwise, on the same device
        "clamp",
        "clamp_",
        "clip",
        "clip_",
        "clamp_min",
        "clamp_min_",
        "clamp_max",
        "clamp_max_",
        "pow",
        "dot",
        "baddbmm",
        "index_fill",
        "index_fill_",
        "masked_select",
        "take_along_dim",
        # comparisons and other elementwise ops of two tensors (`pred.eq(target.view(1, -1))`, a top-k metric)
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "eq_",
        "ne_",
        "lt_",
        "le_",
        "gt_",
        "ge_",
        "equal",
        "isclose",
        "allclose",
        "fmod",
        "remainder",
        "atan2",
        "hypot",
        "logical_and",
        "logical_or",
        "logical_xor",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "floor_divide",
        "true_divide",
        "copysign",
        "xlogy",
        "fmax",
        "fmin",
        "outer",
        "inner",
        "kron",
        "dist",
        "mv",
        # index-driven writes and reductions (`words.scatter_reduce(1, slot, h)`, a static cache's `index_copy_`)
        "scatter_reduce",
        "scatter_reduce_",
        "index_copy",
        "index_copy_",
        "index_reduce",
        "index_reduce_",
    }
)
# (Not `expand_as`, `view_as`, `reshape_as`: they read only the other tensor's shape, on any device.)
# Tensor methods that do not keep the receiver's device or are not tensors.
NON_TENSOR_METHODS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "size",
        "dim",
        "numel",
        "type_as",
        "type",
        "data_ptr",
        "element_size",
        "is_contiguous",
        "stride",
        "get_device",
        "equal",
        "nelement",
        "ndimension",
        "storage",
        "untyped_storage",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "modules",
        "named_modules",
        "children",
        "named_children",
        "state_dict",
        "load_state_dict",
        "register_forward_hook",
        "register_forward_pre_hook",
        "apply",
        "train",
        "eval",
        "zero_grad",
        "requires_grad_",
        "backward",
        "register_hook",
        "copy_",
    }
)
# In-place tensor methods that give back the tensor itself (NON_TENSOR_METHODS holds them for the modules
# that share their names): `x = torch.rand(n, device=d).requires_grad_()` is that tensor, on `d`.
SELF_RETURNING_TENSOR_METHODS = frozenset({"requires_grad_", "copy_"})
# Full reductions (no dim given): one value from the whole tensor. They leave the activation chain
# (events.Crossing: a scalar such as a loss); moved just before one (`x.to(d).sum()`, through
# elementwise steps as in `g.to(d).isfinite().all()`), the whole tensor crosses for that value (MP016).
# Indices and counts are metrics.
FULL_REDUCTIONS = frozenset(
    {
        "mean",
        "sum",
        "max",
        "min",
        "norm",
        "std",
        "var",
        "prod",
        "all",
        "any",
        "nansum",
        "nanmean",
        "amax",
        "amin",
        "count_nonzero",
    }
)
INDEX_RESULTS = frozenset({"argmax", "argmin", "bincount", "count_nonzero", "histc", "unique", "nonzero", "eq", "ne"})


# Tensor methods that give a (values, indices) named tuple: always, or (the second set) when a dim is given
# (`x.max(-1)`; `x.max()` is one value, `x.max(y)` an elementwise maximum).
VALUES_AND_INDICES = frozenset({"sort", "topk", "kthvalue", "mode", "cummax", "cummin"})
VALUES_AND_INDICES_WITH_DIM = frozenset({"max", "min", "median", "nanmedian"})


def gives_values_and_indices(name: str, first_is_int: bool, kwargs: Container[str]) -> bool:
    """`logits.max(-1)`, `torch.topk(x, k)`: a (values, indices) pair, not one tensor."""
    last = name.rsplit(".", 1)[-1]
    return last in VALUES_AND_INDICES or (last in VALUES_AND_INDICES_WITH_DIM and (first_is_int or "dim" in kwargs))


# Factories of integer data (ids, labels, permutations); torch.arange too when every bound is an int.
INDEX_FACTORIES = frozenset({"randint", "randint_like", "randperm"})
# Factories that draw: their data is new on every call, whatever their arguments (not an unchanging constant).
RANDOM_FACTORIES = frozenset({"rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial", "poisson"})
# Tensor methods whose result is integer or boolean data shaped like the input (or smaller).
INDEX_METHODS = INDEX_RESULTS | frozenset(
    {"long", "int", "bool", "short", "byte", "argsort", "lt", "le", "gt", "ge", "multinomial"}
)
# torch functions whose result is indices into their input (sampled or sorted token ids, bucket numbers).
INDEX_FUNCTIONS = INDEX_RESULTS | frozenset({"multinomial", "argsort", "searchsorted", "bucketize"})


def leaves_chain(name: str, n_args: int, kwargs: Container[str]) -> bool:
    """`x.mean()`, `torch.sum(x)`, `logits.argmax(1)`, `torch.bincount(pred)`: a value that is no
    activation any more (n_args counts the arguments after the tensor itself)."""
    last = name.rsplit(".", 1)[-1]
    if last in INDEX_RESULTS or is_loss(name):
        return True
    return last in FULL_REDUCTIONS and n_args == 0 and "dim" not in kwargs


def reduces_along_a_dim(name: str, first_is_int: bool, kwargs: Container[str]) -> bool:
    """`logits.max(1)`, `e.sum(-1)`, `torch.logsumexp(x, dim=1)`: a reduction along a dim (`first_is_int`: the first
    argument after the tensor is an int), one value per row: a statistic (Obj.row_statistic)."""
    last = name.rsplit(".", 1)[-1]
    return (last in FULL_REDUCTIONS or last == "logsumexp") and (first_is_int or "dim" in kwargs)


def may_give_0d(name: str, n_args: int, kwargs: Container[str]) -> bool:
    """`x.sum()`, `logits.argmax()`, `torch.max(x)`, a loss: one value, a tensor of no dimensions (n_args
    counts the arguments after the tensor itself)."""
    last = name.rsplit(".", 1)[-1]
    if is_loss(name):
        return True
    whole = last in FULL_REDUCTIONS or last in ("argmax", "argmin", "median", "nanmedian")
    return whole and n_args == 0 and "dim" not in kwargs


DTYPE_METHODS = frozenset({"half", "float", "double", "bfloat16", "long", "int", "bool", "short", "char", "byte"})
# nn.Module methods that return the module itself, where it is (`model = Net().eval()`). Not `apply`:
# its function may move the parts; not `to_empty`: it places them.
MODULE_SELF_METHODS = frozenset({"train", "eval", "requires_grad_", "share_memory"})

# Tensor methods whose arguments are sizes, dims or a dtype, never data: the result holds the
# receiver's data (laid out again, repeated), so an unchanging tensor stays unchanging (MP011:
# `self.coord_map.repeat(B, 1, 1, 1).to(dev)` copies the same data, B times, on every call).
LAYOUT_METHODS = frozenset(
    {
        "repeat",
        "expand",
        "view",
        "reshape",
        "unsqueeze",
        "squeeze",
        "permute",
        "transpose",
        "flatten",
        "unflatten",
        "contiguous",
        "clone",
        "detach",
        "t",
        "type",
    }
)

# Tensor methods whose result is larger than the data it holds (a broadcast view, or the data repeated):
# moved on, it crosses at its larger size where moving first and enlarging after would not (MP016).
ENLARGING_METHODS = frozenset({"expand", "expand_as", "broadcast_to", "repeat", "tile", "repeat_interleave"})
# torch.nn.functional's resamplers: with a known scale factor of 2 or more (`F.interpolate(x, scale_factor=4)`) the
# result holds that many times the elements of the tensor it was computed from alone (MP016); so does `F.unfold`
# (im2col) at stride 1, once per kernel position.
RESAMPLERS = frozenset({"interpolate", "upsample", "upsample_bilinear", "upsample_nearest"})
ENLARGING_FUNCTIONS = RESAMPLERS | {"unfold"}
ELEMENTWISE_STEPS = frozenset(
    {
        "abs",
        "isfinite",
        "isnan",
        "isinf",
        "isneginf",
        "isposinf",
        "logical_not",
        "sign",
        "sgn",
        "neg",
        "square",
        "detach",
    }
)

# Tensor methods that give a 0-dim tensor for a 0-dim one (element-wise, casts, copies): what a number read off a
# CPU table (`alpha_bar[t].sqrt()`) stays, a tensor that mixes with tensors on any GPU.
ZERO_DIM_KEEPING_METHODS = (
    ELEMENTWISE_STEPS
    | DTYPE_METHODS
    | frozenset(
        {
            "sqrt",
            "rsqrt",
            "exp",
            "log",
            "log1p",
            "expm1",
            "sin",
            "cos",
            "tanh",
            "sigmoid",
            "reciprocal",
            "pow",
            "clamp",
            "clip",
            "clone",
            "contiguous",
        }
    )
)


# Layout methods that compute nothing: the same data seen in another shape. A tensor moved and then
# only reshaped (`logits.to(dev).flatten(0, 1)`) is still idle since its move (MP005, MP014).
SHAPE_ONLY_METHODS = LAYOUT_METHODS - {"repeat", "expand", "clone", "type"}

# Torch functions that are not tensor ops (no device agreement to check).
NOT_OPS_PREFIXES = (
    "torch.cuda.",
    "torch.distributed.",
    "torch.nn.init.",
    "torch.nn.utils.",
    "torch.optim.",
    "torch.utils.",
    "torch.autograd.",
    "torch.jit.",
    "torch.backends.",
    "torch.manual_seed",
    "torch.save",
    "torch.load",
    "torch.compile",
    "torch.no_grad",
    "torch.is_",
    "torch.set_",
    "torch.get_",
    "torch.device",
    "torch.finfo",
    "torch.iinfo",
    "torch.Size",
    "torch.testing.",
    "torch.fx.",
    "torch.amp.",
    "torch.autocast",
    "torch._",
    "torch.nn.parallel.",
    "torch.export.",
    "torch.library.",
    "torch.overrides.",
    "torch.profiler.",
    "torch.onnx.",
    "torch.hub.",
    "torch.multiprocessing.",
    "torch.random.",
    "torch.compiler.",
)

LOSS_FUNCTIONS = frozenset(
    {
        "cross_entropy",
        "nll_loss",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "kl_div",
        "ctc_loss",
        "cosine_embedding_loss",
        "margin_ranking_loss",
        "hinge_embedding_loss",
        "multi_margin_loss",
        "multilabel_margin_loss",
        "multilabel_soft_margin_loss",
        "poisson_nll_loss",
        "gaussian_nll_loss",
        "triplet_margin_loss",
        "soft_margin_loss",
    }
)
# Losses that take their targets and lengths on the CPU next to log-probabilities on a GPU: PyTorch
# reads the lengths on the host and copies the targets itself, and cuDNN's CTC wants them there
# (the run-time faces let them mix: runtime/checks/torchapi.py).
HOST_TARGET_LOSSES = frozenset({"ctc_loss", "CTCLoss"})
HOST_TARGETS = "<host_targets>"  # the key, in a loss module's `extra`, of such a loss
# Losses whose predictions carry a class dimension the targets lack (logits [N, C] against labels
# [N]): the predictions are the larger tensor, by a factor of C (MP014).
CLASS_DIM_LOSSES = frozenset({"cross_entropy", "nll_loss", "multi_margin_loss", "CrossEntropyLoss", "NLLLoss"})
CLASS_DIM = "<class_dim>"  # the key, in a loss module's `extra`, of the class-dimension loss it is
DISPATCHERS = frozenset({"dispatch_model", "load_checkpoint_and_dispatch"})
# Wrappers that run a model split over the devices of one process and move activations themselves.
PIPELINE_WRAPPERS = frozenset({"Pipe", "GPipe", "tensor_parallel"})
# Pipelines of one stage per process (fairscale's AsyncPipe and MultiProcessPipe, DeepSpeed's
# PipelineModule): what a process holds is its own stage, on a device the model cannot know, and
# the wrapper passes activations between processes, so `.cuda()` of it undoes no split.
PROCESS_PIPELINE_WRAPPERS = frozenset({"AsyncPipe", "MultiProcessPipe", "PipelineModule"})
SPLIT_DEVICE_MAPS = frozenset({"auto", "balanced", "balanced_low_0", "sequential"})


def is_dtype_name(q: str) -> bool:
    return q.startswith("torch.") and q[6:] in DTYPE_NAMES


def is_torch_op(q: str) -> bool:
    if q.startswith("torch.nn.functional."):
        return True
    if not q.startswith("torch.") or q.startswith(NOT_OPS_PREFIXES):
        return False
    rest = q[6:]
    if "." in rest:  # torch.linalg.*, torch.fft.*, torch.special.* are ops; torch.nn.X are classes
        if (
            rest.startswith("distributions.")
            and rest.count(".") <= 2
            and not rest.split(".")[1].startswith("constraint")
        ):
            # A distribution (`Normal(mu, sigma)`) lives where its parameters are, which must agree, and what
            # it gives (`rsample()`, `log_prob(x)`) is there too; kl_divergence(p, q) needs both on one device.
            return True
        return rest.split(".")[0] in ("linalg", "fft", "special")
    return not rest[:1].isupper()


def is_loss(q: str) -> bool:
    last = q.rsplit(".", 1)[-1]
    return last in LOSS_FUNCTIONS or (q.startswith("torch.nn.") and last.endswith("Loss"))


# torch.nn modules without parameters or buffers: they run wherever their input is.
PARAMETERLESS = frozenset(
    {
        "ReLU",
        "ReLU6",
        "GELU",
        "SiLU",
        "Tanh",
        "Sigmoid",
        "Softmax",
        "LogSoftmax",
        "Softplus",
        "Mish",
        "LeakyReLU",
        "ELU",
        "SELU",
        "CELU",
        "Hardswish",
        "Hardsigmoid",
        "Hardtanh",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "AlphaDropout",
        "Identity",
        "Flatten",
        "Unflatten",
        "MaxPool1d",
        "MaxPool2d",
        "MaxPool3d",
        "AvgPool1d",
        "AvgPool2d",
        "AvgPool3d",
        "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d",
        "AdaptiveAvgPool3d",
        "AdaptiveMaxPool1d",
        "AdaptiveMaxPool2d",
        "AdaptiveMaxPool3d",
        "Upsample",
        "UpsamplingNearest2d",
        "UpsamplingBilinear2d",
        "PixelShuffle",
        "PixelUnshuffle",
        "ZeroPad2d",
        "ConstantPad1d",
        "ConstantPad2d",
        "ReflectionPad2d",
        "ReplicationPad2d",
        "Softmin",
        "GLU",
        "LogSigmoid",
        "Tanhshrink",
        "Softsign",
        "Threshold",
        "ChannelShuffle",
    }
)
# torch.nn's pooling layers: what they give is smaller than what they get (MP016: pool, then move).
POOLING = frozenset(
    {
        f"{kind}{n}d"
        for kind in ("MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool", "LPPool", "FractionalMaxPool")
        for n in (1, 2, 3)
    }
)
# torch.nn modules with parameters: unplaced, they are on the CPU.
PARAMETERED = frozenset(
    {
        "Linear",
        "Bilinear",
        "Conv1d",
        "Conv2d",
        "Conv3d",
        "ConvTranspose1d",
        "ConvTranspose2d",
        "ConvTranspose3d",
        "Embedding",
        "EmbeddingBag",
        "LayerNorm",
        "GroupNorm",
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "RMSNorm",
        "LSTM",
        "GRU",
        "RNN",
        "LSTMCell",
        "GRUCell",
        "RNNCell",
        "MultiheadAttention",
        "TransformerEncoderLayer",
        "TransformerDecoderLayer",
        "TransformerEncoder",
        "TransformerDecoder",
        "Transformer",
        "PReLU",
    }
)

# torch.nn layers with submodules of their own (MultiheadAttention's out_proj): `modules()` of one is not
# only itself (module_tree.py).
WITH_SUBMODULES = frozenset({"MultiheadAttention"} | {n for n in PARAMETERED if n.startswith("Transformer")})

# torch.nn modules whose arguments after the input must be on the module's device, by position and
# by keyword, or the call raises (each seen raising for a CPU tensor with the module on a GPU, torch
# 2.11, in train and eval mode, with and without grad): an RNN's hidden state (`hx`, an LSTM's
# `(h0, c0)`), attention's key, value and key padding mask, the decoder's memory, the second input
# of a bilinear layer, a bag's offsets. Attention masks are not here: a CPU mask passes where the
# module takes it for causal and drops it (TransformerDecoder's `tgt_mask`, TransformerEncoder's
# `mask` in eval), so it is not certain.
SAME_DEVICE_ARGUMENTS: dict[str, dict[int, str]] = {
    **{rnn: {1: "hx"} for rnn in ("RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell")},
    "MultiheadAttention": {1: "key", 2: "value", 3: "key_padding_mask"},
    "TransformerEncoderLayer": {2: "src_key_padding_mask"},
    "TransformerEncoder": {2: "src_key_padding_mask"},
    "TransformerDecoderLayer": {1: "memory"},
    "TransformerDecoder": {1: "memory"},
    "Transformer": {1: "tgt"},
    "Bilinear": {1: "input2"},
    "EmbeddingBag": {1: "offsets"},
}

# Functions of other libraries that attach device-moving hooks to a module.
DEVICE_HOOK_WORDS = ("offload", "hook", "dispatch")
