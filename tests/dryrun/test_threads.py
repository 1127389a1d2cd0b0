"""Threads the program starts run on the virtual GPUs too (mpcheck/runtime/capture/threads.py).

PyTorch keeps its mode stacks per thread and a new thread starts with none: before, a `.to("cuda:1")` in a
`threading.Thread` or a `ThreadPoolExecutor` task reached real CUDA (on a CPU build: "Torch not compiled
with CUDA", or a dry-run limit), and what the thread did was neither checked nor counted. Now the same
code is seen in a thread as in the main thread: the same findings at the same lines, the same transfers,
the same memory; a correct threaded program stays silent; and the session leaves nothing behind in the
threads, those still running at its end included.
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from dryrun_helpers import codes_at
from torch import nn

import mpcheck

# One piece of work, with a bug (the second stage gets the first stage's output on cuda:0), run in the
# main thread, in a thread, or as thread pool tasks.
BUGGY = """
import threading
from concurrent.futures import ThreadPoolExecutor
import torch
from torch import nn

class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 64).to("cuda:0")
        self.b = nn.Linear(64, 64).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x))  # <- entry

model = Two()

def work(i):
    x = torch.randn(8, 64).to("cuda:0")  # <- move
    model(x).sum().backward()

RUN
"""

RUNNERS = {
    "main": "for i in range(2):\n    work(i)",
    "thread": "for i in range(2):\n    t = threading.Thread(target=work, args=(i,))\n    t.start()\n    t.join()",
    "pool": "with ThreadPoolExecutor(2) as pool:\n    list(pool.map(work, range(2)))",
}


def _seen(report, s):
    """What a report says about the program: findings, the transfers at the move's line, memory."""
    moves = [
        (t["src"], t["dst"], t["count"], t["bytes"])
        for t in report["transfers"]["by_site"]
        if t["site"].endswith(f"{s.path.name}:{s.line('move')}")
    ]
    grads = {dev: m["grads"] for dev, m in report["memory"].items()}
    return codes_at(report), moves, grads


def test_the_same_bug_in_a_thread_or_a_thread_pool_is_reported_as_in_the_main_thread(script, dryrun_cli):
    seen = {}
    for name, run in RUNNERS.items():
        s = script(BUGGY.replace("RUN", run), name=f"in_{name}.py")
        status, report, err = dryrun_cli(s, "--gpus", "2")
        assert report["stopped"] is None and report["limits"] == [], err
        assert status == 1, err  # an error-level finding
        assert codes_at(report) == [("MP001", s.line("entry"))], name
        seen[name] = _seen(report, s)
    assert seen["thread"] == seen["main"]
    # The pool's two workers may run their steps at once: the same findings and moves, and gradients at their peak
    # at least those of one step at a time (two steps' at most), as the threads happened to interleave.
    assert seen["pool"][:2] == seen["main"][:2]
    assert all(seen["main"][2][d] <= seen["pool"][2][d] <= 2 * seen["main"][2][d] for d in seen["main"][2])
    codes, moves, grads = seen["main"]
    assert moves and moves[0][:2] == ("cpu", "cuda:0")
    assert grads["cuda:0"] > 0 and grads["cuda:1"] > 0  # backward ran in the thread, on the virtual GPUs


CORRECT = """
import threading
from concurrent.futures import ThreadPoolExecutor
import torch
from torch import nn

class Pipe(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 32).to("cuda:0")
        self.b = nn.Linear(32, 32).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))  # <- hops

models = [Pipe() for _ in range(4)]
opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
devices = {}
errors = []

def train(i):
    try:
        for _ in range(3):
            loss = models[i](torch.randn(4, 32)).pow(2).mean()
            loss.backward()
            opts[i].step()
            opts[i].zero_grad()
        devices[i] = (str(loss.device), models[i].a.weight.grad is None, torch.cuda.current_device())
        torch.cuda.set_device(1)  # this thread's current device: not the other threads'
        devices[i] += (str(torch.ones(1).cuda().device),)  # <- cuda
        torch.cuda.set_device(0)  # a pool's worker runs the next task with it
    except BaseException as e:
        errors.append(e)
        raise

threads = [threading.Thread(target=train, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
with ThreadPoolExecutor(2) as pool:
    list(pool.map(train, [2, 3]))
for t in threads:
    t.join()
assert not errors, errors
assert devices == {i: ("cuda:1", True, 0, "cuda:1") for i in range(4)}, devices
assert torch.cuda.current_device() == 0
print("trained")
"""


