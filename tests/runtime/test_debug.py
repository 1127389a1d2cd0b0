"""The debug mode end to end on CPU: a "split" model with one stage on cpu and one on meta gives
real mismatches and real transfers (cpu -> meta) without a GPU."""

import inspect
import weakref

import pytest
import torch
from torch import nn

import mpcheck
from mpcheck.runtime.checks.findings import DeviceMismatchError, MpcheckRuntimeWarning
from mpcheck.runtime.checks.sites import shown_path


def _line(fn, marker):
    src, start = inspect.getsourcelines(fn)
    for i, text in enumerate(src):
        if marker in text:
            return start + i
    raise AssertionError(marker)


class Stage(nn.Module):
    def __init__(self, device):
        super().__init__()
        self.lin = nn.Linear(8, 8, device=device)
        self.register_buffer("scale", torch.ones(8, device=device))

    def forward(self, x, *, bias=None):
        y = self.lin(x) * self.scale
        if bias is not None:
            y = y + bias  # op: bias
        return y


class Split(nn.Module):
    def __init__(self, hop=True):
        super().__init__()
        self.hop = hop
        self.first = Stage("cpu")
        self.second = Stage("meta")
        self.table = torch.ones(8)

    def forward(self, x):
        h = self.first(x)
        if self.hop:
            h = h.to("meta")  # hop
        return self.second(h)  # entry


def test_mismatch_at_module_entry_raises_with_module_path_and_line():
    model = Split(hop=False)
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            model(torch.randn(2, 8))
    f = err.value.finding
    assert f.code == "MP001" and f.modules == ("model.second",)
    assert f.path == shown_path(__file__) and f.line == _line(Split.forward, "# entry")
    assert f.devices == ("meta", "cpu")


def test_mismatch_at_a_torch_call_inside_forward_kwargs_too():
    stage = Stage("meta")
    x = torch.randn(2, 8, device="meta")
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(stage, report=None):
            stage(x, bias=torch.randn(8))  # kwarg on the wrong device: caught at the module entry
    assert err.value.finding.line == _line(test_mismatch_at_a_torch_call_inside_forward_kwargs_too, "# kwarg")
    assert "keyword argument 'bias'" in err.value.finding.message


def test_op_level_mismatch_with_module_stack():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(8, device="meta"))
            self.bias_table = torch.ones(8)  # a plain attribute, not a buffer: stays on cpu

        def forward(self, x):
            return x * self.w + self.bias_table  # op line

    outer = nn.Sequential(nn.Identity(), Inner())
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(outer, report=None):
            outer(torch.ones(8, device="meta"))
    f = err.value.finding
    assert f.modules == ("model.1",)
    assert f.line == _line(Inner.forward, "# op line")
    assert "torch.Tensor.add" in f.message


def test_move_mode_lists_every_mismatch_and_the_program_goes_on():
    model = Split(hop=False)
    with mpcheck.debug(model, on_mismatch="move", report=None) as dbg:
        out = model(torch.randn(2, 8))
        out2 = model(torch.randn(2, 8))
    assert out.device.type == "meta" and out2.device.type == "meta"
    (f,) = dbg.findings
    assert f.extra["count"] == 2 and f.modules == ("model.second",)


def test_warn_mode_warns_then_pytorch_acts():
    model = Split(hop=False)
    with pytest.warns(MpcheckRuntimeWarning, match="MP001"):
        with pytest.raises(Exception) as err:
            with mpcheck.debug(model, on_mismatch="warn", report=None):
                model(torch.randn(2, 8))
    assert not isinstance(err.value, DeviceMismatchError)


def test_correct_split_model_runs_clean_and_its_transfers_are_recorded():
    model = Split(hop=True)
    with mpcheck.debug(model, report=None) as dbg:
        for _ in range(3):
            model(torch.randn(4, 8))
            dbg.step()
    assert dbg.findings == []
    ledger = dbg.ledger
    agg = ledger.by_pair()[("cpu", "meta", "forward")]
    assert (agg.count, agg.bytes) == (3, 3 * 4 * 8 * 4)
    ((site, *_),) = ledger.by_site().keys()
    assert site.line == _line(Split.forward, "# hop")
    assert list(ledger.by_module()) == [("model", "cpu", "meta", "forward")]
    assert len(ledger.steps) == 3


