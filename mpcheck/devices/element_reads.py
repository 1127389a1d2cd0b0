"""MP020's facts: a tensor on a GPU whose elements Python reads on the host one at a time.

Iterating a tensor gives its elements as 0-dim tensors on its device. Python's `max(t)`, `min(t)` and
`sorted(t)` compare them pair by pair, and each comparison's truth is read on the host: a kernel launch
and a wait for the GPU per element. So does a loop whose body reads its element (`v.item()`, `int(v)`), or
the truth of a value computed from it on the GPU (`if row.argmax() == y[i]:`).
One reduction (`t.max()`) or one copy of the whole tensor (`t.tolist()`) waits once. `torch.tensor(losses)` of
a list of tensors on a GPU reads each one's value on the host the same way, where `torch.stack(losses)` keeps them
there (and `.cpu()` after it copies them once).

Only a tensor the model knows to be on a GPU counts; a list of tensors (`max(losses)`) is not one, and a
tensor of unknown device says nothing. Only code that runs every step counts, as for MP019: a forward, or
inside a loop (a script's last line that prints its predictions once waits a few times, once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import libcst as cst

from mpcheck.devices.events import ElementSync
from mpcheck.devices.names import dotted
from mpcheck.devices.values import Devs, Obj, SeqV, Val, single
from mpcheck.devices.walk import assigned, is_periodic_test, walk

if TYPE_CHECKING:
    from mpcheck.devices.interp import Interp
    from mpcheck.devices.program import State

# Python builtins that order the items of what they are given (`max(t)` is `max(iter(t))`).
ORDERING_BUILTINS = frozenset({"max", "min", "sorted"})
# What reads one element on the host: `v.item()`, `v.tolist()`, `int(v)`, `float(v)`, `bool(v)`.
_READ_METHODS = frozenset({"item", "tolist"})
_READ_BUILTINS = frozenset({"int", "float", "bool"})


def gpu_devices(interp: Interp, v: Val | None) -> Devs:
    """The device of `v` when it is a tensor on one GPU (a known one, or one whose index the code only names:
    `torch.device("cuda", GPU)` with `GPU` from the environment), else None."""
    if isinstance(v, Obj) and v.kind == "tensor":
        dev = single(v.devs)
        if dev is not None and (dev.startswith("cuda") or dev[4:] in interp.cuda_symbols and dev.startswith("sym:")):
            return v.devs
    return None


def _every_step(interp: Interp, st: State) -> bool:
    return not st.in_init and bool(interp.moves.in_forward() or interp.in_unknown_loop or interp.in_loop())


def note_ordering(interp: Interp, q: str, args: list[Val], node: cst.Call, st: State) -> None:
    """`max(t)` / `min(t)` / `sorted(t)`: one tensor, given alone (two arguments compare two values once)."""
    positional = [a for a in node.args if a.keyword is None]
    if q not in ORDERING_BUILTINS or len(args) != 1 or len(positional) != 1 or positional[0].star:
        return
    if not _every_step(interp, st):
        return
    devs = gpu_devices(interp, args[0])
    if devs is not None:
        interp.recorder.record(ElementSync(node=node, mode=st.mode, how=q, devs=devs, iterated=positional[0].value))


def note_from_values(interp: Interp, data: Val, node: cst.Call, st: State) -> None:
    """`torch.tensor([a, b, c])` / `torch.tensor(losses)` of tensors on a GPU (two or more, known), in code
    that runs every step: one wait per tensor."""
    if not isinstance(data, SeqV) or data.items is None or len(data.items) < 2 or not _every_step(interp, st):
        return
    devs = [gpu_devices(interp, item) for item in data.items]
    # On one GPU: `torch.stack` (the fix) needs them there; on two, the host is where they can meet.
    if all(d is not None and d == devs[0] for d in devs) and node.args:
        interp.recorder.record(
            ElementSync(node=node, mode=st.mode, how="tensor", devs=devs[0], iterated=node.args[0].value)
        )


def note_loop(
    interp: Interp,
    target: cst.BaseAssignTargetExpression,
    it: Val,
    iterated: cst.BaseExpression,
    body: cst.CSTNode,
    loop: cst.CSTNode,
    st: State,
) -> None:
    """A `for` (or a comprehension's `for`) over the elements of a GPU tensor: the first host read, in `body`,
    of a value made from an element. Over `t`, `enumerate(t)` and `zip(t, u)` the loop's names are the
    elements; over `range(len(t))` (`t.size(0)`, `t.shape[0]`), `t[i]` is."""
    if not _every_step(interp, st):
        return
    elements = _element_names(interp, target, it, iterated, st)
    indexed = _indexed_tensor(interp, target, iterated, st)
    if elements:
        devs, tensor, assumed = next(iter(elements.values()))
    elif indexed is not None:
        _, devs, tensor = indexed
        assumed = False
    else:
        _note_picked_per_pass(interp, target, iterated, body, loop, st)
        return

    def is_element(e: cst.BaseExpression) -> bool:
        if isinstance(e, cst.Name):
            return e.value in elements
        return (
            indexed is not None
            and isinstance(e, cst.Subscript)
            and e.value.deep_equals(indexed[2])
            and isinstance(e.slice[0].slice, cst.Index)
            and isinstance(e.slice[0].slice.value, cst.Name)
            and e.slice[0].slice.value.value == indexed[0]
        )

    for read, how, of in _host_reads(body, is_element):
        derived = not is_element(of)
        if derived and assumed:
            return  # a test of a value computed from something only taken for a tensor (`if line != ""`)
        interp.recorder.record(
            ElementSync(node=read, mode=st.mode, how=how, devs=devs, iterated=tensor, loop=loop, derived=derived)
        )
        return
    if not elements:  # over `range(len(t))` with no read of `t[i]`: another tensor's element at `i`, maybe
        _note_picked_per_pass(interp, target, iterated, body, loop, st)


def note_per_parameter(
    interp: Interp,
    target: cst.BaseAssignTargetExpression,
    iterated: cst.BaseExpression,
    body: cst.CSTNode,
    loop: cst.CSTNode,
    st: State,
) -> bool:
    """`for p in model.parameters():` (or `for name, p in model.named_parameters():`) over a model on GPUs, whose
    body reads on the host a value computed from the parameter or its gradient (`if not
    torch.isfinite(p.grad).all():`, `norms.append(p.grad.norm().item())`): one kernel and one wait for the GPU per
    parameter, every step, where the values of all of them, computed on the GPU and stacked, are read with one wait.
    A loop under a periodic test (`if step % 100 == 0:`) runs rarely and is left alone. Called before the loop is
    unrolled over a split model's devices (a parameter on each); True when the loop walks a model's parameters
    (then it walks no tensor's elements)."""
    found = _parameter_loop(interp, target, iterated, st)
    if found is None:
        return False
    if not _every_step(interp, st):
        return True
    name, model, devs = found
    if any(is_periodic_test(test) for test in (*interp.stmts.open_tests, *interp.stmts.decided_tests)):
        return True

    def is_param(e: cst.BaseExpression) -> bool:
        return isinstance(e, cst.Name) and e.value == name

    for read, how, _of in _host_reads(body, is_param):
        interp.recorder.record(
            ElementSync(
                node=read, mode=st.mode, how=how, devs=devs, iterated=model, loop=loop, derived=True, per_parameter=True
            )
        )
        break
    return True


_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})


