"""One debug-mode session: installs the mode, the hooks and the patches, and removes them all.

Install order: module patches, then the function mode (then the strict
dispatch mode), then the patches that enter them in the threads the program
starts (threads.py). Removal runs in reverse, always (exceptions included), and a
failure in one undo does not stop the others; the modes a thread still running
holds are retired (they pass every call through until it ends).
"""

from __future__ import annotations

import functools
import inspect
import operator
import sys
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import torch

from mpcheck.runtime.capture import copying, external_memory, hooks, loading, threads, transfers, transforms
from mpcheck.runtime.capture.mode import CheckingMode
from mpcheck.runtime.capture.signatures import SignatureCache, recheck_every_from_env
from mpcheck.runtime.capture.warnings_site import redirect_warnings
from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.ledger import Ledger
from mpcheck.runtime.checks.module_devices import modules_of
from mpcheck.runtime.checks.protocols import Devices
from mpcheck.runtime.checks.sites import is_users_function

_active_lock = threading.Lock()
_active: Session | None = None


class Session:
    def __init__(
        self,
        model: Any = None,
        *,
        on_mismatch: str = "raise",
        strict: bool = False,
        select: Iterable[str] | None = None,
        devices: Devices,
        keep_trace: bool = False,
        model_name: str = "model",
        recheck_every: int | None = None,
    ) -> None:
        """devices: where a tensor's device comes from (the real GPUs' CudaDevices, the virtual GPUs);
        the face decides, the session does not know either.
        recheck_every: a module call of a signature checked clean runs unchecked, but every
        recheck_every-th step checks everything again (signatures.py); 0 checks every call; None:
        MPCHECK_RECHECK_EVERY from the environment, else 100."""
        self.devices = devices
        self.namer = hooks.ModuleNamer()
        self.checker = Checker(
            devices, on_mismatch=on_mismatch, select=select, ledger=Ledger(keep_events=keep_trace), namer=self.namer
        )
        self.strict = strict
        self.recheck_every = recheck_every_from_env() if recheck_every is None else recheck_every
        if self.recheck_every < 0:
            raise ValueError(f"recheck_every must be 0 (check every call) or more, not {self.recheck_every}")
        self.cache = SignatureCache(self.checker, self.recheck_every) if self.recheck_every else None
        self.model = model
        self.model_name = model_name
        self.notes: list[str] = []  # things the report must say (e.g. torch.compile turned off)
        self._undos: list = []
        self._modes: list = []
        self._optimizers: weakref.WeakSet = weakref.WeakSet()
        self._memory_steps = 0
        # The checking mode an optimizer step stepped out of, per thread (_step_outside_mode).
        self._popped_tls = threading.local()
        # The session's modes, entered in the threads the program starts (threads.py); set by start().
        self.threads: threads.ThreadModes | None = None
        self._retire: list[Any] = []  # the modes to retire at the end (threads.retire)
        self.active = False

    # -- lifetime ----------------------------------------------------------------------
    def start(self) -> Session:
        global _active
        with _active_lock:
            if _active is not None:
                raise RuntimeError("mpcheck: a debug session is already active in this process")
            _active = self
        try:
            if self.model is not None:
                self.namer.add_root(self.model, self.model_name)
            mode = CheckingMode(self.checker, stamp_nodes=self.strict)
            # torch.nn leaves run outside the mode only where nothing is lost: not in strict mode
            # (the mode stamps each autograd node for backward findings) and not on virtual
            # devices (the dry run's checks of what its own mode answers stay as they are).
            leaf_mode = mode if not self.strict and self.checker.plain_devices else None
            smode: Any = None
            stand_in = self._unchecked_mode(mode)
            self._retire = [mode, stand_in]
            if self.strict:
                from mpcheck.runtime.capture.strict import StrictMode

                smode = StrictMode(self.checker)
                self._retire.append(smode)
            self._undos = hooks.install(
                self.checker,
                self.namer,
                on_step=self._on_optimizer_step,
                on_compiled=self._on_compiled,
                leaf_mode=leaf_mode,
                cache=self.cache,
                modes=(mode, smode, stand_in),
            )
            self._undos.append(loading.install(self.checker))
            self._undos.append(copying.install(self.checker))
            if self.cache is not None and self.checker.plain_devices:
                self._undos.extend(transfers.install(mode))
            self._undos.append(self._patch_compile())
            self._undos.extend(self._jit_outside_session(mode))
            self._undos.extend(transforms.install(self.checker))
            self._undos.extend(external_memory.install(self.checker.provenance))
            self._undos.append(redirect_warnings())
            if "torch._dynamo" in sys.modules:
                self._undos.append(hooks.disable_compile())
            mode.__enter__()
            self._modes.append(mode)
            self._undos.append(self._step_outside_mode(mode))
            self._undos.extend(self._zero_grad_outside_mode(mode))
            if smode is not None:
                if self.cache is not None:
                    self._undos.append(self._backward_outside_strict(smode, self.cache))
                smode.__enter__()
                self._modes.append(smode)
            self._undos.extend(self._enter_in_threads())
            self.active = True
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Remove everything, in reverse order, even if one removal fails; then read the timings."""
        global _active
        errors = []
        self._restore_mode()
        while self._modes:
            mode = self._modes.pop()
            try:
                mode.__exit__(None, None, None)
            except Exception as e:  # pragma: no cover - a mode stack popped by someone else
                errors.append(e)
        while self._undos:
            undo = self._undos.pop()
            try:
                undo()
            except Exception as e:  # pragma: no cover
                errors.append(e)
        # Threads still running keep the modes on their stacks until they end: from now on those pass
        # every call through (threads.py).
        busy = self.threads.busy() if self.threads is not None else 0
        if busy and self.active:
            self.notes.append(
                f"{busy} of the program's threads (or thread pool tasks) still ran when the run ended: what "
                f"{'they' if busy > 1 else 'it'} did after that is not covered"
            )
        for m in self._retire:
            threads.retire(m)
        with _active_lock:
            if _active is self:
                _active = None
        if self.active:
            self.active = False
            self._snapshot_memory()
            self.checker.finish()
        if errors:
            raise RuntimeError(f"mpcheck: could not remove every patch: {errors}")

    def _enter_in_threads(self) -> list:
        """Threads the program starts from now on run under mpcheck's modes, as this thread holds them
        now (the dry run's virtual-device modes below the checking ones): threads.py."""
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        self.threads = threads.ThreadModes(
            [m for m in _get_current_function_mode_stack() if threads.ours(m)],
            [m for m in _get_current_dispatch_mode_stack() if threads.ours(m)],
        )
        return self.threads.install()

    # -- steps and memory ------------------------------------------------------------------
    def step(self, optimizer: Any = None) -> None:
        """End a training step explicitly (a step also ends at optimizer.step(): `optimizer` is the one that
        stepped)."""
        self.checker.step_end(optimizer)
        if self.cache is not None:
            self.cache.step_end()
        # Parameters, gradients and optimizer states settle after the first steps; reading
        # them every step would cost O(parameters) per step, so only the first two are read, and
        # the first step (the one a user waits for) reads only the gradients: they are the ones a
        # training loop may drop before the session ends (`zero_grad()` after the step), while the
        # parameters, optimizer states and the allocator's peak read at the second step and at the
        # end are still there.
        if self._memory_steps < 2:
            self._memory_steps += 1
            self._snapshot_memory(grads_only=self._memory_steps == 1)

    def _on_optimizer_step(self, optimizer: Any) -> None:
        self._restore_mode()
        self._optimizers.add(optimizer)
        self.step(optimizer)

    def _unchecked_mode(self, mode: CheckingMode) -> transfers.TransferMode | None:
        """What stands in for the checking mode while a call of a signature checked clean runs
        (transfers.py): nothing on real GPUs (the transfer methods are wrapped), a TransferMode
        under the dry run."""
        if self.cache is None or self.checker.plain_devices:
            return None
        return transfers.TransferMode(mode)

    def _backward_outside_strict(self, smode: Any, cache: SignatureCache):
        """Strict mode: a backward whose forward ran all unchecked (every outermost module call of a
        signature checked clean, none checked, since the last backward) runs without the dispatch
        mode too; its graph is one the checked calls built, backward ops included."""
        import torch.autograd as autograd
        from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode, _push_mode

        orig = autograd.backward

        @functools.wraps(orig)
        def backward(*args, **kwargs):
            unchecked = cache.unchecked_roots and not cache.checked_roots
            cache.unchecked_roots = cache.checked_roots = 0
            if not unchecked or _get_current_dispatch_mode() is not smode:
                return orig(*args, **kwargs)
            popped = _pop_mode()
            try:
                return orig(*args, **kwargs)
            finally:
                _push_mode(popped)

        return hooks.patch(autograd, "backward", backward)

    def _step_outside_mode(self, mode: CheckingMode):
        """optimizer.step() runs outside the function mode: its per-parameter bookkeeping
        (hundreds of `.grad` / state reads) would cost more than the whole forward's checks,
        and it is library code (a step given a closure runs the user's forward inside it: checked). Strict mode
        still checks its aten ops. An optimizer whose step the
        user wrote (a Lion or a Sophia of their own) is the user's code, checked like the rest:
        a state it makes on the CPU for want of `device=` meets each parameter's gradient there."""
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        stack_len = torch._C._len_torch_function_stack
        tls = self._popped_tls
        own_step: dict[type, bool] = {}  # optimizer class -> whether its step is the user's code

        def pre(opt, args, kwargs):
            if hooks.in_outer_step():
                return  # the outer step has already stepped out of the mode
            self._restore_mode()
            cls = type(opt)
            users = own_step.get(cls)
            if users is None:
                users = own_step[cls] = is_users_function(cls.step)
                if users:
                    step = inspect.unwrap(cls.step)
                    self.checker.user_steps[step.__code__] = f"{cls.__name__}.{step.__name__}"
            if users:
                return
            if callable(kwargs.get("closure", args[1] if len(args) > 1 else None)):  # (args[0]: the optimizer)
                # `opt.step(closure)` (L-BFGS) runs the user's forward and loss inside the step: checked as the
                # user's code is, or a host tensor there (a temperature never placed) would pass unseen
                return
            n = stack_len()
            if n and torch._C._get_function_stack_at(n - 1) is mode:
                tls.popped = torch._C._pop_torch_function_stack()

        handle = register_optimizer_step_pre_hook(pre)
        return handle.remove

    def _zero_grad_outside_mode(self, mode: CheckingMode) -> list:
        """Optimizer.zero_grad() / Module.zero_grad() only read and clear `.grad`, two calls per
        parameter through the mode (in a small model's step, 70% of all the calls it sees) and
        nothing to check: they run without it."""
        stack_len = torch._C._len_torch_function_stack
        top = torch._C._get_function_stack_at
        pop = torch._C._pop_torch_function_stack
        push = torch._C._push_on_torch_function_stack

        def outside(orig):
            @functools.wraps(orig)
            def zero_grad(self_, *args, **kwargs):
                n = stack_len()
                if not (n and top(n - 1) is mode):
                    return orig(self_, *args, **kwargs)
                popped = pop()
                try:
                    return orig(self_, *args, **kwargs)
                finally:
                    push(popped)

            return zero_grad

        return [
            hooks.patch(owner, "zero_grad", outside(owner.zero_grad))
            for owner in (torch.optim.Optimizer, torch.nn.Module)
        ]

    def _jit_outside_session(self, mode: CheckingMode) -> list:
        """torch.jit.trace / script run without the checking mode and with the checks suspended: tracing
        checks its trace by tracing again and comparing the graphs, which the mode's frames and hooks made
        differ ("Graphs differed across invocations": a correct program stopped). What they make runs in
        TorchScript, which the mode does not see either way."""
        stack_len = torch._C._len_torch_function_stack
        top = torch._C._get_function_stack_at
        pop = torch._C._pop_torch_function_stack
        push = torch._C._push_on_torch_function_stack
        checker = self.checker

        def outside(orig):
            @functools.wraps(orig)
            def compile_(*args, **kwargs):
                n = stack_len()
                popped = pop() if n and top(n - 1) is mode else None
                try:
                    with checker.suspend():
                        return orig(*args, **kwargs)
                finally:
                    if popped is not None:
                        push(popped)

            return compile_

        return [
            hooks.patch(torch.jit, name, outside(getattr(torch.jit, name)))
            for name in ("trace", "trace_module", "script")
            if hasattr(torch.jit, name)
        ]

    def _restore_mode(self) -> None:
        """The checking mode back on this thread's stack, if an optimizer step of this thread took it off."""
        tls = self._popped_tls
        popped = getattr(tls, "popped", None)
        tls.popped = None
        if popped is not None:
            torch._C._push_on_torch_function_stack(popped)

    def _on_compiled(self) -> None:
        msg = hooks.compiled_frames_message()
        if msg not in self.notes:
            self.notes.append(msg)
            self._undos.append(hooks.disable_compile())
            print(msg, file=sys.stderr)

    def _patch_compile(self):
        orig = torch.compile
        session = self

        def compile_(*args, **kwargs):
            session._on_compiled()
            return orig(*args, **kwargs)

        torch.compile = compile_

        def undo() -> None:
            torch.compile = orig

        return undo

    def _roots(self) -> list[Any]:
        roots = [] if self.model is None else [self.model]
        roots.extend(self.namer.roots())
        seen, out = set(), []
        for r in roots:
            if id(r) not in seen:
                seen.add(id(r))
                out.append(r)
        return out

    def _snapshot_memory(self, *, grads_only: bool = False) -> None:
        with self.checker.suspend():
            if self.checker.plain_devices and torch._C._len_torch_function_stack():
                # Real devices: sizes and devices are the tensors' own, read with the function
                # modes off (through the checking mode, each `.numel()`, `.grad`, `.device`
                # costs a __torch_function__ call: ~3 per tensor, milliseconds in a first step).
                with torch._C.DisableTorchFunction():
                    mem = self._tensor_bytes(grads_only)
            else:
                mem = self._tensor_bytes(grads_only)
            # The allocator's peak only grows: the second step's reading and the end's cover the first
            # step's (on real GPUs one statistics call per device, left out of the step a user waits for).
            peak = None if grads_only else getattr(self.devices, "peak_allocated", None)
            if peak is not None:
                for dev in list(mem):
                    value = peak(dev)
                    if value is not None:
                        mem[dev]["peak_allocated"] = value
        if mem:
            old = self.checker.ledger.memory
            for dev, d in mem.items():
                merged = old.setdefault(dev, {})
                for k, v in d.items():
                    merged[k] = max(merged.get(k, 0), v)

    def _tensor_bytes(self, grads_only: bool = False) -> dict[str, dict[str, int]]:
        """Bytes of parameters, gradients and optimizer states (grads_only: gradients alone), per device
        and kind. The first steps read every one of them, so the loops are tight: bytes are summed per
        `t.device` where the devices are plain, and a device's name is read once per device, not once
        per tensor."""
        params = _parameters_of(self._roots())
        with threads.grad_reads(self.threads) as readable:
            # While another thread's backward writes gradients, they wait for a later reading (the end's).
            grads = [g for g in (p.grad for p in params) if g is not None] if readable else []
        tensor = torch.Tensor
        # Optimizer states by their name in the state (AdamW's `step` may sit on the CPU, `exp_avg` on
        # the parameter's GPU): each list then runs on one device as the parameters do.
        states: dict[Any, list[Any]] = {}
        for opt in [] if grads_only else list(self._optimizers):
            for state in list(opt.state.values()):  # lists: another thread's step may add to them
                for name, v in list(state.items()):
                    if isinstance(v, tensor):
                        named = states.get(name)
                        if named is None:
                            states[name] = [v]
                        else:
                            named.append(v)
        dev_of = self.devices.device_of
        key_of = _own_device if self.checker.plain_devices else dev_of
        mem: dict[str, dict[str, int]] = {}
        lists = [("params", [] if grads_only else params), ("grads", grads)]
        lists.extend(("optimizer_state", ts) for ts in states.values())
        for kind, ts in lists:
            # Runs of tensors on one device (the usual order: a stage's parameters, then the next
            # stage's) are summed before a dict is touched: hashing a torch.device costs more than
            # comparing two.
            prev: Any = None
            first: Any = None
            total = 0
            for t, key in zip(ts, map(key_of, ts)):
                if key != prev:
                    if first is not None:
                        _add_bytes(mem, dev_of(first), kind, total)
                    prev, first, total = key, t, 0
                try:
                    total += t.nbytes  # one read, not two calls (numel, element_size): ~700 tensors a snapshot
                except RuntimeError:  # a sparse gradient has no `.nbytes`: its dense size
                    total += t.numel() * t.element_size()
            if first is not None:
                _add_bytes(mem, dev_of(first), kind, total)
        return mem


_own_device = operator.attrgetter("device")


def _parameters_of(roots: list[Any]) -> list[Any]:
    """The parameters of the root models, each once: `root.parameters()`, walked without its
    generators (half the cost). A LazyModule's parameter not materialised yet has no size: left out
    (torch.nn.parameter.is_lazy's test, inlined: one call less per parameter)."""
    lazy = torch.nn.parameter.UninitializedTensorMixin  # type: ignore[attr-defined]  # not in torch's stub
    params: list[Any] = []
    seen: set[int] = set()
    for module in modules_of(roots):
        for p in module._parameters.values():
            if p is not None and id(p) not in seen and not isinstance(p, lazy):
                seen.add(id(p))
                params.append(p)
    return params


def _add_bytes(mem: dict[str, dict[str, int]], dev: str, kind: str, n: int) -> None:
    per = mem.get(dev)
    if per is None:
        per = mem[dev] = {"params": 0, "grads": 0, "optimizer_state": 0}
    per[kind] += n


def active() -> Session | None:
    return _active