def test_repeated_and_round_trip_transfers_through_the_mode(monkeypatch):
    monkeypatch.setenv("MPCHECK_REPEAT_MIN_BYTES", "0")  # a 64-byte table: below the default threshold
    table = torch.ones(16)
    with mpcheck.debug(report=None) as dbg:
        a = table.to("meta")
        dbg.step()  # a training step later (two copies with no model work between are setup)
        b = table.to("meta")  # again
        dbg.step()  # and a step after it: inside the training loop, not a copy made once after training
        c = torch.randn(4)
        d = c.to("meta")
        e = d + 1  # work on meta: a new tensor, not a round trip
    assert a.device.type == b.device.type == e.device.type == "meta"
    codes = [(f.code, f.line) for f in dbg.findings]
    assert codes == [("MP011", _line(test_repeated_and_round_trip_transfers_through_the_mode, "# again"))]


def test_env_variable_turns_debug_into_a_no_op(monkeypatch):
    monkeypatch.setenv("MPCHECK_DISABLE", "1")
    model = Split(hop=False)
    original_call = nn.Module.__call__
    with mpcheck.debug(model) as dbg:
        assert nn.Module.__call__ is original_call
        assert torch._C._len_torch_function_stack() == 0
    assert dbg.disabled and dbg.findings == []


def test_decorator_form():
    model = Split(hop=False)

    @mpcheck.debug(model, report=None)
    def step():
        return model(torch.randn(2, 8))

    with pytest.raises(DeviceMismatchError):
        step()
    with pytest.raises(DeviceMismatchError):
        step()  # a fresh session each call


def test_the_error_raised_is_mpcheck_DeviceMismatchError():
    model = Split(hop=False)
    with pytest.raises(mpcheck.DeviceMismatchError) as raised:
        with mpcheck.debug(model, report=None):
            model(torch.randn(2, 8))
    assert mpcheck.DeviceMismatchError is DeviceMismatchError and type(raised.value) is DeviceMismatchError
    assert "DeviceMismatchError" in mpcheck.__all__


def test_0_1_0s_import_path_still_works_and_says_it_is_deprecated():
    import importlib
    import sys

    sys.modules.pop("mpcheck.runtime.core", None)
    with pytest.warns(DeprecationWarning, match="mpcheck.DeviceMismatchError"):
        core = importlib.import_module("mpcheck.runtime.core")
    assert core.DeviceMismatchError is mpcheck.DeviceMismatchError


