"""The signature cache's fast path on real devices (cpu and meta as a "split" on CPU, CudaDevices):
inside a call running unchecked, a module call of a signature checked clean runs after one lookup;
a new signature, a placement change and an exception still bring the checks back, and the module
stack still names each module (transfers and findings are named by it)."""

import pytest
import torch
from torch import nn

import mpcheck
from mpcheck.runtime.capture import session as sessions
from mpcheck.runtime.capture.signatures import CLEAN_AFTER, SignatureCache


class Scale(nn.Module):
    """A user module with a buffer (so it has a device), recording the module stack's top."""

    def __init__(self, device):
        super().__init__()
        self.register_buffer("scale", torch.full((4,), 2.0, device=device))
        self.seen = []
        self.fail = False  # raise from forward: state the signature does not see

    def forward(self, x):
        self.seen.append(sessions.active().checker.current_module())
        if self.fail:
            raise ValueError("failed on purpose")
        return x * self.scale.to(x.dtype)


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.near = Scale("cpu")
        self.far = Scale("meta")
        self.wide = False  # a branch the signature of the outer call does not see
        self.replace = False  # move `near`'s buffer inside forward (a placement change mid-call)

    def forward(self, x):
        if self.replace:
            self.near.float()
        h = self.near(x.double() if self.wide else x)
        return self.far(h.to("meta"))


@pytest.fixture
def entry_checks(monkeypatch):
    """The dtype of the first argument of each checked call of a module with a device, as the signature
    cache records it (a checked call that ran clean: hooks.py compares the call's inputs with the
    module's device inline where the call has one tensor argument, without Checker.inputs_on)."""
    seen = []
    orig = SignatureCache.add

    def spy(self, module, key, path, leaf=None):
        if self.checker.module_device(module) is not None:
            seen.append(key[4] if len(key) == 5 else key)
        return orig(self, module, key, path, leaf)

    monkeypatch.setattr(SignatureCache, "add", spy)
    return seen


def _settle(model, dbg, x):
    for _ in range(CLEAN_AFTER + 1):
        model(x)
        dbg.step()


def test_a_ready_signature_runs_without_checks_named_on_the_module_stack(entry_checks):
    model, x = Split(), torch.ones(2, 4)
    with mpcheck.debug(model, report=None) as dbg:
        _settle(model, dbg, x)
        entry_checks.clear()
        out = model(x)
        assert entry_checks == []  # nothing checked: the outer call and both inner calls ran unchecked
        assert model.near.seen[-1] == "model.near" and model.far.seen[-1] == "model.far"
        assert sessions.active().checker.module_stack == []
    assert out.device.type == "meta" and dbg.findings == []
    assert dbg.ledger.total().count == CLEAN_AFTER + 2  # every forward's transfer, unchecked ones too


def test_a_new_signature_inside_an_unchecked_call_is_checked_then_runs_unchecked(entry_checks):
    model, x = Split(), torch.ones(2, 4)
    with mpcheck.debug(model, report=None) as dbg:
        _settle(model, dbg, x)
        model.wide = True
        entry_checks.clear()
        model(x)
        assert torch.float64 in entry_checks  # `near` called with a new dtype: checked
        for _ in range(CLEAN_AFTER):
            model(x)
        entry_checks.clear()
        model(x)
        assert entry_checks == []
    assert dbg.findings == []


def test_a_placement_change_and_a_re_check_step_check_everything_again(entry_checks):
    model, x = Split(), torch.ones(2, 4)
    with mpcheck.debug(model, report=None, recheck_every=CLEAN_AFTER + 2) as dbg:
        _settle(model, dbg, x)
        model.near.to(torch.float32)  # Module._apply: placements are read again
        entry_checks.clear()
        model(x)
        assert len(entry_checks) == 2
        model(x)
        dbg.step()  # the session's 5th step: a re-check step (recheck_every=5)
        entry_checks.clear()
        model(x)
        assert len(entry_checks) == 2


def test_an_exception_in_a_fast_call_checks_the_next_calls_again(entry_checks):
    model, x = Split(), torch.ones(2, 4)
    with mpcheck.debug(model, report=None) as dbg:
        _settle(model, dbg, x)
        model.near.fail = True
        entry_checks.clear()
        with pytest.raises(ValueError):
            model(x)  # the outer call unchecked, `near` on the fast path: it raises
        assert entry_checks == []
        assert sessions.active().checker.module_stack == []
        model.near.fail = False
        model(x)
        assert len(entry_checks) == 2  # the exception emptied the cache: checked again


def test_a_placement_change_inside_an_unchecked_call_checks_the_calls_after_it(entry_checks):
    model, x = Split(), torch.ones(2, 4)
    with mpcheck.debug(model, report=None) as dbg:
        _settle(model, dbg, x)
        model.replace = True
        entry_checks.clear()
        model(x)  # the outer call runs unchecked; `near.float()` inside it changes placements
        assert len(entry_checks) == 2  # so `near` and `far` after it are checked
    assert dbg.findings == []


def test_a_module_call_wrapper_installed_before_the_session_still_runs_on_the_fast_path(monkeypatch):
    # The fast path calls Module._call_impl itself only where Module.__call__ is PyTorch's own.
    calls = []
    theirs = nn.Module.__call__

    def wrapper(module, *args, **kwargs):
        calls.append(type(module).__name__)
        return theirs(module, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "__call__", wrapper)
    model, x = Split(), torch.ones(2, 4)
    with mpcheck.debug(model, report=None) as dbg:
        _settle(model, dbg, x)
        calls.clear()
        model(x)
        assert calls == ["Split", "Scale", "Scale"]
        assert model.far.seen[-1] == "model.far"