def _parameter_loop(
    interp: Interp, target: cst.BaseAssignTargetExpression, iterated: cst.BaseExpression, st: State
) -> tuple[str, cst.BaseExpression, Devs] | None:
    """(the parameter's name, the model's expression, its devices) for `for p in model.parameters()` or `for n, p
    in model.named_parameters()` over a model the analysis knows to sit on GPUs only (one or several)."""
    if not (
        isinstance(iterated, cst.Call)
        and isinstance(iterated.func, cst.Attribute)
        and iterated.func.attr.value in _PARAMETER_METHODS
    ):
        return None
    named = iterated.func.attr.value == "named_parameters"
    if named and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
        target = target.elements[1].value  # type: ignore[assignment]
    elif named:
        return None
    if not isinstance(target, cst.Name):
        return None
    model = iterated.func.value
    if dotted(model) is None:
        return None
    devs = _gpu_model_devices(interp.exprs.ev(model, st))
    return (target.value, model, devs) if devs is not None else None


def _gpu_model_devices(v: Val) -> Devs:
    """The devices of a module known to sit on GPUs only: its one device, or the stages of a split."""
    if not (isinstance(v, Obj) and v.kind == "module"):
        return None
    devs = frozenset(d for _, d in v.split) if v.split else v.devs
    if not devs or any(not d.startswith("cuda") for d in devs):
        return None
    return devs


