"""Per-layer ping-pong (MP006): within one forward pass, follow the chain of device-to-device
transfers and find the chains whose devices alternate (cuda:0 -> cuda:1 -> cuda:0 -> cuda:1),
crossing more often than once per stage boundary.

Only transfers are seen (nothing here runs on other ops). A transfer src -> dst continues the
open chain that last arrived on `src`, unless its data is that arrival unchanged (no work on
`src`: a round trip, MP005's business). A forward pass is the outermost module call (the hooks
count them per thread), or, for transfers made outside any module (a loop over layers in the
training script), the step. A chain is judged when its forward pass is over: at the first
transfer of a later one, at a step's end or at the session's end.

A departure continues a chain only if its data may have been computed from the chain's last arrival.
Where autograd recorded both (grad enabled), that is asked of the graph: the nodes made since the
arrival, walked back from the departure (`_may_depend`). A MoE layer that sends each expert its rows
of one input and gathers the results back, or any fan-out/fan-in, sends data that no result that came
back went into: a star, not a ping-pong. Without a graph (no_grad, inference, or an arrival that needs no gradient,
which no graph holds), a departure may continue
a chain only if an op read the chain's last arrival where it arrived (the checker marks the arrival's
_StorageRef `read`): data nothing has read cannot have gone into what leaves. A pipeline that splits
a batch into micro-batches sends chunk 2 from cuda:0 while chunk 1, back on cuda:0 from cuda:1, waits
unread for the final concatenation: two chains, not one activation crossing at every layer. A
departure that cannot be matched to a read arrival starts a chain of its own (unknown: silent).

With a graph, how the departure was computed from the arrival also decides (_path_kind). Data computed by
a layer's work from an activation born on the device since the arrival (a decoder's state from its own
embeddings, over data that crossed nothing in the pass) is that new activation, which only read the arrival
(cross-attention): it starts a chain of its own. Data only joined, split or scaled since it arrived is
passed on: when a layer there also computed from that arrival (Chain.used), the arrival was needed on both
devices (the encoder output of an encoder and a decoder each split over the GPUs): a fan-out, not a crossing
of the chain; when that is learnt only after the copy left (the encoder output sent before the decoder's
state), the crossing is taken back (Chain.undo). Passed-on data that no layer there needed continues the
chain (each expert fed the previous expert's gathered result).

An excursion out and straight back (D -> E -> D) is dropped from its chain when it was a branch: the
data that left D stayed there and meets what came back (experts on another GPU whose outputs are
summed where the tokens are; the next layer's input mixes both). Asked of the graph at the next
departure from D: does that data depend on what left (or on what it was computed from there, a few nodes back: x for x[rows], hi for HRNet's `bn(conv(hi))` sent to the other branch while hi goes on),
by a path that does not go through what came back? When what left has no autograd node (an input that needs
no gradient), the excursion counts, unless what left was indices (integer or bool data, which no layer's
activation is: the ids of a row-sharded embedding sent to the shard that holds their rows) and the data
leaving D again also comes from work done on D before the result came back, not through it (the other
shard's rows, looked up where the ids stayed): the lookup on E was a branch beside that work. Without a graph (no_grad), the excursion is dropped when something on D
stayed to meet the result (Chain.stayed): the data that left D was still alive when the result came back,
or the code that brings it back still holds a tensor on D in its local variables (the tokens of an expert
stack, `y[rows] = expert(h[rows].to(e)).to(h.device)`). Layers fed only by the previous result
(`x = layer(x.to(dev))`) hold nothing else on D: what left is gone before the result comes back.

Holds no tensor: the last arrival of a chain is a weak _StorageRef, and its autograd node is kept by
sequence number and type only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mpcheck.runtime.checks.wording import plural

_NOT_GPU = frozenset({"cpu", "meta"})
_MAX_CHAINS = 16  # open chains per forward pass (independent tensors moved side by side)
_MAX_DEVS = 64  # devices remembered per chain; crossings are counted beyond
_MAX_NODES = 4096  # autograd nodes walked per dependency question; past it, assume it depends


class Chain:
    __slots__ = (
        "devs",
        "end",
        "crossings",
        "back_site",
        "back_at",
        "first_site",
        "modules",
        "last",
        "sent",
        "last_node",
        "steps",
        "last_sent",
        "stayed",
        "used",
        "undo",
        "calls_at",
        "layered",
    )

    def __init__(self, src: str, site: Any) -> None:
        self.devs = [src]
        self.end = src  # where the data is now
        self.crossings = 0
        self.first_site = site
        self.back_site: Any = None  # the first transfer back to a device the chain already left
        self.back_at = 0  # the crossing count when back_site was set
        self.modules: list[str] = []
        self.last: Any = None  # _StorageRef of the latest arrival
        self.sent: list[Any] = []  # _StorageRefs of the data that left a device along the chain
        self.last_node: tuple[int, str] | None = None  # (sequence number, type) of the arrival's autograd node
        # For the last two crossings, the node keys of the data that left and of what it was taken
        # from on its device (`x[rows]`: x's node), for drop_branch.
        # (And whether that data was integer or bool: ids, which carry no node to look for.)
        self.steps: list[tuple[frozenset[tuple[int, str]], bool]] = []
        self.last_sent: Any = None  # _StorageRef of the data the latest crossing took away
        # Without a graph: when the chain came straight back to a device (an excursion out and back), did
        # data stay there to meet the result (what left, still alive, or a tensor the code still holds)?
        self.stayed = False
        # A layer on `end` computed from the last arrival (asked of the graph, for chains that crossed
        # twice or more): the arrival was needed there, so passing it on unchanged is a fan-out.
        self.used = False
        # The chain as it was before its latest crossing, when that crossing only passed on what had
        # arrived and no layer had yet been seen to need it there (Chain.snapshot): a later departure
        # from that device computed from the same arrival shows it was needed there after all.
        self.undo: tuple[Any, ...] | None = None
        # The module-call count when the data last arrived (ThreadState.module_calls), and how many of the
        # chain's visits after a crossing ran a layer (a module) before the data left again: per-layer
        # ping-pong crosses between layers. Per-row statistics or messages two shards exchange between torch
        # ops on their own parameters (a vocabulary-parallel loss, a two-tower graph model) cross with no layer.
        self.calls_at: int | None = None
        self.layered = 0

    def add(
        self,
        dst: str,
        site: Any,
        module: str | None,
        last: Any,
        departure: Any = None,
        last_node: tuple[int, str] | None = None,
        sent_keys: frozenset[tuple[int, str]] = frozenset(),
        held: Callable[[str], bool] | None = None,
        indices: bool = False,
    ) -> None:
        self.undo = None
        if departure is not None and len(self.sent) < _MAX_DEVS:
            self.sent.append(departure)
        back = len(self.devs) >= 2 and self.devs[-2] == dst
        self.stayed = back and (
            (self.last_sent is not None and self.last_sent.alive()) or (held is not None and held(dst))
        )
        self.last_sent = departure
        if self.back_site is None and dst in self.devs:
            self.back_site, self.back_at = site, self.crossings + 1
        self.steps = [*self.steps[-1:], (sent_keys, indices)]
        self.crossings += 1
        self.end = dst
        if len(self.devs) < _MAX_DEVS:
            self.devs.append(dst)
        if module and module not in self.modules and len(self.modules) < 8:
            self.modules.append(module)
        self.last = last
        self.last_node = last_node
        self.used = False

    def snapshot(self) -> tuple[Any, ...]:
        return (
            list(self.devs),
            self.end,
            self.crossings,
            self.back_site,
            self.back_at,
            list(self.modules),
            self.last,
            len(self.sent),
            self.last_node,
            list(self.steps),
            self.last_sent,
            self.stayed,
        )

    def restore(self, snap: tuple[Any, ...]) -> None:
        """Back to a snapshot: the crossing since was a copy of data the device kept using, not the chain."""
        (self.devs, self.end, self.crossings, self.back_site, self.back_at, self.modules, self.last, sent) = snap[:8]
        (self.last_node, self.steps, self.last_sent, self.stayed) = snap[8:]
        del self.sent[sent:]
        self.undo = None

    def drop_branch(self, departure_node: Any) -> None:
        """Before leaving `end` again: forget the last excursion out and back to it if it was a branch."""
        if len(self.steps) < 2 or len(self.devs) < 3 or self.devs[-3] != self.end or self.crossings < 2:
            return
        if len(self.devs) >= _MAX_DEVS:
            return  # the devices past the cap are not remembered: leave the count alone
        left, indices_left = self.steps[0]
        if departure_node is None:  # grad disabled: no graph to ask
            if not self.stayed:
                return  # what left was gone when the result came back: the chain went on, the excursion counts
        elif departure_node is LEAF or self.last_node is None:
            return  # what leaves or what came back has no node to ask: the excursion counts
        elif not left:
            if not (indices_left and _meets_earlier_work(departure_node, self.last_node)):
                return  # what left had no node to look for: the excursion counts
        elif not _reaches(departure_node, left, avoid=self.last_node):
            return
        del self.devs[-2:]
        self.crossings -= 2
        self.steps = []
        if self.back_site is not None and self.back_at > self.crossings:
            self.back_site = None

    @property
    def distinct(self) -> list[str]:
        return list(dict.fromkeys(self.devs))

    def left_after(self, calls: int | None) -> None:
        """The data leaves the chain's last device now, `calls` module calls into the run: did a layer run there?"""
        if calls is not None and self.calls_at is not None and calls != self.calls_at:
            self.layered += 1
        self.calls_at = calls

    def is_ping_pong(self) -> bool:
        # A -> B -> A is two stages with a way back (e.g. to the labels); A -> B -> A -> B is
        # ping-pong: more crossings than the devices visited need (the linter's MP006 rule too), with
        # layers run on at least two of the visits in between.
        return (
            self.back_site is not None
            and self.crossings >= 3
            and self.crossings > len(self.distinct)
            and self.layered >= 2
        )