def test_import_mpcheck_still_does_not_import_torch():
    import subprocess
    import sys

    script = (
        "import sys, mpcheck\n"
        "assert 'torch' not in sys.modules, 'import mpcheck imported torch'\n"
        "assert issubclass(mpcheck.DeviceMismatchError, RuntimeError)\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def _patched_state():
    """Everything a session installs, and the global hook tables it must leave as it found them."""
    import warnings

    import torch._dynamo  # imported, so that the session turns compile off and must turn it back
    from torch.nn.modules import module as module_globals
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

    return {
        "Module.__call__": nn.Module.__call__,
        "Module.to": nn.Module.to,
        "Module.cuda": nn.Module.cuda,
        "Module._apply": nn.Module._apply,
        "Module.zero_grad": nn.Module.zero_grad,
        "Optimizer.zero_grad": torch.optim.Optimizer.zero_grad,
        "DataParallel.__init__": nn.DataParallel.__init__,
        "DistributedDataParallel.__init__": nn.parallel.DistributedDataParallel.__init__,
        "torch.compile": torch.compile,
        "torch.load": torch.load,
        "dynamo disable": torch._dynamo.config.disable,
        "optimizer post-hooks": len(_global_optimizer_post_hooks),
        "optimizer pre-hooks": len(_global_optimizer_pre_hooks),
        "module forward pre-hooks": len(module_globals._global_forward_pre_hooks),
        "module forward hooks": len(module_globals._global_forward_hooks),
        "function modes": torch._C._len_torch_function_stack(),
        "dispatch modes": torch._C._len_torch_dispatch_stack(),
        "warnings.showwarning": warnings.showwarning,
    }


def _changed(before, now):
    return {key for key in before if before[key] != now[key]}


@pytest.mark.parametrize("strict", [False, True])
def test_everything_is_removed_on_exit_and_on_exceptions(strict):
    before = _patched_state()
    with mpcheck.debug(report=None, strict=strict):
        installed = _changed(before, _patched_state())
    # what the session installs, so that the checks below compare something it changed
    expected = {"Module.__call__", "Module.zero_grad", "Optimizer.zero_grad", "torch.compile", "torch.load"}
    expected |= {"dynamo disable"}
    expected |= {"optimizer pre-hooks", "function modes", "warnings.showwarning"}
    assert expected <= installed
    assert ("dispatch modes" in installed) == strict
    assert _changed(before, _patched_state()) == set()
    model = Split(hop=False)
    with pytest.raises(DeviceMismatchError):
        with mpcheck.debug(model, report=None, strict=strict):
            model(torch.randn(2, 8))
    assert _changed(before, _patched_state()) == set()
    with pytest.raises(KeyError):
        with mpcheck.debug(report=None, strict=strict):
            raise KeyError("user error")
    assert _changed(before, _patched_state()) == set()


def test_nested_sessions_are_refused_clearly():
    with mpcheck.debug(report=None):
        with pytest.raises(RuntimeError, match="already active"):
            with mpcheck.debug(report=None):
                pass


def _train(steps, seed=0, use_debug=False, strict=False):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(steps)]
    losses = []

    def loop():
        for x, y in data:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.detach())

    if use_debug:
        with mpcheck.debug(model, report=None, strict=strict) as dbg:
            loop()
        assert dbg.findings == []
        assert len(dbg.ledger.steps) == steps  # optimizer.step() ends each step
    else:
        loop()
    return torch.stack(losses), [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("strict", [False, True])
def test_results_are_bit_identical_with_and_without_the_debug_mode(strict):
    plain_losses, plain_params = _train(5)
    dbg_losses, dbg_params = _train(5, use_debug=True, strict=strict)
    assert torch.equal(plain_losses, dbg_losses)
    assert all(torch.equal(a, b) for a, b in zip(plain_params, dbg_params))


def test_no_tensor_is_kept_alive_and_tables_stay_flat_over_many_steps():
    model = Split(hop=True)
    refs = []
    with mpcheck.debug(model, report=None) as dbg:
        for i in range(300):
            x = torch.randn(4, 8)
            model(x)
            const = torch.full((8,), float(i))
            const.to("meta")
            refs.append(weakref.ref(x))
            dbg.step()
        checker = dbg.session.checker
        sizes = (len(checker._moves), len(checker._arrivals), len(checker.ledger.totals))
    del x, const
    assert all(r() is None for r in refs)
    assert sizes[0] < 50 and sizes[1] < 50 and sizes[2] <= 4
    assert len(dbg.ledger.events) == 0  # events are kept only for a trace


def test_activation_checkpointing_and_autocast_run_clean():
    from torch.utils.checkpoint import checkpoint

    block = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    x = torch.randn(4, 8, requires_grad=True)
    with mpcheck.debug(block, report=None) as dbg:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = checkpoint(block, x, use_reentrant=False)
        y.float().sum().backward()
    assert dbg.findings == []
    assert x.grad is not None


# In a child process, each half with a time limit: gloo's threads wait in C++, where nothing in this
# process could stop them, so a process group that never starts would hang the whole suite (CI once
# waited 90 minutes on this test). The plain run first: if gloo cannot start a one-process group on
# this machine, that is the machine's, and the test skips; if the plain run passes and the debug mode's
# does not finish, that is mpcheck's, and the test fails with the child's stacks.
DDP_ON_ONE_PROCESS_GLOO = """
import faulthandler, json, sys
import torch, torch.distributed as dist
from torch import nn
import mpcheck

faulthandler.dump_traceback_later(100, exit=True)  # a hang ends with every thread's stack on stderr
store, mode = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
if mode == "plain":
    nn.parallel.DistributedDataParallel(model, device_ids=None)(torch.randn(4, 8)).sum().backward()
    findings = []
else:
    with mpcheck.debug(model, report=None) as dbg:
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=None)
        ddp(torch.randn(4, 8)).sum().backward()
    findings = [f.code for f in dbg.findings]
dist.destroy_process_group()
print(json.dumps({"findings": findings, "grad": model[0].weight.grad is not None}))
"""


def _ddp_child(tmp_path, mode):
    import json
    import subprocess
    import sys

    store = tmp_path / f"store-{mode}"
    try:
        r = subprocess.run(
            [sys.executable, "-c", DDP_ON_ONE_PROCESS_GLOO, str(store), mode],
            capture_output=True,
            text=True,
            timeout=150,
        )
    except subprocess.TimeoutExpired:
        return None, "no answer in 150 s"
    if r.returncode != 0:
        return None, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), ""