def _note_picked_per_pass(
    interp: Interp,
    target: cst.BaseAssignTargetExpression,
    iterated: cst.BaseExpression,
    body: cst.CSTNode,
    loop: cst.CSTNode,
    st: State,
) -> None:
    """A loop over a data-sized range (`for b in range(x.shape[0])`, `range(len(t))`) whose body reads on the host
    an element another GPU tensor gives at the loop's index (`last[b].item()`, `hist[b, t, k].item()` in a Viterbi
    back-trace): one wait per pass, where one `.tolist()` (or `.cpu()`) of that tensor before the loop waits once.
    Only a tensor the loop's own name picks from, bound before the loop, and known to be on a GPU."""
    rows = indexed_rows(target, iterated)
    if rows is None:
        return
    index = rows[0]
    picked: dict[str, tuple[Devs, cst.BaseExpression]] = {}
    for n in walk(body):
        if not (isinstance(n, cst.Subscript) and _picks_with(n, index)):
            continue
        name = dotted(n.value)
        if name is None or name in picked or name.split(".")[0] == index:
            continue
        devs = gpu_devices(interp, interp.exprs.ev(n.value, st))
        if devs is not None and not _rebound_in(body, name):
            picked[name] = (devs, n.value)
    if not picked:
        return

    def is_element(e: cst.BaseExpression) -> bool:
        return isinstance(e, cst.Subscript) and dotted(e.value) in picked and _picks_with(e, index)

    for read, how, of in _host_reads(body, is_element):
        if not is_element(of):
            return  # (a value computed from the element: the loop's own work decides, not followed here)
        devs, tensor = picked[dotted(of.value)]  # type: ignore[attr-defined,index]
        interp.recorder.record(ElementSync(node=read, mode=st.mode, how=how, devs=devs, iterated=tensor, loop=loop))
        return


def _picks_with(sub: cst.Subscript, index: str) -> bool:
    """`t[b]`, `t[b, t2, k]`: an index of the subscript is the name `index` itself."""
    return any(
        isinstance(el.slice, cst.Index) and isinstance(el.slice.value, cst.Name) and el.slice.value.value == index
        for el in sub.slice
    )


def _rebound_in(body: cst.CSTNode, name: str) -> bool:
    """Is `name` (a plain name) bound inside `body`? Then the value read there is not the one before the loop."""
    return "." not in name and any(isinstance(t, cst.Name) and t.value == name for n in walk(body) for t in assigned(n))


def _element_names(
    interp: Interp, target: cst.BaseAssignTargetExpression, it: Val, iterated: cst.BaseExpression, st: State
) -> dict[str, tuple[Devs, cst.BaseExpression, bool]]:
    """The loop's names that are elements of a GPU tensor, each with its device, the tensor's expression and
    whether its type is only assumed (_assumed)."""
    if isinstance(target, cst.Name):
        devs = gpu_devices(interp, it)
        return {target.value: (devs, iterated, _assumed(it))} if devs is not None else {}
    call = _builtin_call(iterated, ("enumerate", "zip"))
    if call is None or not isinstance(target, (cst.Tuple, cst.List)):
        return {}
    names = [e.value for e in target.elements]
    sources = [a.value for a in call.args if a.keyword is None and not a.star]
    if isinstance(call.func, cst.Name) and call.func.value == "enumerate":
        names, sources = names[1:2], sources[:1]
    found: dict[str, tuple[Devs, cst.BaseExpression, bool]] = {}
    for name, source in zip(names, sources):
        # Only a name or an attribute is looked at again: evaluating them twice has no effect of its own.
        if isinstance(name, cst.Name) and dotted(source) is not None:
            v = interp.exprs.ev(source, st)
            devs = gpu_devices(interp, v)
            if devs is not None:
                found[name.value] = (devs, source, _assumed(v))
    return found