class PingPong:
    """The open chains of the current forward pass, one table for transfers made inside a
    module call and one for those made outside any (their pass is the step)."""

    def __init__(self) -> None:
        self._scopes: dict[tuple[str, int], tuple[Any, list[Chain]]] = {}
        # Per scope, the autograd node keys of this pass's arrivals (any chain's): data that crossed.
        self._arrived: dict[tuple[str, int], set[tuple[int, str]]] = {}

    def on_transfer(
        self,
        src_tensor: Any,
        src: str,
        dst: str,
        scope: tuple[str, int],
        key: Any,
        site: Any,
        module: str | None,
        arrival: Any,
        departure: Any = None,
        nodes: tuple[Any, Any] = (None, None),
        held: Callable[[str], bool] | None = None,
        calls: int | None = None,
        born: int | None = None,
    ) -> list[Chain]:
        """Follow one forward transfer; returns the ping-pong chains of a pass that just ended.
        nodes: the autograd nodes (grad_fn) of the data sent and of its copy that arrived, or None.
        held: without a graph, does the code making this transfer still hold other data on a device
        (asked only when the chain comes straight back to it: Chain.stayed). calls: the module calls run so far
        (Chain.left_after). born: the transfer count at which the data sent arrived where it is, unchanged since
        (StorageRef.moved_at), or None."""
        if src in _NOT_GPU or dst in _NOT_GPU or _one_number(src_tensor):
            return []  # (a 0-dim tensor is no activation: a norm or a scale sent to each GPU by an optimizer)
        done: list[Chain] = []
        entry = self._scopes.get(scope)
        if entry is None or entry[0] != key:
            if entry is not None:
                done = [c for c in entry[1] if c.is_ping_pong()]
            entry = (key, [])
            self._scopes[scope] = entry
            self._arrived[scope] = set()
        chains = entry[1]
        arrived = self._arrived.setdefault(scope, set())
        chain = None
        # The same data sent again (one input fanned out to experts or branches on other devices,
        # each result gathered back) is a new branch, not the chain going on from its last arrival.
        resent = any(r.same_data(src_tensor) for c in chains for r in c.sent)
        _undo_passed(chains, src, nodes[0], arrived)
        _mark_used(chains, src, nodes[0], arrived)
        undo = None
        for i in range(len(chains) - 1, -1, -1):
            if resent:
                break
            c = chains[i]
            if c.end == src:
                if c.last is not None and c.last.same_data(src_tensor):
                    break  # no work on `src` since it arrived: a round trip, not a layer
                if born is not None and c.last is not None and born < c.last.moved_at[0]:
                    # Sent as it arrived, before this chain's last arrival (a batch copied in at the step's start,
                    # sent to a critic on each GPU after another evaluation came back): not computed from it.
                    continue
                if not _may_depend(nodes[0], c.last_node):
                    continue  # computed without what this chain brought: another branch of a fan-out
                no_graph = nodes[0] is None or c.last_node is None
                if no_graph and not (c.last is not None and c.last.read):
                    # No graph to ask (none kept, or what arrived needs no gradient, so no graph holds it), and
                    # nothing read what arrived: not computed from it (a micro-batch; a batch copied to the other
                    # GPU beside another for later use, `a.to(d1), b.to(d0)`, while the next departure comes
                    # from other work).
                    continue
                kind = _path_kind(nodes[0], c.last_node, arrived)
                if kind == "born":
                    break  # another activation, born here, that read what arrived (a decoder's cross-attention)
                if kind == "passed" and c.used:
                    break  # what arrived, needed by a layer here and passed on unchanged by one: a fan-out
                if kind == "passed" and c.crossings >= 2:
                    undo = c.snapshot()  # a fan-out if a layer here turns out to need what arrived
                chain = chains.pop(i)
                chain.drop_branch(nodes[0])
                break
        if chain is None:
            chain = Chain(src, site)
            if len(chains) >= _MAX_CHAINS:
                done.extend(c for c in chains[:1] if c.is_ping_pong())
                del chains[:1]
        arrival_key = _node_key(nodes[1])
        if arrival_key is not None and len(arrived) < _MAX_NODES:
            arrived.add(arrival_key)
        chain.left_after(calls)
        chain.add(dst, site, module, arrival, departure, arrival_key, sent_keys(nodes[0]), held, _indices(src_tensor))
        chain.undo = undo
        chains.append(chain)  # most recently extended last
        return done

    def close(self) -> list[Chain]:
        """The pass is over (step end, session end): its ping-pong chains."""
        done = [c for _, chains in self._scopes.values() for c in chains if c.is_ping_pong()]
        self._scopes.clear()
        self._arrived.clear()
        return done