class OwnCallImpl(Scale):
    """A module class with its own _call_impl (as some libraries have): the fast path must call it."""

    def _call_impl(self, *args, **kwargs):
        self.seen.append("own _call_impl")
        return super()._call_impl(*args, **kwargs)


def test_hooks_added_after_a_signature_is_ready_still_run_on_the_fast_path():
    # The fast path calls a hook-free module's forward itself, as Module._call_impl would; any hook,
    # on the module or global, and a class's own _call_impl send the call through _call_impl again.
    model, x = Split(), torch.ones(2, 4)
    fired = []
    with mpcheck.debug(model, report=None) as dbg:
        _settle(model, dbg, x)
        handle = model.near.register_forward_hook(lambda m, a, out: fired.append("near post"))
        model(x)
        handle.remove()
        pre = model.far.register_forward_pre_hook(lambda m, a: fired.append("far pre"))
        model(x)
        pre.remove()
        glob = torch.nn.modules.module.register_module_forward_hook(lambda m, a, out: fired.append(type(m).__name__))
        try:
            model(x)
        finally:
            glob.remove()
        model(x)
        assert fired == ["near post", "far pre", "Scale", "Scale", "Split"]
        model.near = OwnCallImpl("cpu")
        _settle(model, dbg, x)
        model.near.seen.clear()
        model(x)
        assert model.near.seen == ["own _call_impl", "model.<OwnCallImpl>"]  # set after the session began
    assert dbg.findings == []


class LeafInside(nn.Module):
    """A torch.nn leaf (nn.Linear on the CPU) called inside a user module's forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.far = False  # give the leaf its input on another device

    def forward(self, x):
        return self.lin(x.to("meta") if self.far else x)


def test_a_torch_leaf_on_its_device_runs_without_a_key_even_when_its_signature_is_new(entry_checks):
    # checked() runs a hook-free torch.nn leaf whose input is on its own device without the mode and
    # without any check: a new training flag (or dtype, grad or autocast mode) changes nothing there,
    # so inside an unchecked call such a call runs at once, with the same result.
    model, x = LeafInside(), torch.ones(2, 4)
    with mpcheck.debug(model, report=None) as dbg:
        _settle(model, dbg, x)
        model.lin.eval()  # the leaf's signature changes, not the outer call's
        entry_checks.clear()
        out = model(x)
        assert entry_checks == []
    assert torch.equal(out, model.lin(x)) and dbg.findings == []


def test_a_torch_leaf_given_another_device_or_a_hook_or_its_own_forward_takes_the_full_path(entry_checks):
    model, x = LeafInside(), torch.ones(2, 4)
    fired = []
    with mpcheck.debug(model, report=None, on_mismatch="warn") as dbg:
        _settle(model, dbg, x)
        handle = model.lin.register_forward_hook(lambda m, a, out: fired.append("post"))
        model(x)
        handle.remove()
        assert fired == ["post"]
        model.lin.eval()
        orig = model.lin.forward
        model.lin.forward = lambda t: fired.append("own forward") or orig(t)  # as accelerate's hooks do
        entry_checks.clear()
        model(x)
        assert fired == ["post", "own forward"] and entry_checks  # a new signature, checked
        del model.lin.forward
        model.far = True
        with pytest.warns(Warning, match="MP001"), pytest.raises(RuntimeError):
            model(x)  # PyTorch's own error after mpcheck's finding
    assert [f.code for f in dbg.findings] == ["MP001"]


def test_the_fast_path_table_drops_a_module_gone_and_empties_at_a_placement_change():
    import gc

    model, x = Split(), torch.ones(2, 4)
    with mpcheck.debug(model, report=None) as dbg:
        _settle(model, dbg, x)
        ready = sessions.active().cache.ready
        key = id(model.near)
        assert key in ready
        model.near = Scale("cpu")
        gc.collect()
        assert key not in ready  # gone with its module: its id may be another module's
        _settle(model, dbg, x)
        assert ready
        sessions.active().checker.invalidate_placement()
        assert not ready  # at once, not at the next outermost call


class CountedLinear(nn.Linear):
    """A torch.nn leaf of a class with its own _call_impl (torch.nn's module, as Linear subclasses in libraries)."""

    __module__ = "torch.nn.modules.linear"
    calls = 0

    def _call_impl(self, *args, **kwargs):
        CountedLinear.calls += 1
        return super()._call_impl(*args, **kwargs)


def test_a_checked_torch_leaf_on_its_device_still_runs_its_backward_hooks_and_its_own_call_impl():
    # A checked call of a torch.nn leaf on its device runs without the mode, and calls its forward itself
    # only where Module._call_impl would: a backward hook (the module's or a global one) or a class's own
    # _call_impl sends it through _call_impl.
    fired = []
    lin = nn.Linear(4, 4)
    outer = nn.Sequential(lin)
    with mpcheck.debug(outer, report=None, recheck_every=0) as dbg:
        handle = lin.register_full_backward_hook(lambda m, gi, go: fired.append("module"))
        outer(torch.ones(2, 4, requires_grad=True)).sum().backward()
        handle.remove()
        glob = torch.nn.modules.module.register_module_full_backward_hook(lambda m, gi, go: fired.append("global"))
        try:
            outer(torch.ones(2, 4, requires_grad=True)).sum().backward()
        finally:
            glob.remove()
        outer(torch.ones(2, 4, requires_grad=True)).sum().backward()
        outer[0] = CountedLinear(4, 4)
        outer(torch.ones(2, 4))
    assert fired == ["module", "global", "global"]  # the global hook fires for the Sequential and the leaf
    assert CountedLinear.calls == 1 and dbg.findings == []
