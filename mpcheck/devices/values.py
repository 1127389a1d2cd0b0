"""The lattice of abstract values the device model computes.

A device set `Devs` is `None` (unknown) or a small frozenset of device names:
one element when the device is known, several when paths disagree. Device
names are concrete (`"cpu"`, `"cuda:1"`, `"cuda"` = the current CUDA device)
or symbolic (`"sym:devices[1]"`: element 1 of a parameter called `devices`;
`"sym:each:i"`: a device that changes with a loop variable). Unknown never
yields a finding: rules only compare devices that are certainly different.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpcheck.devices.ways import Path

Devs = frozenset[str] | None  # a set of device names; None: unknown

CURRENT = "cuda"  # index-less CUDA device: whatever the current device is
_MAX_SET = 4
_SYM_INDEX = re.compile(r"^sym:(.+)\[(-?\d+)\]$")
# An integer computed from one run-time name: `rank`, `2*rank`, `2*rank+1`, `rank-1` (a device
# index, alone or in f"cuda:{...}"): (multiplier, name, sign, offset)
_AFFINE = re.compile(r"^(?:cuda:\{)?(?:(-?\d+)\*)?([A-Za-z_][\w.]*)(?:([+-])(\d+))?\}?$")


def one(dev: str) -> frozenset[str]:
    return frozenset((dev,))


def join_devs(a: Devs, b: Devs) -> Devs:
    if a is None or b is None:
        return None
    u = a | b
    return u if len(u) <= _MAX_SET else None


def decided(test: Val) -> bool:
    """Is a test's truth known: a constant of a type whose truth Python decides plainly (None, a bool, a number,
    a string)?"""
    return isinstance(test, Const) and (test.value is None or type(test.value) in (bool, int, float, str))


def single(devs: Devs) -> str | None:
    """The device when it is known and unique."""
    if devs is not None and len(devs) == 1:
        return next(iter(devs))
    return None


def _concrete(dev: str) -> str:
    # The current device is cuda:0 unless set_device says otherwise; the
    # interpreter substitutes set_device's index before values reach here.
    return "cuda:0" if dev == CURRENT else dev


def distinct(a: str, b: str) -> bool:
    """True only when devices a and b are certainly different."""
    if a == b:
        return False
    sa, sb = a.startswith("sym:"), b.startswith("sym:")
    if sa or sb:
        if not (sa and sb):
            return False
        ma, mb = _SYM_INDEX.match(a), _SYM_INDEX.match(b)
        # Two entries of one list of devices are taken to be different devices:
        # that is what a list of stage devices is for.
        if ma and mb:
            return ma.group(1) == mb.group(1) and ma.group(2) != mb.group(2)
        # `2*rank` and `2*rank+1`: one name, one multiplier, two offsets are two indexes.
        fa, fb = affine(a[4:]), affine(b[4:])
        return bool(fa and fb and fa[:2] == fb[:2] and fa[2] != fb[2])
    return _concrete(a) != _concrete(b)


def affine(name: str) -> tuple[str, int, int] | None:
    """(name, multiplier, offset) of a symbolic index `m*name+c` (as `affine_name` writes it,
    possibly inside f"cuda:{...}"), else None."""
    m = _AFFINE.match(name)
    if m is None:
        return None
    offset = int(m.group(4) or 0) * (-1 if m.group(3) == "-" else 1)
    return m.group(2), int(m.group(1) or 1), offset


def affine_name(name: str, mult: int, offset: int) -> str:
    """How a symbolic index `mult*name+offset` is written (`2*rank+1`, `rank-1`, `rank`)."""
    text = name if mult == 1 else f"{mult}*{name}"
    return text if offset == 0 else f"{text}{offset:+d}"


def conflict(a: Devs, b: Devs) -> tuple[str, str] | None:
    """(a, b) when both are known single devices that certainly differ."""
    x, y = single(a), single(b)
    if x is not None and y is not None and distinct(x, y):
        return x, y
    return None


def distinct_devices(devs: Iterable[str | None]) -> list[str]:
    """The devices of `devs` (an iterable of names) that are pairwise distinct
    (symbolic ones only when they are entries of one list)."""
    out: list[str] = []
    for d in devs:
        if d is None:
            continue
        if d.startswith("sym:each:"):
            out.append(d)
            continue
        if all(distinct(d, o) for o in out):
            out.append(d)
    return out


def is_split_devs(devs: Iterable[str | None]) -> bool:
    ds = distinct_devices(devs)
    return len(ds) >= 2 or any(d.startswith("sym:each:") for d in ds)


def show(dev: str | None) -> str:
    if dev is None:
        return "an unknown device"
    if dev == CURRENT:
        return "the current CUDA device ('cuda')"
    if dev.startswith("sym:each:"):
        return f"a device that changes with `{dev[9:]}`"
    if dev.startswith("sym:@"):  # an entry of a list imported from another module
        name, _, index = dev[5:].partition("[")
        return f"`{name.rsplit('.', 1)[-1]}[{index}`"
    if dev.startswith("sym:"):
        return f"`{dev[4:]}`"
    return dev


def device_literal(dev: str) -> str:
    """How to write the device in code (for fixes and messages)."""
    if dev.startswith("sym:@"):
        name, _, index = dev[5:].partition("[")
        return f"{name.rsplit('.', 1)[-1]}[{index}"
    if dev.startswith("sym:"):
        return dev[4:]
    return repr(dev)


# ---------------------------------------------------------------- values


class Val:
    __slots__ = ()


class _Unknown(Val):
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNK"


UNK = _Unknown()


@dataclass(eq=False)
class Const(Val):
    value: Any


@dataclass(eq=False)
class DeviceV(Val):
    """A value that denotes a device: torch.device(...), 'cuda:1', an index."""

    devs: Devs
    text: str = ""


@dataclass(eq=False)
class DtypeV(Val):
    pass


@dataclass(eq=False)
class Obj(Val):
    """A tensor, parameter, buffer or module whose device the model tracks.

    kind: 'tensor' | 'param' | 'buffer' | 'module' | 'any' (moved by .to() but
    of a type the model does not know)."""

    kind: str
    devs: Devs
    label: str = ""
    origin: str = ""  # where it got its device, for messages ("moved to cuda:1")
    at: Any = field(default=None, repr=False)  # the node where it got its device (positions resolved lazily)
    cls: Any = field(default=None, repr=False)  # ClassInfo of an instance of an analysed class
    attrs: dict[str, Val] | None = field(default=None, repr=False)  # attribute -> Val, for instances
    split: tuple[tuple[str, str], ...] | None = None  # ((attr, dev), ...) when on >= 2 devices
    dispatched: str = ""  # how a library split it ("device_map='auto'")
    invariant: bool = False  # unchanging between calls (buffer, parameter, constant)
    moved_from: Devs = None  # for MP005: the device before the last transfer
    moved_at: Any = field(default=None, repr=False)  # the node of the last transfer
    worked: bool = True  # has it been computed on since the last transfer?
    in_devs: Devs = None  # modules: where their input must be
    out_devs: Devs = None  # modules: where their output is
    lineage: int | None = None  # which activation this is, across transfers (events.Crossing)
    hop: int = 0  # how many crossings its lineage had made when this value got where it is (Crossing.hop)
    extra: dict[str, Any] | None = None  # loss modules: their weight tensors
    # Its type is assumed, not known: an element unpacked from a value, or the
    # output of a module whose forward the model does not read (a list, a tuple
    # or a dict would look the same). For a module: so is the type of its output.
    opaque: bool = False
    # A module object built by one evaluation (Interp.new_ident), kept by its moved copies: two
    # values with one ident are one object, so moving one moves the other (a shared block).
    ident: int | None = None
    # An instance of a class of the file: the idents its own __init__ gave the modules it built (start, end),
    # kept by every copy of it (a moved instance, one rebuilt as built): those parts are one per construction.
    built_idents: tuple[int, int] | None = None
    # A torch.nn module: its class's name ("LSTM"), for the arguments besides its input that must be
    # where it is (torchapi.SAME_DEVICE_ARGUMENTS).
    nn_class: str = ""
    # A tensor larger than its data (MP016): the `.expand()` / `.repeat()` call that made it so, kept
    # while it is only named, reshaped or moved to where it is already.
    enlarged_at: Any = field(default=None, repr=False)
    # Token ids, labels, indices or a mask (randint, arange of ints, a comparison, `.argmax()`, `.long()`),
    # kept while it is moved, converted or laid out again: a batch-by-sequence tensor, no activation.
    index_like: bool = False
    # (The node, the devices it left, where the moved value was made) of the move this tensor was computed from, alone, since it arrived (elementwise steps, reductions along a
    # dim, constants: `-(w * w.log()).sum(-1)` of `w = a.to(d)`): a full reduction of it could have been made
    # before that move, and only the one value moved (MP016). Given explicitly where an op keeps it; any other
    # copy (`with_`) drops it.
    reducible_move: Any = field(default=None, repr=False)
    # Computed by an op from that move's data (not that data itself): `scores.cpu().topk(k)` (MP005's host work).
    # Dropped by any copy that does not give it, as `reducible_move` is.
    made_from_move: bool = False
    # A row of a tensor a loop walks (`for q in queries:`): the loop's iterable, as the code writes it. Moved on
    # each pass, it is one copy per row where one of the whole would do (MP021). Dropped by any copy that does
    # not give it.
    row_of: Any = field(default=None, repr=False)
    # It may have no dimensions (a full reduction, an element, a row of a 1-D tensor): PyTorch reads a 0-dim
    # integer index as a number, so one on a GPU may still index host memory (with a sync).
    may_be_0d: bool = False
    # It stands for some of the items of a list of unknown length (a slice of `[Block() for p in rates]`): which
    # objects is not known, so they are not known to be shared with another slice (shared.py).
    some_of_many: bool = False
    # A tensor on one path and None on another (join): `mask is None` is not decided by it (expressions'
    # _certainly_not_none), as it is for a tensor every path made.
    maybe_none: bool = False
    # A reduction along a dim (`logits.max(1).values`, `e.sum(1)`), or computed from such alone: a statistic per
    # row, not the activation a chain of layers carries; its crossings are no stage's (MP006: a vocabulary-parallel
    # loss exchanges its shards' maxima and sums). Kept by copies; an op with an activation gives an activation.
    row_statistic: bool = False
    # A module's parameter or buffer moved with its module: the node that made it (`torch.full((3,), -0.5)`), where
    # `at` moves on to the module move, for its size as the code spells it (MP011's certainly_small).
    made_by: Any = field(default=None, repr=False)
    # A tensor whose device depends on which way an `if` the analysis could not decide went (`inp = target[:, t]`
    # under a teacher-forcing test, `inp = pred` otherwise): the value on each way (statements.exec_if). Kept by
    # joins; any copy (`with_`) drops it, as an op's result is a value of its own.
    paths: tuple[Path, ...] | None = field(default=None, repr=False)

    def with_(self, **kw: Any) -> Obj:
        if "enlarged_at" not in kw and (kw.get("worked") is True or kw.get("label") == ""):
            kw["enlarged_at"] = None  # a value computed from this one (an op's result, an item): its own size
        kw.setdefault("paths", None)
        kw.setdefault("reducible_move", None)
        kw.setdefault("made_from_move", False)
        kw.setdefault("row_of", None)
        return replace(self, **kw)


MAX_PATHS = 4  # the ways a value whose device depends on an `if` keeps (ways.py); more: not followed


def _joined_paths(a: Obj, b: Obj) -> tuple[Path, ...] | None:
    """The ways of two values meeting: each one's ways (a value made on no `if`'s way adds none: ways.py)."""
    if not (a.paths or b.paths):
        return None
    joined = tuple(dict.fromkeys((*(a.paths or ()), *(b.paths or ()))))
    return joined if len(joined) <= MAX_PATHS else None


def made_by(v: Obj) -> Any:
    """The node that made `v` as the code spells it: where it was made before any module move placed it."""
    return v.made_by if v.made_by is not None else v.at


@dataclass(eq=False)
class SeqV(Val):
    items: tuple[Val, ...] | None  # None: unknown length
    elem: Val = UNK  # the join of the items when the length is unknown
    kind: str = "list"
    module: bool = False  # an nn.Sequential / ModuleList
    # Items of unknown number that certainly include one like each of these, on different devices:
    # built from the parameters of a split model (ParamsOf.per_device), one value per device.
    spans: tuple[Val, ...] | None = None
    spans_by: tuple[str, ...] = ()  # the device of the parameter each of `spans` was made from
    # The first item, where the length is not known but the first is: `list(a.parameters()) +
    # list(b.parameters())` starts with a's first parameter (`params[0]`, an optimizer's `group["params"][0]`).
    head: Val | None = None
    # The forward hooks registered on an nn.Sequential, in order (`register_forward_pre_hook`, ...): a hook of
    # the file's is run where the container is called; with one not known, what reaches its first layer, or
    # leaves its last, is not known either (Calls.sequential_call).
    hooks: tuple[SequentialHook, ...] = ()


@dataclass(frozen=True, eq=False)
class SequentialHook:
    """One hook registered on an nn.Sequential: the method that registered it, the hook (None: not known)
    and whether it takes and gives the keyword arguments (`with_kwargs=True`)."""

    meth: str
    fn: Val | None
    with_kwargs: bool = False


@dataclass(eq=False)
class DictV(Val):
    items: dict[Any, Val]
    module: bool = False
    # A namespace of attributes (`types.SimpleNamespace(device="cuda:1")`), read as `ns.device`.
    namespace: bool = False
    # The dict literal that built it, when one did (its lookups are MapLookup facts: map_lookups.py).
    at: Any = field(default=None, repr=False)
    # A configparser.ConfigParser or one of its sections (ini_text.py): its get/getint/read_string are its own.
    ini: bool = False


# The origin of a gradient a custom Function's backward gets (calls._gradients_for): it must stay where it is
# (autograd refuses a gradient returned on another device than its input), so what it meets is what moves.
GRADIENT_OF_OUTPUT = "the gradient of its output"


@dataclass(eq=False)
class AutogradCtx(DictV):
    """The `ctx` of a custom torch.autograd.Function, as its backward reads it: what forward saved on it
    (`saved_tensors`, `ctx.name = x`), by attribute (calls._autograd_ctx)."""


@dataclass(eq=False)
class QName(Val):
    """A reference to an imported (or builtin) name: 'torch.nn.DataParallel'."""

    q: str


@dataclass(eq=False)
class ClassRef(Val):
    info: Any


@dataclass(eq=False)
class FuncRef(Val):
    info: Any
    bound: Val | None = None  # self, for methods


@dataclass(eq=False)
class LambdaV(Val):
    """`lambda i: f"cuda:{i}"`: the expression and the names it saw where it was made (a closure, as Python's).
    A call evaluates the body with its parameters bound (Calls.call_lambda)."""

    node: Any  # cst.Lambda
    env: dict[str, Any]
    # Its parameters' defaults, evaluated where it was made, as Python does (`lambda m, d=d: m.to(d)` in a loop or
    # a comprehension keeps each pass's `d`); None for a lambda made before this was known (evaluated at the call).
    defaults: dict[str, Any] | None = None


@dataclass(eq=False)
class PartialV(Val):
    """`functools.partial(func, *args, **kwargs)`: calling it calls `func` with these first."""

    func: Val
    args: tuple[Val, ...]
    kwargs: dict[str, Val]


@dataclass(eq=False)
class Summarized(Val):
    """A class or function from another project file, known by its summary."""

    summary: dict[str, Any]
    name: str
    kind: str  # 'class' | 'function'
    module: str = ""  # the dotted name of the module it is defined in


@dataclass(eq=False)
class SymV(Val):
    """An unknown value with a name (a parameter, `devices[1]`): as a device it
    is symbolic, so two entries of one list of devices can be told apart."""

    name: str


def _joined_extra(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """A module wrapped in nn.DataParallel on one path only (`if n_gpu >= 2: front = DataParallel(front, ...)`):
    it may scatter its inputs itself, so where they must be is not known; where its output lands is known only
    when both paths agree."""
    da = a.get(DATA_PARALLEL_OUTPUT, _NONE_SEEN) if a else _NONE_SEEN
    db = b.get(DATA_PARALLEL_OUTPUT, _NONE_SEEN) if b else _NONE_SEEN
    if da is _NONE_SEEN and db is _NONE_SEEN:
        return None
    return {DATA_PARALLEL_OUTPUT: da if da == db else None}


_NONE_SEEN = object()


def _joined_attrs(a: Obj, b: Obj) -> dict[str, Val] | None:
    """One instance (same class, same object) moved on one path and not, or elsewhere, on another (`blocks[i].to(d)`
    in a loop over unknown indices): its parts joined one by one, so that calling it still runs its class's forward.
    Other pairs keep no attributes: two objects, or two classes, have no one set of parts."""
    if a.cls is None or a.cls is not b.cls or a.ident is None or a.ident != b.ident:
        return None
    if a.attrs is None or b.attrs is None or a.attrs.keys() != b.attrs.keys():
        return None
    return {k: v if v is b.attrs[k] else join(v, b.attrs[k]) for k, v in a.attrs.items()}


def join(a: Val, b: Val) -> Val:
    """The value after two paths meet."""
    if a is b:
        return a
    if isinstance(a, Obj) and isinstance(b, Obj):
        kind = a.kind if a.kind == b.kind else "any"
        devs = join_devs(a.devs, b.devs)
        same = a.devs == b.devs
        return Obj(
            kind,
            devs,
            label=a.label or b.label,
            origin=a.origin if same else "",
            at=a.at if same else None,
            made_by=a.made_by if a.made_by is b.made_by else None,
            cls=a.cls if a.cls is b.cls else None,
            attrs=a.attrs if a.attrs is b.attrs else _joined_attrs(a, b),
            split=a.split or b.split if (a.split and b.split) else None,
            invariant=a.invariant and b.invariant,
            worked=a.worked or b.worked,
            moved_from=a.moved_from if a.moved_from == b.moved_from else None,
            in_devs=a.in_devs if a.in_devs == b.in_devs else None,
            out_devs=a.out_devs if a.out_devs == b.out_devs else None,
            lineage=a.lineage if a.lineage == b.lineage else None,
            hop=max(a.hop, b.hop),
            extra=a.extra if a.extra is b.extra else _joined_extra(a.extra, b.extra),
            opaque=a.opaque or b.opaque,
            ident=a.ident if a.ident == b.ident else None,
            maybe_none=a.maybe_none or b.maybe_none,
            row_statistic=a.row_statistic and b.row_statistic,
            paths=_joined_paths(a, b),
        )
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Obj) and x.kind in ("tensor", "scalar", "param", "buffer") and _is_none(y):
            # A tensor on one path, None on the other (`aux = self.aux(h) if self.training else None`): where it
            # is used as a tensor it is that tensor, so its device is known there.
            return x.with_(maybe_none=True)
    if isinstance(a, DeviceV) and isinstance(b, DeviceV):
        return DeviceV(join_devs(a.devs, b.devs))
    if isinstance(a, Const) and isinstance(b, Const) and a.value == b.value and type(a.value) is type(b.value):
        return a
    if isinstance(a, (Const, DeviceV)) and isinstance(b, (Const, DeviceV)):
        da, db = as_device(a), as_device(b)
        if da is not None and db is not None:
            return DeviceV(join_devs(da, db))
    if (
        isinstance(a, SeqV)
        and isinstance(b, SeqV)
        and a.items is not None
        and b.items is not None
        and len(a.items) == len(b.items)
    ):
        # A hook registered on either path may move what the container gets: both paths' hooks.
        hooks = a.hooks + tuple(h for h in b.hooks if h not in a.hooks)
        return SeqV(
            tuple(join(x, y) for x, y in zip(a.items, b.items)), kind=a.kind, module=a.module and b.module, hooks=hooks
        )
    return UNK


def _is_none(v: Val) -> bool:
    return isinstance(v, Const) and v.value is None


def known_tensor(v: Val) -> bool:
    """True when `v` is certainly a tensor (parameter, buffer), or the result of a
    `.to()`/`.cuda()` on an operand of unknown type (which then has `.to()`, like a
    tensor): what a fix may append `.to(device)` to. Never a module, a list, a tuple,
    a dict, or an element unpacked from a module's output."""
    if not isinstance(v, Obj) or v.opaque:
        return False
    return v.kind in ("tensor", "param", "buffer") or (v.kind == "any" and v.origin.startswith("moved to "))


def device_from_str(s: str) -> str | None:
    s = s.strip()
    if s in ("cuda", "cpu", "meta", "mps", "xpu"):
        return s
    m = re.fullmatch(r"(cuda|xpu|npu|mps):(\d+)", s)
    if m:
        return f"{m.group(1)}:{int(m.group(2))}"
    return None


def as_device(v: Val, ints_are_cuda: bool = True) -> Devs:
    """The device a value denotes when used as a device argument, or None."""
    if isinstance(v, DeviceV):
        return v.devs
    if isinstance(v, SymV):
        return one(f"sym:{v.name}")
    if isinstance(v, Const):
        if isinstance(v.value, str):
            d = device_from_str(v.value)
            return one(d) if d else None
        if isinstance(v.value, int) and not isinstance(v.value, bool) and ints_are_cuda and v.value >= 0:
            return one(f"cuda:{v.value}")
    return None


# ---------------------------------------------------------------- shared by the interpreter's parts

# The lineage of a value that has left the activation chain: a reduction to a scalar, a
# loss, indices or a comparison (a metric). Moving it is no crossing of the activations.
OFF_CHAIN = -1

# The origin of what torch.load(..., map_location=<one device>) gives (library._load): a state dict whose
# tensors are all there, which load_state_dict(..., assign=True) puts into a module as they are.
LOADED = "loaded by torch.load with"


def maybe_a_number(v: Val) -> bool:
    """An entry of what torch.load gave, read by its key and not yet used as a tensor (`ckpt["decay"]`): a
    checkpoint holds numbers beside tensors (a step count, an EMA's decay), and `map_location` moves only the
    tensors. Such a value is compared with no device; once moved (`.to(dev)`: a number has no `.to`), it is a
    tensor."""
    return isinstance(v, Obj) and v.kind == "any" and v.origin.startswith(LOADED) and v.origin.endswith(BY_KEY)


BY_KEY = ", an entry read by its key"  # the end of such an entry's origin (expressions.ev_subscript)


MOVED_SOMEWHERE = "moved by .{meth}() to a device not known here"  # the origin of a module moved so (moves.py)
HOOKS_KEY = "forward hooks"  # the key, in a module's `extra`, of the forward hooks registered on it (calls.py)
# The key, in a module's `extra`, of its class's own `to()` that moved only its plain tensors (the FunctionDef), when
# one was called on it: why its weights stayed where they were (calls.py, MP001's message).
OWN_MOVE_KEY = "own move"
UNPLACED = "built without a device"  # the origin of a parametered torch.nn module not yet placed
# The origin of a torch.nn layer given another's weight (`head.weight = embed.weight`): it computes there.
TIED_WEIGHT = "its weight tied to another's"
# The origin of a placed torch.nn layer given a new Parameter made on the CPU (`lin.weight = nn.Parameter(...)`).
WEIGHT_REPLACED = "its weight replaced by a new Parameter"
# The origin of a tensor a factory made on the CPU because no device= was given (`torch.zeros(n, d)`):
# beside a GPU tensor, it is the one off its device (created where the code forgot to say).
# Obj.extra's key of a module wrapped in nn.DataParallel: where a call of it gives its output (None: not known).
DATA_PARALLEL_OUTPUT = "data_parallel_output"
MADE_ON_CPU_BY_DEFAULT = "created on the CPU by torch.{}() without device="


def made_on_cpu_by_default(v: Val | None) -> bool:
    """Was `v` made on the CPU by a factory given no device= (or computed from such a tensor first)?"""
    return (
        isinstance(v, Obj)
        and v.origin.startswith("created on the CPU by torch.")
        and v.origin.endswith("without device=")
    )


def weight_on_gpu(v: Val) -> bool:
    """A parameter or buffer on one GPU: beside an activation on another, the activation is the one to move."""
    return isinstance(v, Obj) and v.kind in ("param", "buffer") and (single(v.devs) or "").startswith("cuda:")


# The origin of what a loss returned (`at`: the loss's call), kept by what is computed from it first: a
# mask or weights on another device meet a loss's value (rules/metrics.py: MP008's, not MP001's).
LOSS_OF = "the loss"
PROBE = one("sym:__input__")  # the device of the input given to a forward to see where it must be


def probe_devs(i: int) -> frozenset[str]:
    """The probe device of a forward's positional argument i (PROBE for the first)."""
    return PROBE if i == 0 else one(f"sym:__input__{i}")


def is_probe(devs: Devs) -> bool:
    d = single(devs)
    return d is not None and d.startswith("sym:__input__")


_CPU = one("cpu")


@dataclass(eq=False)
class Starred(Val):
    """`*xs` of unknown length in a call: each item is like `elem`."""

    elem: Val


class SuperV(Val):
    """`super()`."""

    __slots__ = ()


def _first_leaf(seq: SeqV, depth: int = 0) -> Val:
    """The first module of a container, inside nested ones (`nn.ModuleList([nn.Sequential(conv, bn), ...])`:
    the conv), or UNK."""
    item = seq.items[0] if seq.items else seq.elem
    if isinstance(item, SeqV) and item.module and depth < 4:
        return _first_leaf(item, depth + 1)
    return item


class TupleType(Val):
    """A class made by `collections.namedtuple("Cfg", "device step_device")`: a call of it gives a namespace of its
    fields (`cfg.step_device`), as `types.SimpleNamespace(...)` does."""

    __slots__ = ("defaults", "fields")

    def __init__(self, fields: tuple[str, ...], defaults: tuple[Val, ...] = ()) -> None:
        self.fields = fields
        self.defaults = defaults

    def make(self, args: list[Val], kwargs: dict[str, Val]) -> Val:
        if len(args) > len(self.fields) or any(k not in self.fields for k in kwargs):
            return UNK  # Python raises there
        given: dict[str, Val] = dict(zip(self.fields, args))
        given.update(kwargs)
        # defaults fill the rightmost fields
        for name, default in zip(self.fields[len(self.fields) - len(self.defaults) :], self.defaults):
            given.setdefault(name, default)
        return DictV(given, namespace=True)


class NamePrefix(Val):
    """A parameter's name known by its start only: one attribute's parameters of a split model, named by
    `named_parameters()` ("fc." for `self.fc`'s). Enough to decide `n.startswith("fc.")` or `"fc" in n`, a filter
    that keeps a backbone's parameters and drops a head's."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def startswith(self, start: Val) -> Val:
        starts = start.items if isinstance(start, SeqV) and start.items is not None else (start,)
        answers = []
        for s in starts:
            if not (isinstance(s, Const) and isinstance(s.value, str)):
                return UNK
            # decided when one is a start of the other's known part; "fc" may still start "fc2." (not decided)
            answers.append(
                True if self.prefix.startswith(s.value) else None if s.value.startswith(self.prefix) else False
            )
        if any(a is True for a in answers):
            return Const(True)
        return Const(False) if all(a is False for a in answers) else UNK

    def contains(self, part: str) -> bool | None:
        """`part in name`: certain only when the known start holds it."""
        return True if part in self.prefix else None


class ParamsOf(Val):
    """`module.parameters()`: next() of it is the first parameter, on the first placed submodule.
    `shape` says how the parameters come: 'params' (`parameters()`, `state_dict().values()`),
    'named' ((name, parameter) pairs: `named_parameters()`, `state_dict().items()`) or 'mapping'
    (`state_dict()` itself, whose iteration gives names)."""

    __slots__ = ("mod", "shape")

    def __init__(self, mod: Obj, shape: str = "params") -> None:
        self.mod = mod
        self.shape = shape

    def first(self) -> Val:
        if self.shape == "mapping":
            return UNK
        p = self._first()
        return SeqV((UNK, p), kind="tuple") if self.shape == "named" else p

    def _first(self) -> Val:
        m = self.mod
        if m.attrs is None:
            first = (m.extra or {}).get("first")  # a split instance of another file's class: its summary's
            if m.devs is None and isinstance(first, str):
                return Obj("param", one(first), origin="the first parameter", at=m.at, invariant=True)
            return Obj("param", m.devs, origin=m.origin, at=m.at, invariant=True) if m.devs is not None else UNK
        for v in m.attrs.values():
            if isinstance(v, Obj) and v.kind in ("module", "any", "param", "buffer"):
                if v.devs is None:
                    return UNK
                return Obj("param", v.devs, origin=f"the first parameter, in `{v.label}`", at=v.at, invariant=True)
            if isinstance(v, SeqV) and v.module:
                item = _first_leaf(v)
                return (
                    Obj("param", item.devs, origin="the first parameter", at=item.at, invariant=True)
                    if isinstance(item, Obj) and item.devs
                    else UNK
                )
        return UNK

    def per_attribute(self) -> list[tuple[str, Obj]] | None:
        """One parameter for each placed attribute of a split model (its name, and a parameter there), for
        filters by name; None where per_device would say nothing."""
        m = self.mod
        if not m.split or m.attrs is None or self.per_device() is None:
            return None
        out: list[tuple[str, Obj]] = []
        for attr, dev in m.split:
            v = m.attrs.get(attr)
            holds = (isinstance(v, Obj) and v.kind in ("module", "param")) or (isinstance(v, SeqV) and v.module)
            if holds and all(a != attr for a, _ in out):
                out.append((attr, Obj("param", one(dev), label="", origin=f"a parameter of `{attr}`", invariant=True)))
        return out

    def per_device(self) -> list[Obj] | None:
        """One parameter for each device the module's parameters certainly span (a split model:
        its submodules and parameters placed on two or more devices), else None. Buffers and
        plain tensor attributes do not count: they are not in parameters()."""
        m = self.mod
        spans = (m.extra or {}).get("param_devs")
        if m.split and m.attrs is None and spans:
            # A split instance of another file's class: its summary (or its caller's encoding) says them.
            whose = m.label or "the model"
            return [Obj("param", one(d), origin=f"a parameter of `{whose}` on {d}", invariant=True) for d in spans]
        if not m.split or m.attrs is None:
            return None
        reps: dict[str, Obj] = {}
        for attr, dev in m.split:
            v = m.attrs.get(attr)
            holds = (isinstance(v, Obj) and v.kind in ("module", "param")) or (isinstance(v, SeqV) and v.module)
            if holds and dev not in reps:
                reps[dev] = Obj("param", one(dev), label="", origin=f"a parameter of `{attr}`", invariant=True)
        devs = list(reps)
        if len(devs) < 2 or not all(distinct(a, b) for i, a in enumerate(devs) for b in devs[i + 1 :]):
            return None
        return list(reps.values())


def spans_of(it: Val) -> tuple[list[Val], tuple[str, ...]] | None:
    """One item per device for an iterable that certainly spans devices (the parameters of a
    split model, or a list built from them), with the device of the parameter each item was
    made from (two such iterables pair up item by item only when those agree); else None."""
    if isinstance(it, ParamsOf):
        reps = it.per_device() if it.shape != "mapping" else None
        if reps is None:
            return None
        by = tuple(single(r.devs) or "" for r in reps)
        return ([SeqV((UNK, r), kind="tuple") for r in reps] if it.shape == "named" else list(reps)), by
    if isinstance(it, SeqV) and it.items is None and it.spans is not None:
        return list(it.spans), it.spans_by
    return None


# What an op that was reported returns: a tensor of unknown device, so one bug gives one finding.
FAILED_MARK: dict[str, Any] = {"failed": True}
FAILED = Obj("tensor", None, origin="", extra=FAILED_MARK)


def failed(v: Val) -> bool:
    return isinstance(v, Obj) and v.extra is FAILED_MARK


def used(*vals: Val, depth: int = 0) -> None:
    """Marks tensors as worked on since their last transfer (MP005 counts only idle round trips);
    also those inside a list, a tuple or a dict passed on (`module(*inputs)`)."""
    for v in vals:
        if isinstance(v, Obj) and not v.worked:
            v.worked = True
        elif depth < 3 and isinstance(v, Starred):
            used(v.elem, depth=depth + 1)
        elif depth < 3 and isinstance(v, SeqV):
            used(*(v.items if v.items is not None else (v.elem,)), depth=depth + 1)
        elif depth < 3 and isinstance(v, DictV):
            used(*v.items.values(), depth=depth + 1)


def both_cuda(a: Devs, b: Devs) -> bool:
    x, y = single(a), single(b)
    return bool(x and y and x.startswith("cuda") and y.startswith("cuda"))


def value_key(v: Val) -> tuple[Any, ...]:
    """A hashable key that tells apart the values a call may behave differently on (memoisation)."""
    if isinstance(v, Const):
        return ("c", repr(v.value))
    if isinstance(v, DeviceV):
        return ("d", v.devs)
    if isinstance(v, Obj):
        return (
            "o",
            v.kind,
            v.devs,
            id(v.cls) if v.cls else None,
            id(v.attrs) if v.attrs is not None else None,
            v.ident,
            # a tensor just moved, reduced in the call (MP016 names that move): a run of its own per move
            id(v.reducible_move[0]) if v.reducible_move is not None else None,
        )
    if isinstance(v, SymV):
        return ("s", v.name)
    if isinstance(v, SeqV):
        items = tuple(value_key(i) for i in v.items) if v.items is not None and len(v.items) < 8 else None
        return ("l", v.kind, items)  # (a tuple and a list of the same items answer isinstance apart)
    return (type(v).__name__, id(v) if isinstance(v, (ClassRef, FuncRef, Summarized, PartialV, LambdaV)) else None)


def is_module(v: Val) -> bool:
    """A module or a container of modules (not a parameter or a buffer, as is_moduleish takes too)."""
    return (isinstance(v, Obj) and v.kind == "module") or (isinstance(v, (SeqV, DictV)) and v.module)


def is_moduleish(v: Val) -> bool:
    return (
        (isinstance(v, Obj) and v.kind in ("module", "any", "param", "buffer"))
        or (isinstance(v, SeqV) and v.module)
        or (isinstance(v, DictV) and v.module)
    )


def placements(v: Val, depth: int = 0) -> list[tuple[str, Any]]:
    """The devices a submodule/parameter/container attribute puts weights on, with where."""
    if depth > 3:
        return []
    if isinstance(v, Obj):
        if v.kind not in ("module", "any", "param", "buffer"):
            return []
        if v.split:
            return [(d, 0) for _, d in v.split]
        if v.devs is not None and len(v.devs) == 1:
            if v.devs == _CPU and not v.origin.startswith(("moved to", "built with")):
                return []  # left on the CPU by default: not a stage placement
            return [(d, v.at) for d in v.devs]
        return []  # unknown, or different devices on different paths: not a fact
    if isinstance(v, SeqV) and v.module:
        if v.items is not None:
            return [p for i in v.items for p in placements(i, depth + 1)]
        return placements(v.elem, depth + 1)
    if isinstance(v, DictV) and v.module:
        return [p for i in v.items.values() for p in placements(i, depth + 1)]
    return []


def is_splitish(v: Val) -> bool:
    """A model on several devices: split by hand, dispatched by a library, or a container of both."""
    if isinstance(v, Obj):
        return bool(v.split or v.dispatched)
    if isinstance(v, SeqV) and v.module:
        return is_split_devs([d for d, _ in placements(v)])
    return False


def with_part_replaced(base: Val, attr: str, part: Val) -> Obj | None:
    """An instance of a class of this file whose module part a script or builder moved (`net.features.to(
    "cuda:0")`: Module.to() works in place) or replaced (`net.head = Adapter(net.head).to("cuda:1")`): the
    instance as it holds that part now, split, or on one device, as its parts' placements say (the rule of
    instances._finish_instance). None where `base` is no such instance or either side no module. A part that lands
    on other devices marks its class (ClassInfo.replaced_outside): the instance its __init__ built is not what runs."""
    if not (
        isinstance(base, Obj)
        and base.cls is not None
        and base.attrs is not None
        and is_moduleish(base.attrs.get(attr, UNK))
        and is_moduleish(part)
    ):
        return None
    if {d for d, _ in placements(base.attrs[attr])} != {d for d, _ in placements(part)}:
        base.cls.replaced_outside = True
    attrs = {**base.attrs, attr: part}
    refs = base.cls.refs
    placed = [(a, d) for a, v in attrs.items() if a not in refs for d, _ in placements(v)]
    devs = [d for _, d in placed]
    if placed and is_split_devs(devs):
        return base.with_(attrs=attrs, split=tuple(dict.fromkeys(placed)), devs=None)
    if placed and len(set(devs)) == 1 and all(placements(v) for v in attrs.values() if is_moduleish(v)):
        return base.with_(attrs=attrs, split=None, devs=one(devs[0]))
    return base.with_(attrs=attrs, split=None, devs=None)


def holds_split(v: Val) -> bool:
    return isinstance(v, SeqV) and v.items is not None and any(is_splitish(i) for i in v.items)


def join_all(vals: Iterable[Val]) -> Val:
    out: Val | None = None
    for v in vals:
        out = v if out is None else join(out, v)
    return out if out is not None else UNK


def iter_items(it: Val) -> list[Val] | None:
    """The items of an iterable of known length, else None."""
    if isinstance(it, SeqV) and it.items is not None:
        return list(it.items)
    if isinstance(it, DictV):
        return [Const(k) for k in it.items]
    if isinstance(it, Const) and isinstance(it.value, str) and len(it.value) <= 16:
        return [Const(c) for c in it.value]  # `for c in "0011"`: a GPU per stage, one digit each
    return None


def iter_elem(it: Val, target: str | None, walked: Any = None, only_moved: bool = False) -> Val:
    """What one item of `it` is, bound to the loop variable `target` (a plain name, else None); `walked`: the
    loop's iterable as the code writes it (Obj.row_of, for a tensor the model knows to be one). Chunks
    (`x.split(b)`) are batches cut on purpose, no rows, unless `only_moved`: a comprehension that does nothing
    but move each (`[f.to(dev) for f in feats.split(sizes)]`) holds every copy at once, as one copy would."""
    if (
        isinstance(it, Obj)
        and it.kind == "tensor"
        and not it.opaque
        and target is not None
        and walked is not None
        and (only_moved or not _cut_in_chunks(walked))
    ):
        return it.with_(label=target, may_be_0d=True, row_of=walked)
    if isinstance(it, Obj) and it.kind in ("tensor", "any"):
        return it.with_(label="", may_be_0d=True)  # rows of a tensor, items of a module's list output: same device
    if isinstance(it, SeqV):
        if it.kind == "dict":
            return UNK  # the keys of a dict whose values are alike (Expressions.ev_comp)
        if it.items is None:
            if isinstance(it.elem, SymV) and it.elem.name.startswith("each:"):
                return it.elem
            return it.elem if it.elem is not UNK else _each(target)
        return join_all(it.items)
    return _each(target)


# Calls that cut a tensor into chunks of rows (`x.split(64)`, `torch.chunk(x, 4)`): batches, cut on purpose.
_CHUNKING = frozenset({"split", "chunk", "tensor_split", "hsplit", "vsplit", "dsplit", "array_split"})


def _cut_in_chunks(walked: Any) -> bool:
    """Is the loop's iterable (as the code writes it) a call that cuts a tensor into chunks?"""
    func = getattr(walked, "func", None)
    name = getattr(getattr(func, "attr", None), "value", None) or getattr(func, "value", None)
    return isinstance(name, str) and name in _CHUNKING


def _each(target: str | None) -> Val:
    return SymV(f"each:{target}") if target is not None else UNK


# The keyword under which a call's `**mapping` of unknown keys gives its (alike) values: a
# parameter that no other argument binds may come from it (Calls.bind).
ANY_KEYWORD = "**"
