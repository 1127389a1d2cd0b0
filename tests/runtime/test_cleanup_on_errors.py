"""Do no harm: every entry point leaves torch as it found it, whatever stops it.

`mpcheck run`, `with mpcheck.debug`, `with mpcheck.dryrun` and `mpcheck dryrun`, each stopped by the
program's own exception (an error, Ctrl-C, sys.exit, mpcheck's DeviceMismatchError), by a bad setting in
the environment, by a failure while the session installs itself, or by a report that cannot be written:
afterwards no function or dispatch mode is left on the stack, no hook in torch's global tables, and every
attribute of torch that the debug mode or the virtual GPUs replace is the original again.
"""

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch import nn

import mpcheck
from mpcheck.runtime.capture import session as session_module
from mpcheck.runtime.checks.findings import DeviceMismatchError
from mpcheck.runtime.commands import dryrun as dryrun_command
from mpcheck.runtime.commands import run as run_command

# Namespaces whose attributes the debug mode or the virtual GPUs replace while they run.
_NAMESPACES = {
    "torch": torch,
    "torch.Tensor": torch.Tensor,
    "torch.cuda": torch.cuda,
    "torch.nn.Module": nn.Module,
    "torch.nn.Parameter": nn.Parameter,
    "torch.nn.functional": nn.functional,
    "torch.optim.Optimizer": torch.optim.Optimizer,
    "torch.autograd": torch.autograd,
    "torch.nn.DataParallel": nn.DataParallel,
    "torch.nn.parallel.DistributedDataParallel": nn.parallel.DistributedDataParallel,
    "torch.utils.data.DataLoader": torch.utils.data.DataLoader,
    "torch.backends.cudnn": torch.backends.cudnn,
    "threading.Thread": threading.Thread,
    "ThreadPoolExecutor": ThreadPoolExecutor,
}


def _state():
    """What a session or the virtual GPUs may change: each namespace's attributes (by identity), the
    mode stacks, torch's global hook tables and warnings.showwarning."""
    import torch._dynamo  # imported, so that a session turns compile off and must turn it back on
    from torch.nn.modules import module as module_globals
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

    state = {(name, key): value for name, ns in _NAMESPACES.items() for key, value in list(vars(ns).items())}
    state.update(
        {
            "function modes": torch._C._len_torch_function_stack(),
            "dispatch modes": torch._C._len_torch_dispatch_stack(),
            "optimizer pre-hooks": len(_global_optimizer_pre_hooks),
            "optimizer post-hooks": len(_global_optimizer_post_hooks),
            "module forward pre-hooks": len(module_globals._global_forward_pre_hooks),
            "module forward hooks": len(module_globals._global_forward_hooks),
            "dynamo disable": torch._dynamo.config.disable,
            "warnings.showwarning": warnings.showwarning,
            "active session": session_module.active(),
        }
    )
    return state


def _changed(before, after):
    return sorted(str(k) for k in before.keys() | after.keys() if before.get(k, _MISSING) is not after.get(k, _MISSING))


_MISSING = object()


@pytest.fixture
def unchanged():
    """Asserts, at the test's end, that torch is as it was at its start."""
    _state()  # the imports it makes happen before the first snapshot
    if torch.cuda.is_available():  # torch's own lazy CUDA set-up (generators, the device count) happens once
        torch.cuda.init()
        torch.cuda.device_count()
    before = _state()
    yield
    assert _changed(before, _state()) == []


PROGRAMS = {
    "error": "raise ValueError('boom')",
    "ctrl-c": "raise KeyboardInterrupt",
    "sys.exit": "import sys; sys.exit(3)",
    "mismatch": "import torch; torch.nn.Linear(4, 4)(torch.randn(2, 4, device='meta'))",
}


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4, device="meta")

    def forward(self, x):
        return self.second(self.first(x))


# -- mpcheck run ------------------------------------------------------------------------------
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_mpcheck_run_removes_everything_when_the_program_stops(monkeypatch, unchanged, capsys, program, strict):
    monkeypatch.setattr(run_command, "cuda_available", lambda: True)
    status = run_command.main([*(["--strict"] if strict else []), "-c", PROGRAMS[program]])
    assert status == {"error": 1, "ctrl-c": 130, "sys.exit": 3, "mismatch": 1}[program]


@pytest.mark.parametrize(("env", "value"), [("MPCHECK_RECHECK_EVERY", "often"), ("MPCHECK_REPEAT_MIN_BYTES", "-1")])
def test_mpcheck_run_with_a_bad_setting_installs_nothing(monkeypatch, unchanged, capsys, env, value):
    monkeypatch.setattr(run_command, "cuda_available", lambda: True)
    monkeypatch.setenv(env, value)
    assert run_command.main(["-c", "pass"]) == 2
    assert env in capsys.readouterr().err


# -- with mpcheck.debug ------------------------------------------------------------------------
@pytest.mark.parametrize("strict", [False, True])
def test_debug_removes_everything_when_its_block_raises(unchanged, strict):
    model = Split()
    with pytest.raises(DeviceMismatchError):
        with mpcheck.debug(model, report=None, strict=strict):
            model(torch.randn(2, 4))
    with pytest.raises(KeyboardInterrupt):
        with mpcheck.debug(report=None, strict=strict):
            raise KeyboardInterrupt


def _failing_start(monkeypatch):
    """Make the session's start fail after it has installed its hooks and patches, before its modes."""

    def refuse(self, mode):
        raise RuntimeError("installation failed")

    monkeypatch.setattr(session_module.Session, "_step_outside_mode", refuse)