def _one_number(tensor: Any) -> bool:
    try:
        return tensor is not None and tensor.dim() == 0
    except Exception:  # not a tensor as torch's (a wrapper without dim()): judged as before
        return False


def _indices(tensor: Any) -> bool:
    """Integer or bool data (ids, positions, masks): no layer's activation, and it carries no gradient."""
    try:
        return not (tensor.is_floating_point() or tensor.is_complex())
    except (AttributeError, RuntimeError):
        return False


def _meets_earlier_work(start: Any, avoid: tuple[int, str]) -> bool:
    """Does the data whose node is `start` also come, by a path that does not go through `avoid` (what came
    back), from work done before `avoid` was made: a node older than it that is a layer's work (_LAYER_OP) or
    computed from other data (not only a parameter's view, `weight.t()`)? Unknown: False (nothing dropped)."""

    def earlier_work(node: Any, key: tuple[int, str]) -> bool:
        if key[0] >= avoid[0] or type(node).__name__ == "AccumulateGrad":
            return False
        inputs = [fn for fn, _ in node.next_functions if fn is not None]
        return bool(_LAYER_OP.search(type(node).__name__)) or any(
            type(fn).__name__ != "AccumulateGrad" for fn in inputs
        )

    return _search(start, earlier_work, avoid, unknown=False)


