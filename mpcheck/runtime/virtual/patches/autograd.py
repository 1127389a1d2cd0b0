"""Autograd on virtual GPUs: backward samples the memory estimate; Python code autograd runs
without the mode stack (a custom Function's backward, checkpoint's recompute, saved-tensor and
gradient hooks) gets the dry run's modes back, and gradients arriving unlabelled get their forward
output's device."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from mpcheck.runtime.virtual.errors import VirtualDeviceError
from mpcheck.runtime.virtual.patches.base import Patches

if TYPE_CHECKING:  # pragma: no cover
    from mpcheck.runtime.virtual.devices import VirtualGPUs


def install(g: VirtualGPUs, p: Patches) -> None:
    orig_backward = torch.autograd.backward

    # torch.autograd.backward hands the function its module holds now (this one) to the modes: named as
    # the original, so that both faces know it (checks/torchapi.BACKWARD_FUNCTIONS, ops._autograd_entry).
    @functools.wraps(orig_backward)
    def backward(*a: Any, **k: Any) -> Any:
        g.before_backward()
        return orig_backward(*a, **k)

    p.set(torch.autograd, "backward", backward)


def install_python(g: VirtualGPUs, p: Patches) -> None:
    """Custom Functions and activation checkpointing."""
    import torch.utils.checkpoint as ckpt
    from torch.autograd.function import BackwardCFunction, Function

    orig_checkpoint = ckpt.checkpoint

    def checkpoint(function: Callable, *args: Any, **kwargs: Any) -> Any:
        return orig_checkpoint(_with_modes(g, function), *args, **kwargs)

    p.set(ckpt, "checkpoint", checkpoint)
    # Its determinism check compares each saved tensor's device in forward and in recompute. Pack
    # hooks run with or without the modes depending on who saves, and an op's output is saved before
    # the dry run labels it with its virtual device (a Tanh's result in forward, while in recompute
    # the same storage may be labelled already): compare the backing device, the same on both sides.
    checks = getattr(ckpt, "_allowed_determinism_checks_to_fns", None)
    default = getattr(ckpt, "_DEFAULT_DETERMINISM_MODE", None)
    if isinstance(checks, dict) and default in checks:
        p.set_item(checks, default, _saved_metadata)

    # Saved-tensor hooks (`torch.autograd.graph.save_on_cpu`, offloading activations) run inside an op,
    # where autograd saves its inputs, and in backward: with the modes, they see virtual devices (the
    # device a packed tensor goes back to) and their factories lose `pin_memory`, as the program's own do.
    hooks_cls = torch.autograd.graph.saved_tensors_hooks
    orig_hooks_init = hooks_cls.__init__

    def hooks_init(self: Any, pack_hook: Callable, unpack_hook: Callable) -> None:
        orig_hooks_init(self, _with_modes(g, pack_hook), _with_modes(g, unpack_hook))

    p.set(hooks_cls, "__init__", hooks_init)

    # Gradient hooks (`w.register_hook(lambda g: g * mask)`, `register_post_accumulate_grad_hook`) run in
    # backward, where the engine runs Python without the modes: with them, they see the gradient's virtual
    # device and meet what they read as on a real GPU (a mask on another GPU fails there too).
    for name in ("register_hook", "register_post_accumulate_grad_hook"):
        orig = getattr(torch.Tensor, name, None)
        if orig is not None:
            p.set(torch.Tensor, name, _hook_registrar(g, orig))

    orig_apply = Function.__dict__["apply"].__func__

    def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig_apply(cls, *args, **kwargs)
        # Remember where the outputs live: their gradients arrive in backward unlabelled.
        outs = out if isinstance(out, tuple) else (out,)
        node = next((o.grad_fn for o in outs if isinstance(o, torch.Tensor) and o.grad_fn is not None), None)
        if node is not None:
            try:
                # mpcheck's own mark on torch's node (torch's stub lists a Node's attributes)
                node._mpcheck_devs = [g.label_of(o) if isinstance(o, torch.Tensor) else None for o in outs]  # type: ignore[attr-defined]
                # and where the inputs live: the engine checks each gradient backward returns against them
                node._mpcheck_inputs = [g.device_of(a) if isinstance(a, torch.Tensor) else None for a in args]  # type: ignore[attr-defined]
            except AttributeError:  # a node type without a __dict__
                pass
        return out

    p.set(Function, "apply", classmethod(apply))

    orig_bw = BackwardCFunction.apply

    def backward_apply(self: Any, *grads: Any) -> Any:
        devs = getattr(self, "_mpcheck_devs", None)
        if devs:
            for grad, dev in zip(grads, devs):
                if dev is not None and isinstance(grad, torch.Tensor) and g.label_of(grad) is None:
                    g.label(grad, dev)
        out = _with_modes(g, orig_bw)(self, *grads)
        inputs = getattr(self, "_mpcheck_inputs", None)
        if inputs:
            _check_gradient_devices(g, type(self), out, inputs)
        return out

    p.set(BackwardCFunction, "apply", backward_apply)


def _check_gradient_devices(g: VirtualGPUs, node: type, out: Any, inputs: list[str | None]) -> None:
    """What autograd's engine checks of a custom Function's gradients (validate_outputs): each on its
    input's device. A 0-dim gradient is moved there quietly; any other refuses, with PyTorch's words
    (checks/op_error.py reads them, on real GPUs as here)."""
    grads = out if isinstance(out, tuple) else (out,)
    for i, (grad, dev) in enumerate(zip(grads, inputs)):
        if dev is None or not isinstance(grad, torch.Tensor) or grad.dim() == 0:
            continue
        got = g.device_of(grad)
        if got != dev:
            error = VirtualDeviceError(
                f"Function {node.__name__} returned an invalid gradient at index {i} - expected device {dev} but got {got}"
            )
            error.function = getattr(node, "_forward_cls", None)  # type: ignore[attr-defined]  # (checks/op_error.py)
            raise error


def _hook_registrar(g: VirtualGPUs, orig: Callable) -> Callable:
    """`Tensor.register_hook` (or its like) that registers the hook wrapped to run under the dry run's modes."""

    @functools.wraps(orig)
    def register(self: Any, hook: Callable, *a: Any, **k: Any) -> Any:
        return orig(self, _with_modes(g, hook), *a, **k)

    return register


def _saved_metadata(x: torch.Tensor) -> dict[str, Any]:
    """Checkpoint's metadata of a saved tensor, with its backing device (not its virtual one)."""
    with torch._C.DisableTorchFunction():
        return {"shape": x.shape, "dtype": x.dtype, "device": x.device}


def _with_modes(g: VirtualGPUs, fn: Callable) -> Callable:
    """Run `fn` under the dry run's function modes when autograd calls it without any (the engine
    does not carry the mode stack into backward), so backward-time Python sees virtual devices."""

    def run(*a: Any, **k: Any) -> Any:
        if torch._C._len_torch_function_stack() or not g.active or not g.mode_stack:
            return fn(*a, **k)
        for m in g.mode_stack:
            torch._C._push_on_torch_function_stack(m)
        try:
            return fn(*a, **k)
        finally:
            for _ in g.mode_stack:
                torch._C._pop_torch_function_stack()

    return run