def _assumed(v: Val) -> bool:
    """Is `v` taken for a tensor without being known as one (Obj.opaque: what a method of a module the model
    does not read gives back, `model.stream_chat(...)`, may be text)?"""
    return isinstance(v, Obj) and v.opaque


def _indexed_tensor(
    interp: Interp, target: cst.BaseAssignTargetExpression, iterated: cst.BaseExpression, st: State
) -> tuple[str, Devs, cst.BaseExpression] | None:
    """`for i in range(len(t))` (or `t.size(0)`, `t.shape[0]`) over a GPU tensor `t`: (i, its device, t)."""
    rows = indexed_rows(target, iterated)
    if rows is None:
        return None
    devs = gpu_devices(interp, interp.exprs.ev(rows[1], st))
    return (rows[0], devs, rows[1]) if devs is not None else None


def indexed_rows(
    target: cst.BaseAssignTargetExpression, iterated: cst.BaseExpression
) -> tuple[str, cst.BaseExpression] | None:
    """`for i in range(len(t))` (or `t.size(0)`, `t.shape[0]`), `t` a name or an attribute: (i, t), the loop's
    name and the expression of the tensor whose rows `t[i]` it walks."""
    call = _builtin_call(iterated, ("range",))
    if call is None or len(call.args) != 1 or not isinstance(target, cst.Name):
        return None
    n = call.args[0].value
    tensor: cst.BaseExpression | None = None
    if (f := _builtin_call(n, ("len",))) is not None and len(f.args) == 1:
        tensor = f.args[0].value
    elif isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "size":
        tensor = n.func.value
    elif (
        isinstance(n, cst.Subscript)
        and isinstance(n.value, cst.Attribute)
        and n.value.attr.value == "shape"
        and len(n.slice) == 1
        and isinstance(n.slice[0].slice, cst.Index)
        and isinstance(n.slice[0].slice.value, cst.Integer)
        and n.slice[0].slice.value.value == "0"
    ):
        tensor = n.value.value
    if tensor is None or dotted(tensor) is None:
        return None
    return target.value, tensor


def enumerated_rows(stmt: cst.For) -> tuple[str, cst.BaseExpression] | None:
    """`for j, i in enumerate(idx.tolist()):` whose body reads `f[j]` for one tensor name `f`: (j, f), the rows of
    `f` it walks one per pass, paired with the items it enumerates (a memory bank updated sample by sample)."""
    it, target = stmt.iter, stmt.target
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "enumerate"):
        return None
    if not (isinstance(target, cst.Tuple) and len(target.elements) == 2):
        return None
    index = target.elements[0].value
    if not isinstance(index, cst.Name):
        return None
    picked = [
        n.value
        for n in walk(stmt.body)
        if isinstance(n, cst.Subscript)
        and isinstance(n.value, cst.Name)
        and len(n.slice) == 1
        and isinstance(n.slice[0].slice, cst.Index)
        and isinstance(n.slice[0].slice.value, cst.Name)
        and n.slice[0].slice.value.value == index.value
    ]
    if len({p.value for p in picked if isinstance(p, cst.Name)}) != 1:
        return None
    return index.value, picked[0]  # (the tensor's name where the body first picks a row of it)


def _builtin_call(e: cst.BaseExpression, names: tuple[str, ...]) -> cst.Call | None:
    return e if isinstance(e, cst.Call) and isinstance(e.func, cst.Name) and e.func.value in names else None


# Methods and attributes of a tensor that give a host value (a size, a flag), not a tensor: a test on them
# reads nothing from the GPU.
_HOST_VALUED = frozenset(
    {
        "size", "dim", "ndim", "ndimension", "numel", "nelement", "shape", "dtype", "device", "is_cuda",
        "stride", "storage_offset", "is_contiguous", "element_size", "data_ptr", "get_device", "requires_grad",
        "is_floating_point", "is_complex", "layout", "names", "grad_fn", "is_leaf",
    }
)  # fmt: skip
_TEXT = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
# torch functions that answer a Python bool, read on the host from the tensors they compare.
_BOOL_FUNCTIONS = frozenset({"equal", "allclose", "is_nonzero"})