def _node_key(node: Any) -> tuple[int, str] | None:
    """(sequence number, type name) of an autograd node, or None. Not id(): the Python object of a
    node is made when asked for and freed with the last reference, so a later one may have another id."""
    if node is None:
        return None
    try:
        return node._sequence_nr(), type(node).__name__
    except (AttributeError, RuntimeError):
        return None


# The node of data sent while grad is enabled that autograd did not record (an input, a parameter, data
# indexed out of one): computed from no recorded result, so from no arrival that autograd recorded.
LEAF = object()


def _reaches(start: Any, targets: frozenset[tuple[int, str]], avoid: tuple[int, str]) -> bool:
    """Is one of the nodes `targets` among the inputs of `start`, by a path that does not go through
    `avoid`? Unknown (a node without a key, too many nodes): False, so nothing is dropped on a guess."""
    return _search(start, lambda node, key: key in targets, avoid, unknown=False, since=min(t[0] for t in targets))


# How far back from the data sent its own computation is followed (Chain.drop_branch): HRNet sends `bn(conv(hi))`
# across and keeps `hi` going where it is, three nodes back.
SENT_DEPTH = 3


def sent_keys(node: Any) -> frozenset[tuple[int, str]]:
    """The keys of the autograd node of data sent and of the nodes it was computed from, up to SENT_DEPTH steps
    back (`x[rows]` is taken from x; `relu(conv(hi))` from hi), leaving out parameters (AccumulateGrad: a weight
    every call shares)."""
    key = _node_key(node) if node is not None and node is not LEAF else None
    if key is None:
        return frozenset()
    keys = {key}
    level = [node]
    for _ in range(SENT_DEPTH):
        below = []
        for n in level:
            try:
                for fn, _ in n.next_functions:
                    k = _node_key(fn) if fn is not None and type(fn).__name__ != "AccumulateGrad" else None
                    if k is not None and k not in keys:
                        keys.add(k)
                        below.append(fn)
            except (AttributeError, RuntimeError):
                pass
        level = below
    return frozenset(keys)


