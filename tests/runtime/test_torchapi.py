"""The run-time tables of torch's API: what each entry makes the checks and the virtual GPUs do."""

import pytest

torch = pytest.importorskip("torch")

from torch.overrides import resolve_name  # noqa: E402

from mpcheck.runtime.checks import torchapi as api  # noqa: E402


def kind(func):
    return api.python_call_kind(getattr(func, "__name__", ""), resolve_name(func))


def test_function_mode_kinds_of_tensor_calls():
    T = torch.Tensor
    assert kind(T.dim) == api.PASS
    assert kind(T.device.__get__) == api.PASS  # every property getter
    assert kind(T.to) == api.TO
    assert kind(T.cuda) == api.CUDA
    assert kind(T.cpu) == api.CPU
    assert kind(T.copy_) == api.COPY
    assert kind(T.data.__set__) == api.SET_DATA
    assert kind(T.grad.__set__) == api.PASS  # `p.grad = None` must not drop the placement cache
    assert kind(T.data.__get__) == api.DATA_ALIAS  # its writes leave the tensor's version counter as it was
    assert kind(T.grad.__get__) == api.PASS
    assert kind(T.__getitem__) == api.CHECK  # checked; the checker allows its CPU indices
    assert kind(torch.add) == api.CHECK
    assert kind(T.add) == api.CHECK
    assert kind(T.view) == api.VIEW  # passed through; MP011's provenance follows it
    assert kind(T.clone) == api.VIEW
    assert kind(torch.nn.functional.cross_entropy) == api.LOSS  # checked, and its predictions' way looked at
    assert kind(torch.nn.functional.mse_loss) == api.LOSS


def test_a_name_outside_torch_tensor_is_checked():
    # torch.detach / torch.clone share a metadata method's name but are not Tensor attributes
    assert api.python_call_kind("clone", "torch.clone") == api.CHECK
    assert api.python_call_kind("to", "torch.nn.Module.to") == api.CHECK
    assert api.python_call_kind("dim", None) == api.PASS  # unresolvable: the name decides


def test_autograd_entry_points_and_type_as_pass_whatever_the_devices():
    # outputs and inputs from anywhere in the graph; type_as converts (to the other tensor's device and dtype)
    assert api.python_call_kind("grad", None, "torch.autograd.grad") == api.BACKWARD
    assert api.python_call_kind("backward", None, "torch.autograd.backward") == api.BACKWARD
    assert kind(torch.Tensor.backward) == api.BACKWARD
    assert api.python_call_kind("grad", None, "mylib.grad") == api.CHECK
    assert kind(torch.Tensor.type_as) == api.PASS
    assert torch._foreach_lerp_.__name__.startswith(api.PER_INDEX_PREFIXES)


def test_cpu_index_names_and_aten_ops():
    assert {"__getitem__", "__setitem__", "index_put_"} <= api.CPU_INDEX_NAMES
    assert api.ATEN_CPU_INDEX_AS in api.CPU_INDEX_NAMES
    assert api.aten_op_kind("_to_copy") == api.SKIP
    assert api.aten_op_kind("index_select") == api.CPU_INDEX
    assert api.aten_op_kind("mm") == api.CHECK


def test_the_virtual_table_hands_its_functions_to_their_handlers():
    from mpcheck.runtime.virtual import handlers
    from mpcheck.runtime.virtual import torchapi as vapi
    from mpcheck.runtime.virtual.mode import build_tables

    build_tables()
    T = torch.Tensor
    assert vapi.HANDLERS[T.to] is handlers.to
    assert vapi.HANDLERS[T.device.__get__] is handlers.device_get
    # the value readers each get a handler of their own, with their own message
    assert vapi.HANDLERS[T.item] is not vapi.HANDLERS[T.tolist]
    assert torch.add not in vapi.HANDLERS  # the generic path


def test_the_mode_reads_torch_names_as_resolve_name_gives_them():
    # The checking mode reads torch.overrides' table directly (resolve_name sets up a warnings filter
    # at each call): same names, for functions, methods, property accessors, ops and unknown callables.
    from mpcheck.runtime.capture.mode import _classify, _resolve_name

    T = torch.Tensor
    funcs = [
        torch.add, T.add, T.to, T.cuda, T.copy_, T.view, T.__getitem__, T.data.__set__, T.grad.__set__,
        T.device.__get__, torch.nn.functional.mse_loss, torch.nn.functional.linear, torch.ops.aten.add.Tensor,
        torch.ops.aten.add, torch.ops.profiler._record_function_enter_new, print, lambda: None,
    ]  # fmt: skip
    for f in funcs:
        assert _resolve_name(f) == resolve_name(f), f
        assert _classify(f) == kind(f), f


def test_a_name_whose_kind_needs_no_full_name_gets_it_whatever_its_full_name():
    # The checking mode resolves a function's full name only where the kind depends on it
    # (needs_full_name): everywhere else the name alone must decide, whatever the full name is.
    fulls = [None, "torch.Tensor.{}", "torch.{}", "torch.nn.functional.{}", "torch.Tensor.data.__set__", "x.{}"]
    names = [*api.PYTHON_CALLS, "add", "linear", "mse_loss", "cross_entropy", "kl_div", "gelu", "grad", ""]
    for name in names:
        kinds = {api.python_call_kind(name, f if f is None else f.format(name)) for f in fulls}
        if not api.needs_full_name(name):
            assert kinds == {api.CHECK}, name
    assert api.needs_full_name("to") and api.needs_full_name("dim") and api.needs_full_name("__set__")
    assert api.needs_full_name("mse_loss") and api.needs_full_name("cross_entropy")
    assert not api.needs_full_name("add") and not api.needs_full_name("__getitem__")


def test_the_mode_classifies_every_torch_function_as_resolve_name_names_it():
    # Every function of torch's override table (Tensor methods, torch.*, torch.nn.functional.*, ...):
    # the mode's kind, which skips the name lookup where it cannot matter, is the full lookup's.
    from mpcheck.runtime.capture.mode import _classify

    funcs = [f for fs in torch.overrides.get_overridable_functions().values() for f in fs]
    assert len(funcs) > 1000
    for f in funcs:
        assert _classify(f) == kind(f), f