def test_a_correct_program_training_in_threads_at_once_is_silent(script, dryrun_cli):
    s = script(CORRECT)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0 and report["stopped"] is None, err
    assert report["findings"] == [] and report["limits"] == []
    # Three steps of four models, each a move in, a hop forward and its gradient's hop back; one .cuda() each.
    hops, cuda = f"{s.path.name}:{s.line('hops')}", f"{s.path.name}:{s.line('cuda')}"
    assert sorted(
        (t["site"].rpartition("/")[2], t["src"], t["dst"], t["phase"], t["count"])
        for t in report["transfers"]["by_site"]
    ) == [
        (hops, "cpu", "cuda:0", "forward", 12),
        (hops, "cuda:0", "cuda:1", "forward", 12),
        (hops, "cuda:1", "cuda:0", "backward", 12),
        (cuda, "cpu", "cuda:1", "forward", 4),
    ]
    # The four models' parameters and the SGD steps' gradients, all on the virtual GPUs.
    assert report["memory"]["cuda:0"]["params"] == report["memory"]["cuda:1"]["params"] == 4 * (32 * 32 + 32) * 4


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dry_run_limit_in_a_thread_is_listed_and_the_program_goes_on(script, dryrun_cli):
    s = script("""
import threading
import torch

def work():
    x = torch.ones(2, device="cuda:1")
    torch.cuda.CUDAGraph()  # <- graph
t = threading.Thread(target=work)
t.start()
t.join()
print("the main thread goes on", torch.ones(2, device="cuda:0").device)
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0 and report["stopped"] is None, err
    (limit,) = report["limits"]
    assert limit["site"].endswith(f"{s.path.name}:{s.line('graph')}")
    assert limit["message"].startswith("in a thread: CUDA graphs is beyond the dry run")


def _stacks():
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


def test_a_pool_started_before_the_session_runs_its_tasks_under_it_and_keeps_nothing():
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(_stacks).result() == (0, 0)  # the worker thread exists before the session

        def move():
            return str(torch.ones(2).to("cuda:1").device), _stacks()

        def fail():
            torch.ones(2).to("cuda:1")
            raise ValueError("the task's own error")

        with mpcheck.dryrun(2, report=None) as dr:
            device, stacks = pool.submit(move).result()
            with pytest.raises(ValueError):
                pool.submit(fail).result()
        assert device == "cuda:1" and stacks[0] >= 2 and stacks[1] >= 1
        assert pool.submit(_stacks).result() == (0, 0)  # popped after each task, the failed one too
        assert pool.submit(lambda: str(torch.ones(2).device)).result() == "cpu"
    assert dr.memory["cuda:1"]["peak_allocated"] > 0


def test_a_thread_still_running_at_the_end_goes_on_without_the_session():
    go, done = threading.Event(), threading.Event()
    seen = {}

    def work():
        seen["during"] = str(torch.ones(2).to("cuda:1").device)
        go.wait(30)
        # The session is over: its modes, still on this thread's stack, pass every call through.
        layer = nn.Linear(4, 4)
        seen["after"] = str(layer(torch.ones(1, 4)).device)
        seen["stacks"] = _stacks()
        done.set()

    with mpcheck.dryrun(2, report=None) as dr:
        t = threading.Thread(target=work)
        t.start()
        # A daemon thread, which python does not wait for either (a progress bar's monitor): not in the note.
        background = threading.Thread(target=go.wait, args=(30,), daemon=True)
        background.start()
        while "during" not in seen and t.is_alive():
            t.join(0.01)
    findings, transfers = len(dr.findings), dr.ledger.total().count
    notes = [n for n in dr.session.notes if "still ran when the run ended" in n]
    assert notes == [
        "1 of the program's threads (or thread pool tasks) still ran when the run ended: what it did after that "
        "is not covered"
    ]
    go.set()
    t.join(30)
    background.join(30)
    assert done.is_set()
    assert seen["during"] == "cuda:1" and seen["after"] == "cpu"
    assert seen["stacks"][0] >= 2  # still held by the thread until its run ends, retired
    assert len(dr.findings) == findings
    assert transfers == 1 and dr.ledger.total().count == transfers
    assert _stacks() == (0, 0)


def test_threads_started_before_the_session_are_not_entered():
    go = threading.Event()
    seen = {}

    def work():
        go.wait(30)
        seen["stacks"] = _stacks()

    t = threading.Thread(target=work)
    t.start()
    with mpcheck.dryrun(2, report=None):
        go.set()
        t.join(30)
    assert seen["stacks"] == (0, 0)


def test_parallel_apply_runs_its_replicas_on_their_virtual_gpus(script, dryrun_cli):
    """torch.nn.parallel.parallel_apply runs each module in a thread of its own, all frames PyTorch's:
    a finding there names the user's line that called it."""
    s = script("""
import torch
from torch import nn
from torch.nn.parallel import parallel_apply

mods = [nn.Linear(8, 8).to("cuda:0"), nn.Linear(8, 8).to("cuda:1")]
ins = [torch.randn(2, 8, device="cuda:0"), torch.randn(2, 8, device="cuda:0")]  # the second on the wrong GPU
outs = parallel_apply(mods, ins, devices=[0, 1])  # <- apply
assert [str(o.device) for o in outs] == ["cuda:0", "cuda:1"], [o.device for o in outs]
""")
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert report["stopped"] is None, err
    assert codes_at(report) == [("MP001", s.line("apply"))]