# Autograd nodes of work a layer does (besides any op that takes a parameter): a matrix product, a
# convolution, an embedding lookup, a normalisation. Named so that frozen weights (no AccumulateGrad) count.
_LAYER_OP = re.compile(
    r"^(?:Mm|Addmm|Bmm|Baddbmm|Addmv|Mv|Linear|Convolution|Embedding(?:Bag)?|Native(?:Layer|Batch|Group)Norm"
    r"|\w*(?:Attention|Rnn|Lstm|Gru)\w*)Backward"
)


def _undo_passed(chains: list[Chain], src: str, departure: Any, arrived: set[tuple[int, str]]) -> None:
    """A chain whose latest crossing only passed on what had arrived on `src` (Chain.undo), and data now
    leaving `src` that a layer there computed from that same arrival: the arrival was needed on `src`, so
    that crossing was a copy sent to both devices (the encoder output sent on before the decoder's state
    that read it: `m, x = m.to(dev), x.to(dev)`), not the chain going on. Take it back."""
    if departure is None or departure is LEAF:
        return
    for c in chains:
        snap = c.undo
        if snap is not None and snap[1] == src and _path_kind(departure, snap[8], arrived) in ("layer", "born"):
            c.restore(snap)
            c.used = True


def _mark_used(chains: list[Chain], src: str, departure: Any, arrived: set[tuple[int, str]]) -> None:
    """Data leaves `src` computed by a layer there from a chain's last arrival: that arrival was needed on
    `src` (Chain.used). Asked only of chains that crossed twice or more, the ones a third crossing could
    make a ping-pong."""
    if departure is None or departure is LEAF:
        return
    for c in chains:
        if c.end == src and not c.used and c.crossings >= 2:
            c.used = _path_kind(departure, c.last_node, arrived) in ("layer", "born")


