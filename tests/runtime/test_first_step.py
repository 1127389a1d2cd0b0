"""The one-time work of a debug session's first step, made cheap, still gives what it gave:
the memory table (parameters, gradients, optimizer states per device) and module placements
(a container's device is its children's when they agree)."""

import torch
from torch import nn

import mpcheck
from mpcheck.runtime.checks.checker import Checker


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.body = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.emb.weight  # tied: counted once

    def forward(self, idx):
        return self.head(self.body(self.emb(idx)))


def _bytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)


def test_memory_table_counts_each_parameter_gradient_and_state_once():
    torch.manual_seed(0)
    model = Tied()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 10, (2, 5))
    with mpcheck.debug(model, report=None) as dbg:
        model(idx).sum().backward()
        opt.step()
    params = list(model.parameters())  # unique: the tied weight once
    assert len(params) == 5  # emb (= head), Linear weight and bias, LayerNorm weight and bias
    states = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    assert len(states) == 3 * len(params)  # step, exp_avg, exp_avg_sq
    mem = dbg.ledger.memory["cpu"]
    assert mem["params"] == _bytes(params)
    assert mem["grads"] == _bytes(p.grad for p in params)
    assert mem["optimizer_state"] == _bytes(states)


def test_memory_table_splits_by_device_where_devices_are_not_plain(labels):
    # Devices answered per tensor (here by storage labels, as under the dry run): each tensor's own.
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    for p in model[1].parameters():
        labels.label(p, "cuda:1")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with mpcheck.debug(model, report=None, devices=labels) as dbg:
        with dbg.session.checker.suspend():
            model(torch.ones(3, 4)).sum().backward()
        opt.step()
    mem = dbg.ledger.memory
    assert mem["cuda:1"]["params"] == _bytes(model[1].parameters())
    assert mem["cpu"]["params"] == _bytes(model[0].parameters())
    # gradients and momentum buffers are fresh storages, unlabelled: on "cpu" here
    assert mem["cpu"]["grads"] == _bytes(p.grad for p in model.parameters())
    assert mem["cpu"]["optimizer_state"] == _bytes(s["momentum_buffer"] for s in opt.state.values())


def test_module_placement_of_containers_comes_from_their_children(labels):
    ck = Checker(labels)
    inner = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))  # children agree: the container is there
    mixed = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))  # children disagree: no one device
    own = nn.Linear(2, 2)  # own weights decide, whatever its children
    own.child = nn.Linear(2, 2)
    root = nn.ModuleDict({"inner": inner, "mixed": mixed, "own": own, "empty": nn.Identity()})
    for t in [*inner.parameters(), *mixed[1].parameters(), *own.child.parameters()]:
        labels.label(t, "cuda:1")
    assert ck.module_device(root) is None
    assert ck.module_device(inner) == "cuda:1"
    assert ck.module_device(inner[0]) == "cuda:1"
    assert ck.module_device(mixed) is None
    assert ck.module_device(mixed[0]) == "cpu"
    assert ck.module_device(own) == "cpu"
    assert ck.module_device(own.child) == "cuda:1"
    assert ck.module_device(root["empty"]) is None
    # a placement change is seen once placements are invalidated (Module._apply, load_state_dict)
    for t in mixed[0].parameters():
        labels.label(t, "cuda:1")
    assert ck.module_device(mixed) is None  # remembered until then
    ck.invalidate_placement()
    assert ck.module_device(mixed) == "cuda:1"
    assert ck.module_device(root) is None  # the root's own children still disagree (own is on cpu)


def test_one_walk_places_every_module_reading_each_weight_once(labels):
    # The first step asks the placement of every module, root first: one walk answers all of them,
    # not one walk per container over its whole subtree (root, then each stage, then each block).
    reads = []
    device_of = labels.device_of
    labels.device_of = lambda t: reads.append(t) or device_of(t)
    ck = Checker(labels)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)) for _ in range(4)])
    weights = [*model.parameters(), *model.buffers()]
    assert ck.module_device(model) == "cpu"
    assert len(reads) == len(weights) == 16
    assert all(ck.module_device(m) == "cpu" for m in model.modules())
    assert len(reads) == len(weights)  # every other module placed by that walk