def test_ddp_with_device_ids_none_on_a_one_process_gloo_group(tmp_path):
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed not available")
    plain, why = _ddp_child(tmp_path, "plain")
    if plain is None:
        pytest.skip(f"gloo does not run a one-process DDP step on this machine, without mpcheck: {why}")
    debugged, why = _ddp_child(tmp_path, "debug")
    assert debugged is not None, f"the same DDP step under mpcheck.debug did not finish: {why}"
    assert debugged == {"findings": [], "grad": True}


def test_torch_compile_degrades_with_a_clear_message(capsys):
    lin = nn.Linear(4, 4)
    with mpcheck.debug(report=None) as dbg:
        compiled = torch.compile(lin)
        out = compiled(torch.randn(2, 4))
    assert out.shape == (2, 4)
    assert any("torch.compile is turned off" in n for n in dbg.session.notes)
    assert "torch.compile is turned off" in capsys.readouterr().err
    from torch._dynamo import config

    assert config.disable is False  # restored


def test_strict_mode_sees_a_mismatch_in_backward():
    meta_scale = torch.ones(8, device="meta")

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * meta_scale  # a gradient on the wrong device

    x = torch.ones(8, requires_grad=True)
    with mpcheck.debug(report=None, strict=True, on_mismatch="move") as dbg:
        y = Scale.apply(x)
        try:
            y.sum().backward()
        except Exception:
            pass
    assert any(f.code == "MP001" and "backward" in f.message for f in dbg.findings)


def test_optimizer_step_runs_outside_the_mode_and_the_mode_comes_back():
    lin = nn.Linear(4, 4)
    depth_in_step = []

    class Broken(torch.optim.SGD):
        def step(self, closure=None):
            raise ValueError("broken optimizer")

    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    # An instance's pre-hooks run after the global ones (mpcheck's): inside the library's step.
    opt.register_step_pre_hook(lambda *_: depth_in_step.append(torch._C._len_torch_function_stack()))
    with mpcheck.debug(lin, report=None) as dbg:
        lin(torch.randn(2, 4)).sum().backward()
        opt.step()
        assert torch._C._len_torch_function_stack() == 1  # back after the step
        with pytest.raises(ValueError):
            Broken(lin.parameters(), lr=0.1).step()
        assert torch._C._len_torch_function_stack() == 1  # back after a step that raised
        assert len(dbg.ledger.steps) == 1
    assert depth_in_step == [0]
    assert torch._C._len_torch_function_stack() == 0