def _path_kind(departure: Any, arrival: tuple[int, str] | None, arrived: set[tuple[int, str]]) -> str | None:
    """How the data whose autograd node is `departure` was computed from the arrival whose node key is
    `arrival` (walking back through the nodes made since it):
    - "born": it also comes from another activation born on this device since, by a layer's work
      (_LAYER_OP) over data that crossed no device (none of `arrived`, the pass's arrivals): a decoder's state, made from its own embeddings, that read the
      encoder output which arrived (cross-attention). That activation is the one going on, not the chain;
    - "layer": a path back to the arrival passes through a layer's node (a layer here computed it);
    - "passed": every path is only joined, split, reshaped or scaled (the encoder output that came back,
      `torch.cat` of its chunks, split again for the decoder's layers on the other GPU);
    - None: not computed from it, or unknown (no graph, a node without a key, too many nodes)."""
    if departure is None or departure is LEAF or arrival is None:
        return None
    since = arrival[0]
    # Iterative post-order (autograd's graph has no cycles: a node's inputs are done before it is):
    # reach[k], the arrival is among its inputs, directly or not; layered[k], some such path passes a
    # layer's node; crossed[k], some arrival of the pass is among its inputs, or data older than the
    # arrival (not walked: it may have crossed).
    reach: dict[tuple[int, str], bool] = {}
    layered: dict[tuple[int, str], bool] = {}
    crossed: dict[tuple[int, str], bool] = {}
    born = False
    stack: list[tuple[Any, bool]] = [(departure, False)]
    while stack:
        node, expanded = stack.pop()
        key = _node_key(node)
        if key is None or len(reach) > _MAX_NODES:
            return None
        if key == arrival:
            reach[key], layered[key], crossed[key] = True, False, True
            continue
        if key in reach and not expanded:
            continue
        try:
            inputs = [fn for fn, _ in node.next_functions if fn is not None]
            params = any(type(fn).__name__ == "AccumulateGrad" for fn in inputs)
            data = [fn for fn in inputs if type(fn).__name__ != "AccumulateGrad"]
            kids = [fn for fn in data if fn._sequence_nr() >= since]
            older = len(kids) < len(data)  # reads data made before the arrival: whether that crossed is not known
        except (AttributeError, RuntimeError):
            return None
        if not expanded:
            reach[key] = False  # seen; set for good once its inputs are done
            stack.append((node, True))
            stack.extend((fn, False) for fn in kids)
            continue
        keys = [_node_key(fn) for fn in kids]
        done = [k for k in keys if k is not None]
        if len(done) != len(keys):
            return None
        layer_op = bool(_LAYER_OP.search(type(node).__name__))
        reach[key] = any(reach.get(k, False) for k in done)
        layered[key] = reach[key] and (params or layer_op or any(layered.get(k, False) for k in done))
        crossed[key] = key in arrived or older or any(crossed.get(k, False) for k in done)
        # A layer's work on data that crossed nothing (an embedding lookup, a projection of an input);
        # not a parameter's own view (`weight.t()`), which takes a parameter but does no layer's work.
        born = born or (layer_op and not crossed[key])
    dep = _node_key(departure)
    if dep is None or not reach.get(dep, False):
        return None
    if born:
        return "born"
    return "layer" if layered.get(dep, False) else "passed"


def _may_depend(departure: Any, arrival: tuple[int, str] | None) -> bool:
    """May the data whose autograd node is `departure` have been computed from the arrival whose node is
    `arrival`? Unknown (no node, too many nodes): True."""
    if arrival is None:
        return True
    if departure is LEAF:
        return False
    if departure is None:
        return True
    return _search(departure, lambda node, key: key == arrival, None, unknown=True, since=arrival[0])


