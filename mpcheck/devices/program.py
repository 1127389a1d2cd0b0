"""What the interpreter walks and carries: the functions and classes of a file,
the state of one path through a function, and the entry point it belongs to."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import libcst as cst

from mpcheck.devices import memo
from mpcheck.devices.events import IndexlessPlacement
from mpcheck.devices.values import CURRENT, UNK, Devs, Obj, SeqV, Val, join
from mpcheck.devices.walk import children

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.devices.interp import Interp

MAX_DEPTH = 6  # calls interpreted inside one another
MAX_RECURSION = 3  # runs of one function inside one another (a recursive helper over nested containers)
MAX_WORLDS = 4  # paths kept apart (eval / train) before they are joined
MAX_UNROLL = 32  # loops over known items longer than this run as loops of unknown length


class Part:
    """One concern of the interpreter (statements, expressions, calls...): it reaches
    the shared state and the other parts through `interp`."""

    def __init__(self, interp: Interp) -> None:
        self.interp = interp


@dataclass(eq=False)
class FuncInfo:
    node: cst.FunctionDef
    name: str
    qual: str
    cls: ClassInfo | None = None
    # A function defined inside another: the names of the enclosing function as the `def` ran (the
    # environment itself, so a name rebound later in it is seen as Python's late binding sees it).
    closure: dict[str, Any] | None = None
    # Its parameters' defaults as the `def` (or lambda) evaluated them when it ran: Python binds them then
    # (`lambda mod, inp, out, lora=lora: ...` made in a loop keeps that pass's `lora`).
    defaults: dict[str, Any] | None = None

    @property
    def is_generator(self) -> bool:
        """Does the body yield (not a function or class defined inside it)? Calling it gives the
        values it yields, in order, not what it returns."""
        got: bool | None = memo.recall(_GENERATORS, self.node)  # (per node: a nested def's FuncInfo is made anew)
        if got is not None:
            return got
        return memo.keep(_GENERATORS, self.node, _yields(self.node))


_GENERATORS = memo.node_table()
_NOT_ITS_OWN = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


def _yields(fn: cst.FunctionDef) -> bool:
    # (walk.children, not a CSTVisitor: a visitor rebuilds each node with libcst's checks on, and
    # some code Python runs fails them: `assert(a if c else b)`, parsed without them.)
    todo: list[cst.CSTNode] = [fn.body]
    while todo:
        node = todo.pop()
        kind = type(node)  # exact types: no ABC instance check per node (walk._IS_NODE)
        if kind is cst.Yield:
            return True
        if kind not in _NOT_ITS_OWN:
            todo.extend(children(node))  # a nested function's yields make it a generator, not this one
    return False


@dataclass(eq=False)
class ClassInfo:
    node: cst.ClassDef
    name: str
    methods: dict[str, FuncInfo]
    bases: list[str]
    local_bases: list[ClassInfo] = field(default_factory=list)
    # the instances built so far, by what their construction depends on (Instances.instantiate)
    instances: dict[tuple[Any, ...], Obj] = field(default_factory=dict)
    # attributes __init__ holds by reference, not as registered children (`object.__setattr__(self,
    # "base", base)`, `self.__dict__["base"] = base`): Module.to() leaves them where they are
    refs: set[str] = field(default_factory=set)
    # plain assignments of the class body (`placement = {"embed": "cuda:0", ...}`), by name: what
    # `self.placement` reads when no method assigned it
    class_attrs: dict[str, cst.BaseExpression] = field(default_factory=dict)
    # the annotated names of the class body, in order: a dataclass's (or NamedTuple's) fields, which
    # its generated __init__ takes in that order (Instances.instantiate)
    fields: list[str] = field(default_factory=list)
    generated_init: bool = False  # decorated (`@dataclass`) or a NamedTuple: an __init__ not written out
    # A part of an instance was moved or replaced onto other devices from outside the class (`model.c.to(d)`,
    # `model.get_submodule(name).to(d)`, `model.head = Head().to(d)`): the instance as its __init__ built it is
    # not the one that runs, so its methods are checked only where an instance is called (Interp.run_all).
    replaced_outside: bool = False

    def __post_init__(self) -> None:
        memo.made(self)  # its methods point back at it: a cycle over the file's nodes, broken once it is done

    def release(self) -> None:
        self.methods.clear()
        self.local_bases.clear()
        self.instances.clear()
        self.class_attrs.clear()

    def class_attr(self, name: str) -> cst.BaseExpression | None:
        """The expression a class body (this class's or a base's of the file) assigns to `name`."""
        return next((c.class_attrs[name] for c in self.lineage() if name in c.class_attrs), None)

    def method(self, name: str) -> FuncInfo | None:
        return next((c.methods[name] for c in self.lineage() if name in c.methods), None)

    def lineage(self) -> Iterator[ClassInfo]:
        """This class, then its bases of the file, breadth first, each once."""
        seen: set[int] = set()
        stack = [self]
        while stack:
            c = stack.pop(0)
            if id(c) in seen:
                continue
            seen.add(id(c))
            yield c
            stack.extend(c.local_bases)


def params_of(fn: cst.FunctionDef) -> list[tuple[str, Any]]:
    """(name, default expression or None) of a function's named parameters, in order."""
    p = fn.params
    out: list[tuple[str, Any]] = []
    for prm in list(p.posonly_params) + list(p.params):
        out.append((prm.name.value, prm.default))
    for prm in p.kwonly_params:
        out.append((prm.name.value, prm.default))
    return out