def test_memory_snapshot_makes_no_call_through_the_checking_mode(monkeypatch):
    # Each `.numel()` / `.grad` / `.device` read through the function mode costs a __torch_function__
    # call: ~3 a tensor, milliseconds in a first step. The snapshot reads them with the modes off.
    from mpcheck.runtime.capture import session as session_module
    from mpcheck.runtime.capture.mode import CheckingMode

    calls = []
    orig = CheckingMode.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        calls.append(func)
        return orig(self, func, types, args, kwargs)

    monkeypatch.setattr(CheckingMode, "__torch_function__", counting)
    model = Tied()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with mpcheck.debug(model, report=None) as dbg:
        model(torch.randint(0, 10, (2, 5))).sum().backward()
        opt.step()
        assert calls, "the forward's calls go through the mode"
        calls.clear()
        session_module.active()._snapshot_memory()
        assert calls == []
    assert dbg.ledger.memory["cpu"]["optimizer_state"] > 0


def test_a_root_found_at_its_first_call_is_read_without_the_checking_mode(monkeypatch):
    # `mpcheck run` gives no model: the root is found at its first call, inside the mode, and its
    # placement read for the HTML report then (each parameter's `.numel()`, `.element_size()`).
    from mpcheck.runtime.capture.mode import CheckingMode

    calls = []
    orig = CheckingMode.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        calls.append(getattr(func, "__name__", ""))
        return orig(self, func, types, args, kwargs)

    monkeypatch.setattr(CheckingMode, "__torch_function__", counting)
    net = Tied()
    with mpcheck.debug(report=None) as dbg:
        net(torch.randint(0, 10, (2, 5)))
    assert calls, "the forward's calls go through the mode"
    assert not {"numel", "element_size"} & set(calls)
    rows = dbg._placement.rows  # read all the same
    assert rows["net.emb"].devices == ("cpu",) and rows["net.emb"].param_bytes == 10 * 8 * 4
    assert rows["net.body.1"].type == "LayerNorm"


def test_memory_table_takes_sparse_gradients():
    # nn.Embedding(sparse=True) gets a sparse gradient (no `.nbytes`): counted as its dense size, as before.
    emb = nn.Embedding(10, 4, sparse=True)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    with mpcheck.debug(emb, report=None) as dbg:
        emb(torch.tensor([1, 2])).sum().backward()
        assert emb.weight.grad.is_sparse
        opt.step()
    assert dbg.ledger.memory["cpu"]["grads"] == 10 * 4 * 4


def test_gradients_dropped_after_the_only_step_are_still_in_the_memory_table():
    # The first step's snapshot reads the gradients (the second step's and the session end's read
    # everything): a loop that clears them right after its step still shows them.
    torch.manual_seed(0)
    model = Tied()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with mpcheck.debug(model, report=None) as dbg:
        model(torch.randint(0, 10, (2, 5))).sum().backward()
        opt.step()
        grads = _bytes(p.grad for p in model.parameters())
        opt.zero_grad(set_to_none=True)
    mem = dbg.ledger.memory["cpu"]
    assert mem["grads"] == grads > 0
    assert mem["params"] == _bytes(model.parameters())
    assert mem["optimizer_state"] == _bytes(v for s in opt.state.values() for v in s.values())


def test_the_walk_over_the_roots_modules_gives_root_modules_order_each_module_once():
    # modules_of stands for `root.modules()` (the memory table's parameters, provenance's buffers):
    # same modules, same order, a module shared by two roots or held twice listed once, no None child.
    from mpcheck.runtime.checks.module_devices import modules_of

    shared = nn.Linear(2, 2)
    a = nn.Sequential(nn.Linear(2, 2), shared, nn.Sequential(shared, nn.ReLU()))
    a.register_module("missing", None)
    b = nn.ModuleDict({"x": nn.LayerNorm(2), "s": shared, "a": a})
    assert modules_of([a]) == list(a.modules())
    assert modules_of([b]) == list(b.modules())
    both = modules_of([a, b])
    assert both == [*a.modules(), *(m for m in b.modules() if all(m is not n for n in a.modules()))]
    assert len({id(m) for m in both}) == len(both)