def _search(
    start: Any,
    found: Callable[[Any, tuple[int, str]], bool],
    avoid: tuple[int, str] | None,
    unknown: bool,
    since: int = -1,
) -> bool:
    """Walks back from `start` through the nodes made since `since` (a node's inputs are older than it: a
    lower sequence number), not through `avoid`, looking for a node that is `found`. Where the graph
    cannot be read (a node without a key, more than _MAX_NODES nodes): `unknown`."""
    stack: list[Any] = [start]
    seen: set[tuple[int, str]] = set()
    while stack:
        node = stack.pop()
        key = _node_key(node)
        if key is None or len(seen) > _MAX_NODES:
            return unknown
        try:
            if found(node, key):
                return True
            if key == avoid or key in seen:
                continue
            seen.add(key)
            inputs = node.next_functions
        except (AttributeError, RuntimeError):
            return unknown
        for fn, _ in inputs:
            if fn is None:
                continue
            try:
                if fn._sequence_nr() < since:
                    continue  # made before `since`: its history cannot hold what is looked for
            except (AttributeError, RuntimeError):
                return unknown
            stack.append(fn)
    return False


Layers = tuple[str, list[tuple[str, str]]]  # (container path, [(child name, device)])


def describe(
    chain: Chain,
    find_layers: Callable[[Chain], Layers | None],
    find_grouped: Callable[[Chain], tuple[Layers, list[str]] | None] = lambda chain: None,
) -> tuple[str, tuple[str, ...], str]:
    """(message, modules, suggestion) for a ping-pong chain. find_layers gives the
    alternating layers by name when the module tree is known: (container path, [(child, device)]).
    find_grouped, asked when no layers alternate: layers already grouped one block per device, and
    the modules beside them on the chain's first device (a module shared by all stages)."""
    distinct = chain.distinct
    shown = " -> ".join(chain.devs[:8]) + (" -> ..." if chain.crossings + 1 > 8 else "")
    layers = find_layers(chain)
    grouped = find_grouped(chain) if layers is None else None
    if grouped is not None:
        return _shared_module(chain, shown, *grouped)
    if layers is not None:
        container, children = layers
        names = [n for n, _ in children]
        devs = list(dict.fromkeys(d for _, d in children))
        what = f"the layers of {container} alternate between {', '.join(devs)}"
        grouping = _grouping(container, names, devs)
        modules: tuple[str, ...] = (container,)
    else:
        n = chain.crossings + 1
        what = f"the {n} stretches of work between these transfers alternate between {', '.join(distinct)}"
        grouping = _grouping("stretches", [str(i) for i in range(1, n + 1)], distinct)
        modules = tuple(chain.modules)
    message = (
        f"transfer per layer: the activation crosses devices {plural(chain.crossings, 'time')} per forward "
        f"({shown}) where {plural(len(distinct) - 1, 'crossing')} would do: {what}"
    )
    suggestion = (
        f"place consecutive layers on one device, one block per device ({grouping}), so that "
        f"each stage boundary is crossed once"
    )
    return message, modules, suggestion


def find_shared(
    chain: Chain, roots: list[tuple[str, Any]], device_of: Callable[[Any], str]
) -> tuple[Layers, list[str]] | None:
    """A list of layers (a module's children, at least four) grouped one block per device over the
    chain's devices, starting on the chain's first device, whose layers off that device explain the
    chain's crossings (two each: there and back), and the modules on the first device they share:
    one held by several layers (`block.norm = shared_norm`), or else a weighted sibling of the list
    (called by the parent's forward between the layers). (the list, [paths of those modules]).
    A layer's device leaves out the modules it shares with other layers. Asked once per finding."""
    home, wanted = chain.devs[0], set(chain.devs)
    for root_path, root in roots:
        for sub_name, sub in root.named_modules():
            prefix = f"{root_path}.{sub_name}" if sub_name else root_path
            for name, box in sub.named_children():
                kids = list(box.named_children())
                if len(kids) < 4:
                    continue
                shared = _shared_by(kids)
                devs = [_device_without(c, shared, device_of) for _, c in kids]
                if any(d is None or d not in wanted for d in devs):
                    continue
                changes = sum(1 for a, b in zip(devs, devs[1:]) if a != b)
                distinct = set(devs)
                if len(distinct) < 2 or changes != len(distinct) - 1 or devs[0] != home:
                    continue
                away = sum(1 for d in devs if d != home)
                if chain.crossings < 2 * away - 1:
                    continue
                held = [
                    f"{prefix}.{name}.{path}"
                    for path, m in box.named_modules()
                    if id(m) in shared and _device_without(m, {}, device_of) == home
                ]
                beside = held or [
                    f"{prefix}.{n}"
                    for n, c in sub.named_children()
                    if c is not box and _device_without(c, {}, device_of) == home and any(True for _ in c.parameters())
                ]
                layers = [(n, d) for (n, _), d in zip(kids, devs) if d is not None]
                return (f"{prefix}.{name}", layers), beside
    return None