@pytest.mark.parametrize("strict", [False, True])
def test_debug_removes_what_it_installed_when_its_start_fails(monkeypatch, unchanged, strict):
    _failing_start(monkeypatch)
    with pytest.raises(RuntimeError, match="installation failed"):
        with mpcheck.debug(report=None, strict=strict):
            raise AssertionError("the block must not run")


@pytest.mark.parametrize(("env", "value"), [("MPCHECK_RECHECK_EVERY", "often"), ("MPCHECK_REPEAT_MIN_BYTES", "x")])
def test_debug_with_a_bad_setting_installs_nothing(monkeypatch, unchanged, env, value):
    monkeypatch.setenv(env, value)
    with pytest.raises(ValueError, match=env):
        with mpcheck.debug(report=None):
            raise AssertionError("the block must not run")


def test_debug_turned_off_by_the_environment_installs_nothing(monkeypatch, unchanged):
    monkeypatch.setenv("MPCHECK_DISABLE", "1")
    with pytest.raises(KeyError):
        with mpcheck.debug(report=None) as dbg:
            assert dbg.disabled and torch._C._len_torch_function_stack() == 0
            raise KeyError("user error")


def test_debug_whose_report_cannot_be_written_has_removed_everything(unchanged, tmp_path):
    with pytest.raises(OSError):
        with mpcheck.debug(report=None, html=str(tmp_path / "no" / "such" / "folder" / "page.html")):
            torch.randn(2) + 1


# -- the dry run -------------------------------------------------------------------------------
def test_dryrun_removes_everything_when_its_block_raises(unchanged):
    with pytest.raises(ValueError, match="boom"):
        with mpcheck.dryrun(2, report=None):
            assert torch.cuda.device_count() == 2
            raise ValueError("boom")
    with pytest.raises(DeviceMismatchError):
        with mpcheck.dryrun(2, report=None, on_mismatch="raise"):
            torch.randn(2, device="cuda:0") + torch.randn(2, device="cuda:1")


def test_dryrun_removes_the_virtual_gpus_when_the_session_cannot_start(monkeypatch, unchanged):
    _failing_start(monkeypatch)
    with pytest.raises(RuntimeError, match="installation failed"):
        with mpcheck.dryrun(2, report=None):
            raise AssertionError("the block must not run")


def test_dryrun_with_a_bad_setting_removes_the_virtual_gpus(monkeypatch, unchanged):
    monkeypatch.setenv("MPCHECK_REPEAT_MIN_BYTES", "lots")
    with pytest.raises(ValueError, match="MPCHECK_REPEAT_MIN_BYTES"):
        with mpcheck.dryrun(2, report=None):
            raise AssertionError("the block must not run")


def test_dryrun_whose_report_cannot_be_written_has_removed_everything(unchanged, tmp_path):
    with pytest.raises(OSError):
        with mpcheck.dryrun(2, report=None, html=str(tmp_path / "no" / "such" / "folder" / "page.html")):
            torch.randn(2, device="cuda:0") + 1


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_mpcheck_dryrun_removes_everything_when_the_program_stops(unchanged, capsys, tmp_path, program):
    code = PROGRAMS[program].replace("device='meta'", "device='cuda:1'") if program == "mismatch" else PROGRAMS[program]
    status = dryrun_command.main(["--on-mismatch", "raise", "-o", str(tmp_path / "r.txt"), "-c", code])
    assert status == {"error": 1, "ctrl-c": 130, "sys.exit": 3, "mismatch": 1}[program]


def test_mpcheck_dryrun_with_a_bad_setting_installs_nothing(monkeypatch, unchanged, capsys):
    monkeypatch.setenv("MPCHECK_RECHECK_EVERY", "often")
    assert dryrun_command.main(["-c", "pass"]) == 2
    assert "MPCHECK_RECHECK_EVERY" in capsys.readouterr().err


# -- threads the program starts ----------------------------------------------------------------
def _stacks():
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("face", ["debug", "debug strict", "dryrun"])
def test_threads_that_raise_leave_no_mode_behind(monkeypatch, unchanged, face):
    """A thread and a thread pool task the program starts under the session (capture/threads.py), each
    stopped by its own error: the modes entered for them are gone from their threads when they end."""
    device = "cuda:1" if face == "dryrun" else "cpu"
    in_excepthook = []
    monkeypatch.setattr(threading, "excepthook", lambda args: in_excepthook.append(_stacks()))
    entered = []

    def fail():
        entered.append(_stacks())
        torch.ones(2).to(device)
        raise ValueError("the thread's own error")

    with ThreadPoolExecutor(1) as pool:
        pool.submit(_stacks).result()  # its worker thread exists before the session
        if face == "dryrun":
            session = mpcheck.dryrun(2, report=None)
        else:
            session = mpcheck.debug(report=None, strict=face == "debug strict")
        with session:
            t = threading.Thread(target=fail)
            t.start()
            t.join()
            with pytest.raises(ValueError, match="own error"):
                pool.submit(fail).result()
        assert pool.submit(_stacks).result() == (0, 0)
    assert entered[0] == entered[1] and entered[0][0] >= 1 and (entered[0][1] >= 1) == (face != "debug")
    assert in_excepthook == [(0, 0)]  # python reports the thread's exception after its run() has ended


def test_a_thread_running_past_the_dry_run_leaves_nothing_when_it_ends(unchanged):
    moved, go = threading.Event(), threading.Event()
    after = []

    def work():
        torch.ones(2).to("cuda:1")
        moved.set()
        go.wait(30)
        after.append(str((torch.ones(2) * 2).device))

    with mpcheck.dryrun(2, report=None):
        t = threading.Thread(target=work)
        t.start()
        assert moved.wait(30)
    go.set()
    t.join(30)
    assert after == ["cpu"]