def test_a_step_that_calls_another_step_counts_once():
    # PyTorch wraps each optimizer class's own step() with the hook wrapper once an instance
    # exists: a subclass's step() calling super().step() runs the step hooks twice.
    lin = nn.Linear(4, 4)
    torch.optim.SGD(lin.parameters(), lr=0.1)  # SGD.step is wrapped from here on
    assert getattr(torch.optim.SGD.step, "hooked", False)
    depth_after_inner = []

    class Sub(torch.optim.SGD):
        def step(self, closure=None):
            out = super().step(closure)
            depth_after_inner.append(torch._C._len_torch_function_stack())
            return out

    class BrokenSub(torch.optim.SGD):
        def step(self, closure=None):
            super().step(closure)
            raise ValueError("broken after the inner step")

    opt = Sub(lin.parameters(), lr=0.1)
    with mpcheck.debug(lin, report=None) as dbg:
        for _ in range(3):
            lin(torch.randn(2, 4)).sum().backward()
            opt.step()
            assert torch._C._len_torch_function_stack() == 1
        assert len(dbg.ledger.steps) == 3
        with pytest.raises(ValueError):
            BrokenSub(lin.parameters(), lr=0.1).step()
        steps_after_broken = len(dbg.ledger.steps)
        opt.step()  # a step that raised leaves nothing behind: the next one counts once
        assert len(dbg.ledger.steps) == steps_after_broken + 1
    # A step the user wrote is checked, and the inner (library) step's end changes nothing: the rest of the
    # outer step still runs under the one mode (test_user_optimizer.py: what that finds).
    assert depth_after_inner == [1, 1, 1, 1]


@pytest.mark.parametrize("strict", [False, True])
def test_threads_the_program_starts_are_checked_as_its_own(strict):
    """The debug mode's modes are entered in a thread the program starts and in a thread pool's task
    (capture/threads.py): a mismatch there is found at the user's line, a transfer there is recorded."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    broken, split = Split(hop=False), Split(hop=True)
    with mpcheck.debug(broken, on_mismatch="move", report=None, strict=strict) as dbg:
        t = threading.Thread(target=lambda: broken(torch.randn(2, 8)))
        t.start()
        t.join()
        with ThreadPoolExecutor(1) as pool:
            pool.submit(broken, torch.randn(2, 8)).result()
            pool.submit(split, torch.randn(4, 8)).result()
    (f,) = [f for f in dbg.findings if f.code == "MP001"]
    assert f.extra["count"] == 2 and f.modules == ("model.second",)
    assert f.path == shown_path(__file__) and f.line == _line(Split.forward, "# entry")
    hops = [key for key in dbg.ledger.by_site() if key[0].line == _line(Split.forward, "# hop")]
    assert [key[1:] for key in hops] == [("cpu", "meta", "forward")]


def test_a_sparse_tensors_transfer_counts_its_values_and_indices():
    # Its layout has no strides: reading it as a dense tensor raised inside the user's `.to` (CSR),
    # or counted the zeros it does not hold (COO).
    dense = torch.eye(64)
    with mpcheck.debug(report=None, on_mismatch="raise") as dbg:
        dense.to_sparse().to("meta")
        dense.to_sparse_csr().to("meta")
        dbg.step()
    assert dbg.findings == []
    agg = dbg.ledger.by_pair()[("cpu", "meta", "forward")]
    coo = 64 * 4 + 2 * 64 * 8  # values, indices
    csr = 64 * 4 + 65 * 8 + 64 * 8  # values, row pointers, column indices
    assert (agg.count, agg.bytes) == (2, coo + csr)


def test_a_member_replaced_on_another_device_makes_placements_read_again_and_one_on_its_own_does_not():
    lin = nn.Linear(4, 4)
    lin.register_buffer("cache", torch.zeros(4))
    originals = (nn.Module.__setattr__, nn.Module.register_parameter, nn.Module.register_buffer)
    with mpcheck.debug(lin, report=None) as dbg:
        checker = dbg.session.checker
        assert nn.Module.__setattr__ is not originals[0]
        lin(torch.randn(2, 4))
        epoch = checker.placement_epoch
        lin.cache = torch.ones(4)  # a buffer refreshed where it was
        lin.register_buffer("cache", torch.ones(4))
        lin.note = torch.ones(4, device="meta")  # a plain attribute: not where the module lives
        lin.weight = nn.Parameter(lin.weight.detach())  # a parameter replaced on its own device
        assert checker.placement_epoch == epoch
        lin.weight = nn.Parameter(lin.weight.detach().to("meta"))
        assert checker.placement_epoch > epoch
        epoch = checker.placement_epoch
        lin.register_buffer("cache", torch.ones(4, device="meta"))
        assert checker.placement_epoch > epoch
    assert (nn.Module.__setattr__, nn.Module.register_parameter, nn.Module.register_buffer) == originals
