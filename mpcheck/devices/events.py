"""The facts the interpreter records for the rules: one frozen dataclass per kind.

Every fact has the node it is about and the mode of the path it was seen on
('' | 'eval' | 'train' | 'no_grad'). Rules ask the model for the facts of one
type (`ctx.model.facts(Transfer)`) and read typed fields; none of them walks
the tree or the interpreter's state.

`Recorder` keeps them: one fact per (type, node, key), and `muted()` for the
runs whose facts must not count (a probe of a forward, a summary).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import libcst as cst

from mpcheck.devices.values import Devs, Obj, Val


@dataclass(frozen=True)
class CallSite:
    """A call in another file that ran a helper of this one (devices/callers.py): where it
    is (the path as the run shows it, the line) and its text. `chain`: for a call made in a
    helper that itself ran under a caller of a third file, those outer calls, outermost first
    (`engine.train(model, loader, dev)` at main.py:11 for `utils.step(model, batch, dev)` at
    engine.py:7)."""

    path: str
    line: int
    code: str
    chain: tuple[CallSite, ...] = ()


@dataclass(frozen=True, eq=False, kw_only=True)
class Fact:
    node: cst.CSTNode
    mode: str = ""
    # The call, in another function, that ran the helper this fact is in with the arguments
    # that made its devices known (`train_one_epoch(model, loader, model.devices[0])`); None
    # when the fact is in the entry point's own body or in a forward. A CallSite when the
    # call is in another file.
    via: cst.CSTNode | CallSite | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Mismatch(Fact):
    """`value` certainly is not on `target`, the device of what it meets (a module, an operand, an op)."""

    value: Obj
    target: Devs
    what: str  # the module or the other operand, in words
    op: str  # 'module' | 'op' | 'index' | '.add()' | the torch function's name
    arg_index: Any = 0
    expr: cst.BaseExpression | None = None  # the value's expression
    module: Obj | None = None  # the module called, when op == 'module'
    other: Val | None = None  # the other operand
    what_expr: cst.BaseExpression | None = None  # its expression
    site: Any = 0  # which operand site of `node` (an argument index, 'op', 'binop'): see Recorder.need
    item: int | None = None  # the value is this element of `expr`, a tuple (an LSTM's `state`, (h0, c0))
    # The way through an `if` on which `value` is where it is (values.Path): elsewhere it may be where it must be.
    path: Any = None


@dataclass(frozen=True, eq=False, kw_only=True)
class GradientOffItsInput(Fact):
    """A custom autograd Function's backward returns (`node`, an item of its `return`) the gradient of input
    `index` on another GPU than `apply()` (`applied`) got that input on: autograd refuses it in backward
    (devices/backward_code.py)."""

    function: str  # the Function's class ("CrossDevice")
    index: int
    param: str  # forward's name for that input ("x")
    gradient: Obj
    input: Obj
    applied: cst.CSTNode
    saved_device: str  # `ctx.src` where forward saved that input's device on ctx; "" if it did not


@dataclass(frozen=True, eq=False, kw_only=True)
class StaleOptimizerState(Fact):
    """`opt.step()` (`node`) of an optimizer whose state was made (`state_at`: its first step, or
    `load_state_dict`) while its parameters were on `state`, and which are on `params` now: the model
    was moved since, and the state was not (devices/optimizers.py)."""

    optimizer: str  # its class ("Adam")
    state: tuple[str, ...]
    state_at: cst.CSTNode | None
    params: tuple[str, ...]
    modules: tuple[str, ...]  # the expressions of the modules whose parameters it holds (`model`)


@dataclass(frozen=True, eq=False, kw_only=True)
class StepsLoadedOnOneGpu(Fact):
    """`opt.load_state_dict(sd)` (`node`) with `sd` loaded by torch.load mapped to one GPU (`mapped`, at
    `loaded_at`), for an optimizer with a `step` tensor per parameter whose parameters are also on other GPUs
    (`params`): load_state_dict leaves the steps where they were loaded (devices/optimizers.py)."""

    optimizer: str
    mapped: str
    loaded_at: cst.CSTNode | None
    params: tuple[str, ...]
    modules: tuple[str, ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class DiscardedMove(Fact):
    """`x.to(dev)` as a statement on a tensor (`node`, the call): Tensor.to() returns a moved copy and
    leaves `x` where it was, so the result is lost (nn.Module.to() works in place; a tensor's does not)."""

    value: Obj  # the tensor, where it stays
    name: str  # its expression's text (`x`, `self.mask`)
    target: Devs  # where the copy went (None: unknown)


@dataclass(frozen=True, eq=False, kw_only=True)
class LossMismatch(Fact):
    """A loss gets `other` (the first tensor) and `value` on different devices."""

    value: Obj
    target: Devs
    other: Obj
    op: str
    expr: cst.BaseExpression | None = None
    other_expr: cst.BaseExpression | None = None
    weighs: Obj | None = None  # the loss module whose class weights `value` is (`nn.CrossEntropyLoss(weight=w)`)

    @classmethod
    def against_first(
        cls,
        first: tuple[Obj, cst.BaseExpression | None],
        value: Obj,
        expr: cst.BaseExpression | None,
        *,
        node: cst.CSTNode,
        mode: str,
        op: str,
    ) -> LossMismatch:
        """`value` (written `expr`) is not where the loss's first tensor, `first` (value, expression), is."""
        return cls(
            node=node,
            mode=mode,
            value=value,
            target=first[0].devs,
            expr=expr,
            other=first[0],
            other_expr=first[1],
            op=op,
        )


@dataclass(frozen=True, eq=False, kw_only=True)
class PredictionsMovedToTargets(Fact):
    """A class-dimension loss (`op`, called at `loss`) gets its predictions just moved from GPU `src` to
    GPU `dst`, where its targets are: `node` is that transfer. Moving the targets would copy less."""

    loss: cst.CSTNode
    src: str
    dst: str
    op: str
    targets_expr: cst.BaseExpression | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class OversizedMove(Fact):
    """`node`, a transfer from `src` to `dst`, carries more than the data needs (MP016): a tensor
    `enlarged` by that `.expand()` / `.repeat()` call, one that `reduction` (`x.to(d).isfinite().all()`,
    through elementwise steps only) reduces to one value right after the move, or one `indexed` by an index
    tensor right after it (`bank.to(d)[idx]`: a few rows of all that crossed)."""

    src: Devs
    dst: Devs
    enlarged: cst.Call | None = None
    reduction: cst.Call | None = None
    indexed: cst.Subscript | None = None  # `bank.to(d)[idx]`: rows picked by an index tensor right after
    pooled: cst.Call | None = None  # `self.pool(feats.to(d))`: a pooling layer run on it right after
    constant: bool = False  # the moved value never changes between calls (Obj.invariant)
    made_at: Any = None  # where the moved value was made (a factory call), for its size when the code spells it out


@dataclass(frozen=True, eq=False, kw_only=True)
class PlacedTwice(Fact):
    """__init__ places submodule `attr` twice (`node` is the second placement, `first` the first) while
    the modules `unplaced` of the same instance are never placed: a copy-paste slip (`self.l2.cuda(1)`
    written twice where the second was meant for `self.l3`)."""

    attr: str
    module: Obj
    first: cst.CSTNode
    first_dev: str
    unplaced: tuple[str, ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class Transfer(Fact):
    """`.to()` / `.cuda()` / `.cpu()` of a tensor: `value` (as it was) moved to `devs`."""

    value: Obj
    devs: Devs
    # Where the moved value comes from, for "moved every time" (MP011):
    reads_unchanging_attribute: bool = False  # an unchanging attribute of self, outside __init__
    # a constant of the module (`CLASS_WEIGHTS`), moved by a function that runs on every forward or loop pass
    reads_global_constant: bool = False
    bound_outside_loop: bool = False  # a name bound before an enclosing loop and not rebound in it
    target_fixed_in_loop: bool = False  # inside a loop, to a place the loop does not change
    # made on the host in this forward call from constants only (`torch.ones(S, S)`, S known): its
    # size in bytes; 0 otherwise
    host_constant_bytes: int = 0
    # The move, earlier on this path of the same function call, that already copied this same value to the
    # same device (`h = x.to(d)` ... `x.to(d)` again): that copy could be used instead; None otherwise.
    again_of: cst.CSTNode | None = None
    # A value computed on the host from a GPU tensor brought there alone (`scores.cpu().topk(k).indices`),
    # now sent to a GPU: the move that brought it (`.cpu()`); None otherwise (MP005).
    host_work_of: cst.CSTNode | None = None
    # The tensor whose rows a loop walks, when the moved value is its row as the loop gave it (Obj.row_of).
    rows_of: cst.CSTNode | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Crossing(Fact):
    """One step of an activation's lineage from `src` to `dst` (a transfer with known ends).

    `lineage` names the activation (it is kept through ops); `opens` marks its
    first crossing, `reported` whether that first crossing was in a run whose
    facts count; `undoes` marks an idle move straight back (a round trip).
    A step with `stage` set is no transfer but a call of that module object
    (Obj.ident, or where it was placed) on the activation (src and dst empty): a module called again
    starts a new pass (a generation loop), so MP006 counts crossings per pass.
    `hop` numbers a transfer within its lineage; a step with `merge` set is no
    transfer but two values of the lineage meeting on one device (src), the
    older made at hop `merge`: the crossings after it were a branch that came
    back (an expert's output summed into the input's device), not moves of the
    activation. `made_at`: the hop at which the moved value was made (its Obj.hop); one
    older than the lineage's last crossings leaves from data that stayed behind while
    they went out and back (tokens fanned out to experts one after the other), so those
    crossings were a branch, not the activation's way. `made_by`: where the value that moved (or, for a
    merge, the older value) was made (the id of its Obj.at; 0 where not known): a branch whose output is
    added back to the very value that left (`h = h + blk(h.to(d)).to(h.device)`) is a residual stream left
    behind, not a branch off it."""

    lineage: int
    src: str
    dst: str
    opens: bool = False
    reported: bool = False
    undoes: bool = False
    stage: Any = None
    hop: int = 0
    merge: int | None = None
    made_at: int = 0
    made_by: int = 0


@dataclass(frozen=True, eq=False, kw_only=True)
class DataParallelWrap(Fact):
    module: Val
    q: str  # the canonical name of the wrapper


@dataclass(frozen=True, eq=False, kw_only=True)
class DataParallelOffFirstId(Fact):
    """nn.DataParallel around a module that lives on one GPU, `dev`, other than device_ids[0] (`first`;
    cuda:0 for the default device_ids): its forward fails, DataParallel keeps the module on `first`."""

    module: Val
    dev: str
    first: str
    given: bool  # device_ids written in the call (else the default, every GPU)


@dataclass(frozen=True, eq=False, kw_only=True)
class DdpDeviceIds(Fact):
    module: Val
    args: tuple[str, ...]  # 'device_ids', 'output_device'


@dataclass(frozen=True, eq=False, kw_only=True)
class ParallelPrimitive(Fact):
    q: str
    module: Val | None  # None: the split class of the method (its self) is not known
    on_arg: bool  # the split model is an argument (else: used inside a split class)


@dataclass(frozen=True, eq=False, kw_only=True)
class Collapse(Fact):
    """A split model (`owner`, as the code names it) moved whole to `devs`."""

    module: Val
    devs: Devs
    meth: str
    owner: cst.BaseExpression | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class IndexlessPlacement:
    """An index-less `.cuda()` / 'cuda' while a set_device or `with torch.cuda.device` is in effect."""

    node: cst.CSTNode
    setdev: cst.CSTNode
    dev: str | None  # the current device it lands on, when known
    under_device_context: bool  # inside `with torch.cuda.device(...)`: index-less on purpose
    of_tensor: bool = False  # it places a tensor (made or moved), not a module
    of_loss: bool = False  # it moves a loss criterion (its class weights), which follows its inputs


@dataclass(frozen=True, eq=False, kw_only=True)
class EntryPointRun(Fact):
    """One entry point (the module body, a function, a method) interpreted to its end."""

    name: str
    builds_split: bool  # it builds, runs or moves a model split over several devices
    placements: tuple[IndexlessPlacement, ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class StagesPlacedOnCurrent(Fact):
    """A split class (`node`: its __init__) built while set_device(k), k > 0 known, made cuda:k current, whose
    __init__ places stages with an index-less `.cuda()` / 'cuda': each lands on cuda:k. Where one then gets
    its input from another GPU, the placement is the bug (MP004 there, not MP001 at the call)."""

    placements: tuple[IndexlessPlacement, ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class IndexlessBesideFirstGpu(Fact):
    """An __init__ that places its parts from device settings of their own (`.to(encoder_device)`,
    `.to(cfg.decoder_device)`), with no set_device in effect: one part (`attr`, placed at `node`) got the
    index-less 'cuda', the current device, which is cuda:0, and a sibling (`sibling`) got cuda:0 by name. Two
    settings written two ways for one GPU: the part meant for another GPU shares the first (MP004)."""

    attr: str
    sibling: str
    setting: str  # the index-less part's setting, as the code reads it (`decoder_device`)
    sibling_setting: str


@dataclass(frozen=True, eq=False, kw_only=True)
class UnenteredDeviceContext(Fact):
    """`torch.cuda.device(i)` as a statement of its own (`node`): a context manager built and never
    entered, so the current device stays what it was (MP004)."""


@dataclass(frozen=True, eq=False, kw_only=True)
class SplitBuiltAfterSetDevice(Fact):
    """A class whose __init__ places stages index-lessly, built after set_device."""

    setdev: cst.CSTNode
    plain: Obj  # the instance built with the default current device
    obj: Obj  # the instance built here
    where: tuple[cst.CSTNode, ...]  # its index-less placements


@dataclass(frozen=True, eq=False, kw_only=True)
class SharedModuleMoved(Fact):
    """A move (`node`, to `devs`) of a module object that another stage holds too, which `first`
    had placed on `first_devs`: both stages end where the last move put it (shared.py)."""

    name: str  # the class the shared object was built as
    count: int  # how many objects of that class, placed by `first`, this move takes along
    devs: Devs
    first: cst.CSTNode
    first_devs: Devs
    # This move holds everything `first` placed (a part placed before its whole): it undoes that placement.
    undoes: bool = False


@dataclass(frozen=True, eq=False, kw_only=True)
class HostMadeMove(Fact):
    """`torch.randn(shape).to(dev)` in code that runs every step (a forward, a loop): a tensor made on the
    host from a shape alone (`factory`, the call) and moved at once (`node`) to the GPU `devs`. `shaped_after`:
    the tensor its arguments take a size of (`x` in `torch.zeros(x.size(0), 3)`), None through a name (`n`)."""

    factory: cst.Call
    devs: Devs
    shaped_after: cst.BaseExpression | None = None
    # Where `shaped_after` is, when it is a name or an attribute the model knows (`mask`, made on the host
    # from `torch.rand(n) < eps`, is no place to make the moved tensor: `device=mask.device` would say cpu).
    shaped_devs: Devs | None = None
    # The moved value was computed on the host from the factory's tensor (`torch.argsort(noise)[:, :n]`), not
    # only named (`h0 = torch.zeros(...)`, then `h0.to(dev)`).
    derived: bool = False
    # `factory` is a call of a helper of the file (`make_anchors(h, w)`) that takes this device parameter,
    # left at None: its factories made the value on the host.
    helper_device: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class ElementSync(Fact):
    """A GPU tensor's elements read on the host one at a time (devices/element_reads.py): Python's `max()`,
    `min()` or `sorted()` over it (`how`: "max"), a loop over it whose body reads its element
    (`how`: "item", "int", "float", "bool", "tolist", "equal"; `node` is that read: a call, or the
    expression an `if` tests), or `torch.tensor(items)` of GPU
    tensors (`how`: "tensor"). `iterated`: the tensor's (or the items') expression."""

    how: str
    devs: Devs
    iterated: cst.BaseExpression
    loop: cst.CSTNode | None = None  # the `for` or the comprehension, for a read in a loop
    # In a loop: what is read is computed from the element (`if row.argmax() == y[i]:`), not the element itself.
    derived: bool = False
    # The loop walks a model's parameters (`for p in model.parameters():`), not a tensor's elements: `iterated` is
    # the model's expression, and each pass reads a value computed from one parameter (element_reads.py).
    per_parameter: bool = False


@dataclass(frozen=True, eq=False, kw_only=True)
class LazyMove(Fact):
    """A lazy iterable whose items would move modules or tensors, made as a statement and dropped
    (`map(lambda m, d: m.to(d), stages, devices)`): it never runs, so nothing moves."""

    how: str  # "`map()`", "`filter()`", "a generator expression"


@dataclass(frozen=True, eq=False, kw_only=True)
class ShortZip(Fact):
    """`zip(modules, devices)` (`node`) whose modules outnumber its devices: zip stops at the shorter, so the
    modules past the last device are never paired with one (MP017, where a loop places what it pairs). Or one
    module, a container of `parts` modules, zipped with two devices or more: all of it goes to the first one."""

    modules: int  # how many modules the zip was given
    devices: int  # how many devices: the pairs it makes
    modules_at: int = 0  # the position of the modules among zip's arguments
    parts: int = 0  # for one module zipped with several devices: how many parts it holds


@dataclass(frozen=True, eq=False, kw_only=True)
class SharedCacheWrite(Fact):
    """`holder[key] = t` (`node`, the target) with `holder` shared by every caller (a mutable default, a class
    attribute, a module-level dict), `t` on `device` and a key that names no device (devices/shared_caches.py):
    one per device the line ran for; seen with two, a module on one GPU reads the copy made for another (MP017)."""

    holder: str  # its text (`cache`, `self._masks`)
    kind: str  # how it is shared, in words ("a mutable default argument")
    device: str
    key: str | None  # the key's value when it is a constant (two writes under different constants never meet)
    device_text: str | None = None  # the code that gave the tensor its device (`x.device`), for the fix
    key_at: cst.BaseExpression | None = None  # where the key is made (the finding's place: the fix goes there)


@dataclass(frozen=True, eq=False, kw_only=True)
class DroppedTensorMove(Fact):
    """A move of a module's tensor, in a loop over its parameters or buffers, made as a statement of its own
    (`for p in m.parameters(): p.data.to(d)`): a tensor's `.to()` returns a copy, which is dropped, so the
    tensor stays where it was (devices/data_moves.dropped_moves)."""

    loop_var: str  # the loop's name for each tensor (`p`)


@dataclass(frozen=True, eq=False, kw_only=True)
class BuffersLeftBehind(Fact):
    """A loop (`node`, the `p.data = p.data.to(d)` move) that moved the parameters of `module`, which
    holds buffers (a BatchNorm's running statistics), to `devs`, and not its buffers, which stay on
    `left` (devices/data_moves.py)."""

    module: Obj
    owner: cst.BaseExpression  # how the loop names it (`model` of `model.parameters()`)
    devs: Devs
    left: Devs


@dataclass(frozen=True, eq=False, kw_only=True)
class StatisticsReplaced(Fact):
    """`bn.running_mean = value` (`node`, the target): a BatchNorm `module` on a GPU given running statistics on
    another device (`value`, a fresh `torch.zeros(n)` on the CPU)."""

    module: Obj
    value: Obj


@dataclass(frozen=True, eq=False, kw_only=True)
class ModuleMovedInForward(Fact):
    """A module of the instance (`owner`, `self.cond`) moved to `devs` by `node` while a forward runs (or a
    method it calls): recorded once per target device, so that one line moving it to two devices in turn
    (called for each stage) shows as two facts at one node."""

    devs: Devs
    owner: cst.BaseExpression


@dataclass(frozen=True, eq=False, kw_only=True)
class DeviceListIgnoresIndex(Fact):
    """`[torch.device("cuda", rank) for i in range(stages)]`, or `devs.append(...)` of it in a `for` loop: a list of
    devices made by a loop (`loop`, the comprehension or the `for`) whose item (`node`) never reads the loop's name
    `name`, so every item is the same device (device_loops.py)."""

    name: str
    loop: cst.CSTNode


@dataclass(frozen=True, eq=False, kw_only=True)
class DevicePickIgnoresIndex(Fact):
    """`devices[i // n_layers]` in a loop over `i` (`loop`, a comprehension or a `for`): the item (`node`) picks from a
    list of distinct devices (`among`) by a formula of the loop's name `name`, but the formula gave the same one,
    `picked`, on every pass (device_loops.PickWatch)."""

    name: str
    loop: cst.CSTNode
    picked: str
    among: tuple[str, ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class LateBoundHookDevice(Fact):
    """A hook made in a loop (`node`, a lambda or a function defined in the loop's body) and registered there
    reads the loop's name `name` as a device (`a.to(dev)`): Python reads the name when the hook runs, after the
    loop, so every hook the loop registered uses the device of its last pass (device_loops.py)."""

    name: str
    loop: cst.For
    registrar: str  # register_forward_pre_hook, register_forward_hook, ...


@dataclass(frozen=True, eq=False, kw_only=True)
class UnusedLoopDevice(Fact):
    """A loop (`node`) over `devices` in an __init__ that never reads its target `name`: the `count`
    modules it built (of the classes `built`) all ended on `landed` (device_loops.py)."""

    name: str
    devices: tuple[str, ...]
    landed: str
    count: int
    built: tuple[str, ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class LayerInPlainListOnHost(Fact):
    """A module held in a plain list (or tuple) by a model whose other parts are on a GPU (`gpu`), never placed,
    called on the CPU (`node`, the call; `module`, its value: where it was built is `made_by`): no `.to()` of the
    model reaches it (calls.py)."""

    module: Obj
    gpu: str
    # where the model's class holds the list (`self.blocks = [...]`, the assigned value), when found
    holder: cst.BaseExpression | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class PartReplacedOnHost(Fact):
    """`owner.attr = <a new module built without a device>` (`node`, the target) after the split owner was placed,
    where the part it replaces was on the GPU `old`: the new part stays on the CPU (statements.py)."""

    attr: str
    old: str
    value: cst.BaseExpression | None = None  # the new module's expression


@dataclass(frozen=True, eq=False, kw_only=True)
class MapLookup(Fact):
    """A lookup (`node`: `device_map.get(name, default)`, `device_map[name]`, `name in device_map`) in a dict built
    by the literal `literal`, with the constant key `key` (None: a key not known, or the dict read whole by
    `.items()`, `.keys()` or `.values()`); `found` whether it is one of the dict's keys, and for a `.get()` that
    missed, where it sent the part instead (`default`; None for a test `in`, whose fallback is the code's).
    map_lookups.py."""

    literal: cst.Dict
    key: str | None
    found: bool
    default: str | None = None  # the device the `.get()` gave instead ("" for None; None where not known)
    # The dict's string keys whose value is one known device, with that device.
    devices: tuple[tuple[str, str], ...] = ()


F = TypeVar("F", bound=Fact)


class Recorder:
    """The facts of one interpretation, in the order they were seen."""

    def __init__(self) -> None:
        self.facts: list[Fact] = []
        # Lineage steps are kept apart and never muted: a lineage opened in a run
        # that counts may take a step in a probe run, and that step is part of it.
        self.crossings: list[Crossing] = []
        self._seen: set[tuple[type, int, Any]] = set()
        self._muted = 0
        # The helper calls being run, innermost last: facts recorded while a helper called at a site
        # runs name that site (Fact.via); None for a call whose facts name none (a forward, an
        # __init__). Calls.call_function and Instances.instantiate push and pop.
        self.sites: list[cst.CSTNode | CallSite | None] = []
        # (id(node), site) -> every device set an operand there had to be on, over all
        # visits that count (loop iterations, paths, calls): a fix may move it to one
        # fixed device only when that set has one member (DeviceModel.one_target).
        self.needs: dict[tuple[int, Any], set[Devs]] = {}

    @property
    def live(self) -> bool:
        """Whether facts recorded now count (no probe or summary run is under way)."""
        return not self._muted

    def record(self, fact: Fact, key: Any = None) -> None:
        """Keeps `fact` unless one of its type was already kept at its node with this key."""
        k = (type(fact), id(fact.node), key)
        if k in self._seen:
            return
        self._seen.add(k)
        if self.sites and self.sites[-1] is not None and fact.via is None:
            fact = replace(fact, via=self.sites[-1])
        self.facts.append(fact)

    def need(self, node: cst.CSTNode, site: Any, devs: Devs) -> None:
        """An operand at `node` (`site` as in its Mismatch) must be on `devs` on this visit;
        also on visits that find no mismatch or skip the check."""
        if self.live:
            self.needs.setdefault((id(node), site), set()).add(devs)

    def cross(self, step: Crossing) -> None:
        self.crossings.append(step)

    @contextmanager
    def muted(self) -> Iterator[None]:
        """A run whose facts are dropped, and whose dedup keys do not hide later facts."""
        saved_facts, saved_seen = self.facts, self._seen
        self.facts, self._seen = [], set()
        self._muted += 1
        try:
            yield
        finally:
            self._muted -= 1
            self.facts, self._seen = saved_facts, saved_seen