def body_of(fn: cst.FunctionDef) -> Sequence[cst.BaseStatement]:
    return fn.body.body if isinstance(fn.body, cst.IndentedBlock) else ()


@dataclass
class Scope:
    """One entry point being interpreted: does it build or run a split model, and
    which index-less placements happened in it (events.EntryPointRun)."""

    name: str
    split_seen: bool = False
    split_class: bool = False  # a method of a split class
    placements: list[IndexlessPlacement] = field(default_factory=list)
    # module objects moved so far, by identity key (shared.note_move): (device, node, depth)
    moved_objects: dict[Any, tuple[str, cst.CSTNode, int]] = field(default_factory=dict)
    # the expression a plain name was last bound to (`devs = {p.device for p in model.parameters()}`),
    # for the tests that read it (statements.asks_if_split)
    bound_to: dict[str, cst.BaseExpression] = field(default_factory=dict)
    # loops over devices that never read their device and built modules (device_loops.py)
    device_loops: list[Any] = field(default_factory=list)


class State:
    __slots__ = (
        "cur",
        "env",
        "exit_currents",
        "exits",
        "in_init",
        "mode",
        "returns",
        "scope",
        "self_obj",
        "setdev",
        "yields",
    )

    def __init__(
        self,
        env: dict[str, Val],
        cur: str | None,
        setdev: cst.CSTNode | None,
        mode: str,
        self_obj: Val | None,
        in_init: bool,
        scope: Scope,
    ) -> None:
        self.env = env
        self.cur = cur  # the current CUDA device ('cuda' when never set, None unknown)
        self.setdev = setdev  # the set_device / with-device node in effect, or None
        self.mode = mode  # '' | 'eval' | 'train' | 'no_grad'
        self.self_obj = self_obj
        self.in_init = in_init
        self.scope = scope
        self.returns: list[Val] = []
        self.exits: list[dict[str, Val]] = []  # the environments of the paths that returned
        # The current device (cur, setdev) each path ended with, returned or fallen off the end: set_device is
        # global, so a helper that calls it leaves its caller on that device (Calls.call_function).
        self.exit_currents: list[tuple[str | None, Any]] = []
        self.yields: SeqV | None = None  # in a generator's body: what it has yielded so far

    @classmethod
    def fresh(cls, env: dict[str, Val], scope_name: str, self_obj: Val | None = None) -> State:
        """A path at the start of an entry point, a probe or a summary."""
        return cls(env, CURRENT, None, "", self_obj, False, Scope(scope_name))

    def copy(self) -> State:
        s = State(dict(self.env), self.cur, self.setdev, self.mode, self.self_obj, self.in_init, self.scope)
        s.returns = self.returns
        s.exits = self.exits
        s.exit_currents = self.exit_currents
        s.yields = self.yields
        return s

    def given_back(self) -> Val | None:
        """What the call whose body ran on this path gives its caller: a generator's yielded values,
        else its returns joined; None when it returned nothing."""
        if self.yields is not None:
            return self.yields
        result: Val | None = None
        for r in self.returns:
            result = r if result is None else join(result, r)
        return result

    def resolve_current(self, devs: Devs) -> Devs:
        """'cuda' means the current device: after set_device(k) that is cuda:k."""
        if devs is not None and CURRENT in devs and self.setdev is not None:
            if self.cur is None or self.cur == CURRENT:
                return None
            return frozenset(self.cur if d == CURRENT else d for d in devs)
        return devs


def join_states(states: list[State]) -> State:
    base = states[0].copy()
    env = base.env
    for other in states[1:]:
        # A name bound on one path only is unknown after the join, the others joined. The
        # environments hold the module's globals too (hundreds of names, most the same object
        # on both paths): join(a, a) is a, so those are skipped without a call.
        for k, b in other.env.items():
            a = env.get(k)
            if a is not b or a is None:
                env[k] = UNK if a is None or b is None else join(a, b)
        if len(env) != len(other.env):
            for k in env.keys() - other.env.keys():
                env[k] = UNK
        if base.cur != other.cur:
            base.cur = None
        if base.setdev is None:
            base.setdev = other.setdev
        if base.mode != other.mode:
            base.mode = ""
    return base