def _host_reads(
    node: cst.CSTNode, is_element: Callable[[cst.BaseExpression], bool]
) -> Iterator[tuple[cst.CSTNode, str, cst.BaseExpression]]:
    """The places under `node` that read a value made from a loop's element on the host, in source order:
    `v.item()`, `v.tolist()`, `int(v)`, `float(v)`, `bool(v)`, `torch.equal(v, w)`, and the truth of a
    tensor made from it tested by `if`, `while`, `assert`, `x if c else y`, `not`, `and`/`or`
    (`if torch.argmax(row) == y[i]:`). A nested function or class is another scope (its names are
    not the loop's)."""
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        return
    if isinstance(node, cst.Call):
        read = _reads(node, is_element)
        if read is not None:
            yield node, *read
            return
    test = _tested(node)
    if test is not None and _tensor_of(test, is_element):
        yield test, "bool", test
        return
    for child in node.children:
        yield from _host_reads(child, is_element)


def _tested(node: cst.CSTNode) -> cst.BaseExpression | None:
    """The expression whose truth Python reads at `node` (an `if`'s test...), else None."""
    if isinstance(node, (cst.If, cst.While, cst.Assert, cst.IfExp, cst.CompIf)):
        return node.test
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        return node.expression
    if isinstance(node, cst.BooleanOperation):
        return node.left
    return None


def _reads(call: cst.Call, is_element: Callable[[cst.BaseExpression], bool]) -> tuple[str, cst.BaseExpression] | None:
    """How `call` reads a value made from an element on the host ("item", "int"...) and what it reads, or None."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in _READ_METHODS and not call.args:
        return (func.attr.value, func.value) if _tensor_of(func.value, is_element) else None
    if isinstance(func, cst.Name) and func.value in _READ_BUILTINS and len(call.args) == 1:
        arg = call.args[0]
        if arg.keyword is None and not arg.star and _tensor_of(arg.value, is_element):
            return func.value, arg.value
    if isinstance(func, cst.Attribute) and func.attr.value in _BOOL_FUNCTIONS and _torch_namespace(func.value):
        read = next((a.value for a in call.args if _tensor_of(a.value, is_element)), None)
        return (func.attr.value, call) if read is not None else None
    return None


def _tensor_of(e: cst.BaseExpression, is_element: Callable[[cst.BaseExpression], bool]) -> bool:
    """`e` is a tensor made from an element (on its GPU): the element itself, an index or a slice of it, a
    comparison or arithmetic with it, a torch function or a tensor method of it. Its sizes, dtype and
    flags (`row.shape[0] > 3`) are host values; `is` and `in` compare on the host."""
    if is_element(e):
        return True
    if isinstance(e, cst.Subscript):
        return _tensor_of(e.value, is_element)
    if isinstance(e, cst.Attribute):
        return e.attr.value in ("T", "mT", "real", "imag", "data", "grad") and _tensor_of(e.value, is_element)
    if isinstance(e, cst.Comparison):
        if any(isinstance(t.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for t in e.comparisons):
            return False
        if any(isinstance(x, _TEXT) for x in (e.left, *(t.comparator for t in e.comparisons))):
            return False  # `line != ""`: text, whatever the model took `line` for
        return _tensor_of(e.left, is_element) or any(_tensor_of(t.comparator, is_element) for t in e.comparisons)
    if isinstance(e, cst.BinaryOperation):
        return _tensor_of(e.left, is_element) or _tensor_of(e.right, is_element)
    if isinstance(e, cst.UnaryOperation):
        return not isinstance(e.operator, cst.Not) and _tensor_of(e.expression, is_element)
    if isinstance(e, cst.Call):
        func = e.func
        if isinstance(func, cst.Attribute) and _tensor_of(func.value, is_element):
            return func.attr.value not in _HOST_VALUED and func.attr.value not in _READ_METHODS
        if isinstance(func, cst.Attribute) and _torch_namespace(func.value):
            return func.attr.value not in _BOOL_FUNCTIONS and any(
                a.keyword is None and not a.star and _tensor_of(a.value, is_element) for a in e.args
            )
    return False


def _torch_namespace(e: cst.BaseExpression) -> bool:
    """`torch`, `F`, `torch.nn.functional`, `torch.linalg`...: where a function of a tensor gives a tensor."""
    name = dotted(e)
    return name is not None and (name in ("torch", "F") or name.startswith("torch."))