def _shared_by(kids: list[tuple[str, Any]]) -> dict[int, Any]:
    """The modules reachable from more than one of `kids` (by id)."""
    owners: dict[int, int] = {}
    seen: dict[int, Any] = {}
    for i, (_, kid) in enumerate(kids):
        for m in kid.modules():
            if owners.setdefault(id(m), i) != i:
                seen[id(m)] = m
    return seen


def _device_without(module: Any, shared: dict[int, Any], device_of: Callable[[Any], str]) -> str | None:
    """The one device of `module`'s parameters and buffers outside the `shared` modules, or None."""
    devs: set[str] = set()
    for m in module.modules():
        if id(m) in shared:
            continue
        devs.update(device_of(p) for p in m.parameters(recurse=False))
        devs.update(device_of(b) for b in m.buffers(recurse=False))
    return devs.pop() if len(devs) == 1 else None


def _shared_module(chain: Chain, shown: str, layers: Layers, beside: list[str]) -> tuple[str, tuple[str, ...], str]:
    """The layers are grouped one block per device, yet the activation keeps coming back to the first
    device: work there between the other devices' layers, i.e. a module all stages share left on it."""
    home = chain.devs[0]
    container, children = layers
    devs = list(dict.fromkeys(d for _, d in children))
    names = [n for n, _ in children]
    away = sum(1 for _, d in children if d != home)
    what = ", ".join(beside[:3]) if beside else "a module shared by the stages"
    message = (
        f"transfer per layer: the activation crosses devices {plural(chain.crossings, 'time')} per forward "
        f"({shown}) where {plural(len(devs) - 1, 'crossing')} would do: the layers of {container} are grouped "
        f"by device ({_grouping(container, names, devs).removeprefix(container + ' ')}), but between the "
        f"{plural(away, 'layer')} off {home} the activation goes back to {home}: {what} on {home} is shared by "
        f"every stage, so each layer off {home} crosses twice"
    )
    suggestion = (
        "run the shared module on each stage's device: one copy per device (`copy.deepcopy(m).to(dev)`; "
        "weights meant to stay tied then need their gradients summed), or for a module without weights one "
        "instance per stage, so that each stage boundary is crossed once"
    )
    return message, (container, *beside[:3]), suggestion


def _grouping(label: str, names: list[str], devs: list[str]) -> str:
    """'net.layers 0-7 on cuda:0, 8-15 on cuda:1' (or 'net: enc1, adapt1 on cuda:0; enc2, adapt2 on
    cuda:1'): contiguous blocks of (nearly) equal size, the devices in the order the data visits them."""
    n, k = len(names), len(devs)
    parts = []
    start = 0
    numbered = all(b.isdigit() for b in names)
    for i, d in enumerate(devs):
        size = n // k + (1 if i < n % k else 0)
        block = names[start : start + size]
        start += size
        if block:
            span = (block[0] if len(block) == 1 else f"{block[0]}-{block[-1]}") if numbered else ", ".join(block)
            parts.append(f"{span} on {d}")
    return f"{label} " + ", ".join(parts) if numbered else f"{label}: " + "; ".join(parts)
