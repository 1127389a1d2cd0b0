"""The checking TorchFunctionMode: sees every Python-level torch call while the debug mode is on.

Three kinds of call (the table: checks/torchapi.py), decided once per function object and cached:
- metadata (`.device`, `.shape`, `.dim()`, ...): passed straight through;
- transfers (`Tensor.to/.cuda/.cpu/.copy_`): timed on the source device's
  stream, recorded in the ledger, checked for round trips and repeats;
- everything else: the devices of its tensor arguments are checked before
  PyTorch's kernel sees them.

Devices are always asked of `checker.devices.device_of`, never `t.device`:
under the dry run the virtual-device mode sits below this one on the mode
stack, and the checks must see virtual devices.

It cannot see inside autograd's backward; a gradient hook on each transfer's
output node times the matching backward copy. The dispatch-level strict mode
(see strict.py) sees every aten op, backward included.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import torch
import torch.utils._device as _device_ctx
from torch.overrides import TorchFunctionMode

from mpcheck.devices.torchapi import SHAPE_FACTORIES
from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.hook_moves import made_by_module_hook
from mpcheck.runtime.checks.per_item_moves import GATHERS as _GATHERS
from mpcheck.runtime.checks.per_item_moves import MIN_ITEMS as _MIN_ITEMS
from mpcheck.runtime.checks.provenance import CONST_FACTORIES, DRAWN_FACTORIES, first_tensor_id
from mpcheck.runtime.checks.sites import called_by_torch

# The kinds of call (module-level names: the mode compares one per call).
from mpcheck.runtime.checks.torchapi import BACKWARD as _BACKWARD
from mpcheck.runtime.checks.torchapi import CHECK as _CHECK
from mpcheck.runtime.checks.torchapi import COPY as _COPY
from mpcheck.runtime.checks.torchapi import CPU as _CPU
from mpcheck.runtime.checks.torchapi import CUDA as _CUDA
from mpcheck.runtime.checks.torchapi import DATA_ALIAS as _DATA_ALIAS
from mpcheck.runtime.checks.torchapi import EXPORT as _EXPORT
from mpcheck.runtime.checks.torchapi import HOST_READ as _HOST_READ
from mpcheck.runtime.checks.torchapi import LOSS as _LOSS
from mpcheck.runtime.checks.torchapi import METADATA_READS, needs_full_name, python_call_kind
from mpcheck.runtime.checks.torchapi import PASS as _PASS
from mpcheck.runtime.checks.torchapi import SET_DATA as _SET
from mpcheck.runtime.checks.torchapi import TO as _TO
from mpcheck.runtime.checks.torchapi import VIEW as _VIEW
from mpcheck.runtime.checks.transfer_events import payload_bytes

_graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)
_TENSOR = torch.tensor  # (its list of 0-dim tensors is read on the host: no devices mix there)


def _classify(func: Any) -> int:
    """The kind of a call (checks/torchapi.py), from its name and the name torch resolves it to."""
    kind = getattr(func, "mpcheck_transfer_kind", None)  # a transfer method wrapped by transfers.py
    if kind is not None:
        return kind
    name = getattr(func, "__name__", "")
    full = None
    if needs_full_name(name):  # most calls' kind does not depend on it: no lookup, no str(op)
        try:
            full = _resolve_name(func)
        except Exception:
            pass
    return python_call_kind(name, full, f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', '')}")


_names: Any = None  # torch.overrides' own table, function -> name (False: not readable)


def _resolve_name(func: Any) -> str | None:
    """torch.overrides.resolve_name(func), read from the table it reads. resolve_name itself sets up
    and tears down a warnings filter at each call (~25 us; a fresh session's first step classifies
    each torch function it calls); the filter matters only while the table is built, once."""
    global _names
    from torch.overrides import resolve_name

    if _names is None:
        resolve_name(torch.Tensor.add)  # builds the table, its deprecation warnings filtered out
        try:
            table = torch.overrides._get_overridable_functions()[1]
        except Exception:  # pragma: no cover - a PyTorch without the private table
            table = None
        _names = table if isinstance(table, dict) else False
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(func)  # resolve_name's own answer for an op (`torch.ops.profiler.*` in optimizer.step)
    if _names is False:
        return resolve_name(func)
    return _names.get(func)


def _broadcasting_ops() -> frozenset[Any]:
    """torch's binary elementwise arithmetic, as the function mode sees it called (`a - b` is TensorBase.sub,
    `1 - a` Tensor.__rsub__, `torch.sub(a, b)` the function)."""
    names = ("add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "pow", "maximum", "minimum")
    dunders = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__")
    found = {getattr(owner, n, None) for owner in (torch, torch.Tensor, torch._C.TensorBase) for n in names}
    found |= {getattr(torch.Tensor, n, None) for n in (*dunders, "__pow__", "__rpow__")}
    found.discard(None)
    return frozenset(found)


def _scalar_arithmetic(broadcasting: frozenset[Any]) -> frozenset[Any]:
    """The elementwise ops whose number argument can be a 0-dim tensor with the same result: the binary arithmetic,
    its in-place forms, clamping and filling."""
    names = ("add_", "sub_", "mul_", "div_", "clamp", "clamp_", "clip", "masked_fill", "masked_fill_", "lerp", "fill_")
    found = {getattr(owner, n, None) for owner in (torch, torch.Tensor, torch._C.TensorBase) for n in names}
    found.discard(None)
    return frozenset(found) | broadcasting


class CheckingMode(TorchFunctionMode):
    def __init__(self, checker: Checker, *, time_backward: bool = True, stamp_nodes: bool = False) -> None:
        super().__init__()
        # Strict mode: stamp each autograd node with its forward line, for backward findings.
        self.stamp_nodes = stamp_nodes
        self.checker = checker
        self.time_backward = time_backward
        self._kinds: dict[Any, int] = {}
        self._tensor = torch.Tensor
        # Conversions to a wider dtype, by method (MP016's widened.py; `.to(dtype)` is seen as a transfer kind).
        # (and `F.one_hot`, which widens each id to a row of one value per class, and `F.interpolate`, which
        # resamples a tensor to more elements: both enlarge what a move of the result carries)
        self._one_hot = torch.nn.functional.one_hot
        self._resamplers = frozenset({torch.nn.functional.interpolate, torch.nn.functional.unfold})
        self._widening = frozenset({torch.Tensor.float, torch.Tensor.double, self._one_hot, *self._resamplers})
        self._resamplers_unfold = torch.nn.functional.unfold
        # Elementwise arithmetic of two tensors, which may broadcast them to a larger result (widened.on_broadcast).
        self._broadcasting = _broadcasting_ops()
        # ...and the arithmetic that takes a 0-dim tensor where it takes a number (element_reads.on_scalar_fed).
        self._scalar_arithmetic = _scalar_arithmetic(self._broadcasting)
        self._read_scalars = checker.element_reads.scalars  # one dict for the run, empty most of the time
        self._worked_results = checker._worked  # detours' results (worked_detour.py): empty most of the time
        self._upload_marks = checker.uploads.marks  # host copies on GPUs, and values of them alone (host_known.py)
        # The adds of a running sum (checks/accumulated.py).
        T = torch.Tensor
        self._adds = frozenset({torch.add, T.add, T.add_, T.__add__, T.__radd__, T.__iadd__})
        self._listed = checker.listed_reads.recent  # `.tolist()` reads kept a while (host_list.py): mostly empty
        self._widened = checker._widened  # one dict for the run, empty most of the time
        self._tls = checker._tls
        # MP011's provenance (checks/provenance.py): tensors computed only from constants.
        self._provenance = checker.provenance
        self._marks = checker.provenance.marks
        # MP004's records (checks/placement.py): tensors made on the current device inside a stage.
        self._placements = checker.placements
        # Tensors a reported mismatch found off their device (checks/unmoved.py): what is made from them.
        self._unmoved = checker.unmoved
        self._unmoved_records = checker.unmoved.records  # one dict for the run (purged in place)
        # MP016's watched transfers (checks/reduced_after_move.py): one dict for the run, empty most of the time.
        self._watched = checker.reduce_watch.carriers
        # Factories that take a tensor as their data and move it when given device= (`_as_moved`).
        self._as_tensor = frozenset(f for f in (torch.as_tensor, getattr(torch, "asarray", None)) if f is not None)
        # Ops that pick rows into a new tensor (arrivals.selected_arrival): `data[idx]`, `index_select`
        self._selections = frozenset({torch.Tensor.__getitem__, torch.Tensor.index_select, torch.index_select})
        self._getitem = torch.Tensor.__getitem__
        self._tolist = torch.Tensor.tolist
        self._factories = frozenset(f for f in (getattr(torch, n, None) for n in CONST_FACTORIES) if f is not None)
        self._drawn_factories = frozenset(f for f in (getattr(torch, n, None) for n in DRAWN_FACTORIES) if f)
        # MP019's (checks/made_on_host.py): the factories that make a tensor from a shape alone, random ones too.
        self._shape_factories = frozenset(f for f in (getattr(torch, n, None) for n in SHAPE_FACTORIES) if f)
        if stamp_nodes:
            from mpcheck.runtime.capture.strict import stamp_node

            self._stamp_node = stamp_node

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            kind = self._kinds[func]
        except (KeyError, TypeError):
            kind = self._classify(func)
        if kind == _PASS:
            if self._watched and args and id(args[0]) in self._watched:
                return self._pass_watched(func, args, kwargs or {})
            try:  # free until it raises (Python 3.11's exceptions cost nothing unraised)
                return func(*args, **kwargs) if kwargs else func(*args)
            except RuntimeError as e:  # `.view()` refused for its strides: mpcheck may know why (MP012)
                return self.checker.on_op_error(func, args, kwargs or {}, e)
        if kwargs is None:
            kwargs = {}
        if self._tls.suspended:
            return func(*args, **kwargs)
        checker = self.checker
        if kind == _HOST_READ:  # a wait for the GPU anyway: counted for MP020 (checks/element_reads.py)
            if args and isinstance(args[0], self._tensor):
                name = getattr(func, "__name__", "")
                if id(args[0]) in self._upload_marks:  # a value the host has the data for (host_known.py)?
                    checker.on_known_read(args[0], name)
                elif id(args[0]) in self._marks:  # one made of constants alone, kept on a GPU (host_known.py)?
                    checker.on_const_read(args[0], name)
                # Made on a GPU only to be read here (made_on_gpu.py)? Else counted for MP020's reads.
                if not (id(args[0]) in checker.arrived_objects and checker.on_gpu_made_to_host(args[0], name)):
                    checker.on_host_read(args[0], name)
                if self._watched:
                    checker.on_watched_export(args[0])
                if self._tls.stack or func is self._tolist:
                    out = func(*args, **kwargs)
                    if type(out) is float:  # inside a module's call: does it go straight back to the GPU?
                        checker.on_scalar_read(args[0], out)
                    elif type(out) is list:  # made into a tensor again next (checks/host_list.py)?
                        checker.on_listed(args[0], out)
                    return out
            return func(*args, **kwargs)
        if kind == _EXPORT:
            if self._watched and args:
                checker.on_watched_export(args[0])
            return func(*args, **kwargs)
        if kind == _VIEW:
            try:
                out = func(*args, **kwargs)
            except RuntimeError as e:  # `.view()` refused for its strides (MP012), as for a passed-through call
                return checker.on_op_error(func, args, kwargs, e)
            if args and first_tensor_id(args[0]) in self._marks:
                self._provenance.derive(args, kwargs, out, getattr(func, "__name__", ""))
            if self._placements._made:
                self._placements.derive(args, out, checker.devices.device_of)
            if self._unmoved_records:
                self._unmoved.derive(args, out, checker.devices.device_of)
            if args and id(args[0]) in checker.arrived_objects:
                checker.note_view(args[0], out)
            if self._watched and args:
                checker.on_watched_view(args[0], out)
            if self._upload_marks and args and id(args[0]) in self._upload_marks:
                checker.derive_upload(func, args, kwargs, out)
            return out
        if kind == _BACKWARD:
            if self._watched and args:
                checker.on_watched_export(args[0])  # `moved.backward()`: its data was needed
            if not self._tls.stack:
                checker.end_top_pass()  # the forward pass of the code that calls it is over
            try:
                return func(*args, **kwargs)
            except RuntimeError as e:  # a custom Function's gradient on the wrong device (MP001)
                return checker.on_op_error(func, args, kwargs, e)
        loss = kind == _LOSS
        if loss:
            checker.on_loss(args, kwargs)
            kind = _CHECK
        if kind == _CHECK:
            if func in self._as_tensor and args and isinstance(args[0], self._tensor) and "device" in kwargs:
                # `torch.as_tensor(h, device="cuda:1")` of a tensor is `h.to("cuda:1")`: a copy when `h` is
                # elsewhere, `h` itself when it is there; seen as the transfer it is.
                return self._as_moved(func, types, args[0], kwargs)
            made_how = None  # how a factory puts its tensor on the current device, if it does (MP004)
            dev = kwargs.get("device") if kwargs else None
            if dev is not None:  # a factory's device= (torch.zeros(..., device='cuda:2')): a device that exists?
                checker.check_device(dev)
                made_how = _current_device_words(dev, "`device={!r}`")
                if made_how is not None:
                    made_how = MADE_AS.get() or made_how
            elif _device_ctx.CURRENT_DEVICE is not None:
                made_how = _default_device_words(func)
            worked = None  # the arrived tensors it reads, and its arguments as called (worked_detour.py)
            selected = None  # the arrival whose rows it picks, unread (arrivals.selected_arrival)
            gathered = None  # the first of the unread copies from GPUs it stacks on the host (arrivals.py)
            if checker.arrived_objects:  # a moved tensor used where it arrived is no round trip (MP005)
                if args and type(args[0]) in (list, tuple) and getattr(func, "__name__", "") in _GATHERS:
                    if len(args[0]) >= _MIN_ITEMS:  # moved one by one, then gathered? (MP021)
                        checker.on_gather(func, args[0])
                    gathered = checker.gathered_on_host(args[0])  # copies from GPUs stacked on the host?
                selected = checker.selected_arrival(args) if func in self._selections else None
                if selected is None:
                    hits = checker.note_reads(args, kwargs)
                else:  # rows picked from arrived data that nothing read there: the rows go on as that data
                    hits = [(args[0], selected), *checker.note_reads(args[1:], kwargs)]
                if hits:
                    worked = (hits, args, kwargs)
            if self._read_scalars and func in self._scalar_arithmetic:
                checker.on_scalar_fed(func, args, kwargs)  # a number read from a GPU, handed back (MP020)
            read = (args, kwargs) if self._watched else None  # as called (check_op may move them)
            # One argument mixes nothing, unless it is a sequence: torch.cat([a, b]); but torch.tensor([l_a, l_b])
            # of 0-dim tensors on two GPUs reads their values on the host (a CPU tensor, or device='s).
            if len(args) + len(kwargs) > 1 or (args and isinstance(args[0], (list, tuple)) and func is not _TENSOR):
                args, kwargs = checker.check_op(func, args, kwargs)
            if func is _TENSOR and args:
                checker.on_tensor_of_tensors(args[0])  # MP020: each GPU tensor in it read on the host
            try:
                out = func(*args, **kwargs)
            except RuntimeError as e:  # PyTorch's own error: mpcheck may know its cause (MP012)
                out = checker.on_op_error(func, args, kwargs, e)
            if read is not None:
                checker.on_watched_read(func, read[0], read[1], out)
            if self._listed and args and (func is _TENSOR or func in self._as_tensor):
                checker.on_tensor_from_list(args[0], out)  # a `.tolist()` made into a tensor again (MP005)
            if func in self._widening and args:
                if func is self._one_hot:
                    checker.on_encoded(args[0], out)  # `F.one_hot(ids, C)`: a move of it next crosses C-fold
                elif func in self._resamplers:  # `F.interpolate(x, scale_factor=4)`: 16-fold for an image
                    checker.on_upsampled(args[0], out, func is self._resamplers_unfold)
                else:
                    checker.on_widened(args[0], out)  # `x.float()`: a move of it next crosses wide (widened.py)
            elif self._widened and args and id(args[0]) in self._widened:
                checker.carry_widened(func, args, out)
            elif func in self._broadcasting and len(args) == 2:
                checker.on_broadcast(args, out)  # `d[..., None] - centers`: a move of it next crosses enlarged
            if worked is not None:
                checker.on_arrival_worked(func, worked[1], worked[2], out, worked[0])
                if func in self._adds:  # `total + s.to(d)`, `total + s`: a running sum there (accumulated.py)?
                    checker.on_accumulated(worked[1], out, worked[0])
            elif self._worked_results and args:
                checker.carry_worked(args, kwargs, out)  # `(a @ x_d.t()) / temperature`: the same result, scaled
            if self._upload_marks and args and first_tensor_id(args[0]) in self._upload_marks:
                checker.derive_upload(func, args, kwargs, out)  # `(labels_dev != IGNORE).sum()` (host_known.py)
            if selected is not None:
                checker.on_selected(out, selected)
            elif gathered is not None:
                checker.on_selected(out, gathered, gathered=True)
            if loss:
                checker.loss_values.note(out)
            if made_how is not None:
                checker.on_current_device_tensor(out, made_how)
            elif self._placements._made:
                self._placements.derive(args, out, checker.devices.device_of)
            if self._unmoved_records:
                self._unmoved.derive(args, out, checker.devices.device_of)
            if self.stamp_nodes:
                self._stamp(out)
            if args:
                a0 = args[0]  # (inlined first_tensor_id: every checked call pays this test)
                t0 = type(a0)
                if (id(a0[0]) if (t0 is list or t0 is tuple) and a0 else id(a0)) in self._marks:
                    self._provenance.derive(args, kwargs, out, getattr(func, "__name__", ""))
                elif func is self._getitem:
                    self._on_picked(a0, args[1] if len(args) > 1 else None, out)
                else:
                    try:
                        factory = func in self._factories
                        shaped = func in self._shape_factories
                    except TypeError:  # an unhashable callable
                        factory = shaped = False
                    on_host = None
                    if shaped and not factory and dev is None and func in self._drawn_factories:
                        # (tested only for a shape factory: no cost on the other calls)
                        self._provenance.made_drawn(out)  # a stand-in batch drawn on the host (repeats.py)
                    if factory and not kwargs.get("requires_grad"):
                        self._provenance.made_by_factory(out)
                        on_host = dev is None and made_how is None and checker.devices.device_of(out) == "cpu"
                        if on_host:
                            checker.on_host_made_tensor(out, func.__name__)  # host_made.py
                    # A seeded host generator (`generator=g`, diffusers' randn_tensor) is why it is made on
                    # the host: `device=` would refuse that generator (MP019 stays silent).
                    if shaped and dev is None and made_how is None and kwargs.get("generator") is None:
                        if on_host or (on_host is None and checker.devices.device_of(out) == "cpu"):
                            checker.note_host_made(out, func.__name__, args)  # MP019: made_on_host.py
                    elif shaped and dev is not None and checker.devices.device_of(out).startswith("cuda"):
                        checker.note_gpu_made(out, func.__name__, args)  # read on the host first? (made_on_gpu.py)
            return out
        if kind == _SET:
            out = func(*args, **kwargs)
            checker.invalidate_placement()
            return out
        if kind == _DATA_ALIAS:  # `buf.data.copy_(...)`: writes `buf` unseen by its version counter (provenance.py)
            if args:
                self._provenance.changes_unseen(args[0])
                if self._watched:
                    checker.on_watched_export(args[0])  # an alias whose reads are not followed: taken as used
            return func(*args, **kwargs)
        return self._transfer(kind, func, args, kwargs)

    def _on_picked(self, source: Any, index: Any, out: Any) -> None:
        """`out = source[index]`: one element of a GPU tensor, or one row picked by a number, followed so that the
        host reads of values computed from each in turn (`if usage[k] == 0:` in a loop over `k`, `if dones[t].any():`
        over the time steps) count as reads of `source`'s elements (MP020, checks/element_reads.py)."""
        tensor = self._tensor
        if (
            isinstance(out, tensor)
            and isinstance(source, tensor)
            and (type(index) is int or out.numel() == 1)
            and source.numel() > 1
            and self.checker.devices.device_of(source).startswith("cuda")
            and self.checker.wants("MP020")
        ):
            self._provenance.picked_element(source, out)

    def _pass_watched(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """A passed-through call on a watched move's output (MP016, reduced_after_move.py): a tensor it gives
        (`.mT`, `.real`, `.grad`) carries the data on; a metadata read (`.shape`, `.size()`) uses none of it;
        anything else (pickling, `data_ptr()` handed to a kernel of its own) is taken as a use of the data."""
        try:
            out = func(*args, **kwargs)
        except RuntimeError as e:
            return self.checker.on_op_error(func, args, kwargs, e)
        if isinstance(out, self._tensor):
            self.checker.on_watched_view(args[0], out)
        elif getattr(func, "__name__", "") not in METADATA_READS:
            self.checker.on_watched_export(args[0])
        return out

    def _stamp(self, out: Any) -> None:
        tensor = self._tensor
        if isinstance(out, tensor):
            node = getattr(out, "grad_fn", None)
        elif isinstance(out, (tuple, list)) and out and isinstance(out[0], tensor):
            node = out[0].grad_fn
        else:
            return
        if node is not None:
            checker = self.checker
            self._stamp_node(node, checker.sites(), checker.current_module())

    def _as_moved(self, func: Any, types: Any, t: Any, kwargs: dict) -> Any:
        """`torch.as_tensor(t, device=d, dtype=x)` / `torch.asarray(t, device=d, copy=c)` as `t.to(...)`; with any
        other argument (`requires_grad=`, `copy=False`), the call itself, unchecked (the rare rest)."""
        if set(kwargs) - {"device", "dtype", "copy"} or kwargs.get("copy") is False:
            return func(t, **kwargs)
        moved = {k: v for k, v in kwargs.items() if v is not None and k != "copy"}
        if kwargs.get("copy"):
            moved["copy"] = True
        return self.__torch_function__(torch.Tensor.to, types, (t,), moved)

    def _classify(self, func) -> int:
        kind = _classify(func)
        try:
            self._kinds[func] = kind
        except TypeError:  # an unhashable callable: classified at each call
            pass
        return kind

    def _transfer(self, kind: int, func, args, kwargs):
        checker = self.checker
        devices = checker.devices
        if kind == _COPY:
            if len(args) < 2 or not isinstance(args[1], self._tensor):
                return func(*args, **kwargs)
            src_t, dst_holder = args[1], args[0]
            src = devices.device_of(src_t)
            dst: str | None = devices.device_of(dst_holder)
        else:
            src_t = args[0]
            src = devices.device_of(src_t)
            dst = _target(kind, args, kwargs, devices, self._tensor, checker.check_device)
        if dst is None or dst == src:
            out = func(*args, **kwargs)
            if kind == _TO and out is not src_t:  # a dtype conversion where it is: widened? (MP016, widened.py)
                checker.on_widened(src_t, out)
            if id(src_t) in self._marks:  # a dtype cast, or a move to where it already is
                self._provenance.derive((src_t,), {}, out)
            if self._upload_marks and id(src_t) in self._upload_marks:
                checker.derive_upload(func, (src_t,), {}, out)
            if self._placements._made:
                self._placements.derive((src_t,), out, devices.device_of)
            if self._unmoved_records:
                self._unmoved.derive((src_t,), out, devices.device_of)
            return out
        nbytes = payload_bytes(src_t)
        site = checker.transfer_sites()
        module = checker.current_module()
        timing = devices.start_transfer(src, dst, nbytes)
        out = func(*args, **kwargs)
        if timing is not None:
            timing.stop()
        if id(src_t) in self._marks and kind != _COPY:
            self._provenance.arrived(src_t, out)  # a stand-in batch's copy is the stand-in there (repeats.py)
        if src == "cpu" and kind != _COPY and dst.startswith("cuda"):
            checker.on_upload(src_t, out, site)  # its values are known on the host (MP020: host_known.py)
        if kind != _COPY and dst.startswith("cuda"):
            made_how = _current_device_transfer_words(kind, args, kwargs)
            if made_how is not None:
                checker.on_current_device_tensor(out, made_how)
        # Inside a backward pass (activation checkpointing recomputes forward there), a
        # transfer is the recomputation's, not a repeat of the user's; one PyTorch's own code makes
        # there (a scatter's backward gathering the gradient, on virtual GPUs) is the backward's.
        phase = "forward" if _graph_task_id() == -1 else "backward" if called_by_torch() else "recompute"
        # A copy PyTorch's own code makes (GradScaler moving found_inf between devices), or a
        # module's hooks make (accelerate's dispatch_model aligning inputs), is counted, but no
        # round trip, repeat or ping-pong is pinned on the user's line that called it.
        checker.on_transfer(
            src_t,
            out,
            src,
            dst,
            site=site,
            module_path=module,
            phase=phase,
            timing=timing,
            nbytes=nbytes,
            by_library=phase == "forward" and (called_by_torch() or made_by_module_hook()),
            non_blocking=bool(kwargs.get("non_blocking")),
        )
        if self.time_backward and isinstance(out, self._tensor) and out.grad_fn is not None:
            _time_backward(checker, out.grad_fn, dst, src, nbytes, site, module)
        return out


def _current_device_words(dev: Any, template: str) -> str | None:
    """How a device argument names the current device ('cuda', torch.device('cuda')), in the finding's
    words (`template` formatted with it), or None when it names a device by index or no GPU."""
    if isinstance(dev, str):
        return template.format(dev) if dev == "cuda" else None
    if isinstance(dev, torch.device) and dev.type == "cuda" and dev.index is None:
        return template.format(dev)
    return None


# What the user wrote, where a call the program made is carried out by a torch factory with device='cuda'
# (the dry run's legacy `torch.cuda.IntTensor([0])`): the MP004 finding names it instead of `device='cuda'`.
MADE_AS: ContextVar[str | None] = ContextVar("mpcheck_made_as", default=None)

_FACTORIES: set = set()


def _default_device_words(func: Any) -> str | None:
    """A factory without device= under torch.set_default_device('cuda') (or `with torch.device('cuda')`):
    it lands on the current device."""
    default = _device_ctx.CURRENT_DEVICE
    if default is None or default.type != "cuda" or default.index is not None:
        return None
    if not _FACTORIES:
        _FACTORIES.update(_device_ctx._device_constructors())
    if func not in _FACTORIES:
        return None
    return f"`{getattr(func, '__name__', 'a factory')}(...)` without device=, under torch.set_default_device('cuda'),"


def _current_device_transfer_words(kind: int, args, kwargs) -> str | None:
    """A move onto the current device: `.cuda()`, `.cuda('cuda')`, `.to('cuda')`, `.to(torch.device('cuda'))`."""
    if kind == _CUDA:
        dev = args[1] if len(args) > 1 else kwargs.get("device")
        return "a bare `.cuda()`" if dev is None else _current_device_words(dev, "`.cuda({!r})`")
    for a in args[1:]:
        if isinstance(a, (str, torch.device)):
            return _current_device_words(a, "`.to({!r})`")
    dev = kwargs.get("device")
    return _current_device_words(dev, "`.to(device={!r})`") if dev is not None else None


def _target(kind: int, args, kwargs, devices, tensor_type, check_device) -> str | None:
    """The device a transfer goes to; `check_device` sees the user's device argument first (MP009)."""
    if kind == _CPU:
        return "cpu"
    if kind == _CUDA:
        dev = args[1] if len(args) > 1 else kwargs.get("device")
        if dev is not None:
            check_device(dev)
        return devices.normalize("cuda" if dev is None else dev)
    # Tensor.to(device=None, dtype=None, ...) / .to(other) / .to(dtype)
    for a in args[1:]:
        if isinstance(a, tensor_type):
            return devices.device_of(a)
        if isinstance(a, (str, int, torch.device)) and not isinstance(a, bool):
            check_device(a)
            return devices.normalize(a)
    dev = kwargs.get("device")
    if dev is not None:
        check_device(dev)
        return devices.normalize(dev)
    other = kwargs.get("other")
    if isinstance(other, tensor_type):
        return devices.device_of(other)
    return None


def _time_backward(checker: Checker, node, src: str, dst: str, nbytes: int, site, module) -> None:
    """The backward of a forward copy src->dst copies the gradient dst->src: time it on the
    node that does it. The hooks hold only strings and numbers, never a tensor."""
    state: list = []

    def pre(grad_outputs):
        if grad_outputs and grad_outputs[0] is not None:
            state.append(checker.devices.start_transfer(src, dst, nbytes))
        return None

    def post(grad_inputs, grad_outputs):
        if not state:
            return None
        timing = state.pop()
        if timing is not None:
            timing.stop()
        checker.on_transfer(
            None,
            None,
            src,
            dst,
            site=site,
            module_path=module,
            phase="backward",
            timing=timing,
            nbytes=nbytes,
            contiguous=True,
        )
        return None

    try:
        node.register_prehook(pre)
        node.register_hook(post)
    except Exception:  # a node type without hooks: the backward copy goes untimed
        pass
