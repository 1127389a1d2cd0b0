"""The checking core on its own: each check's definition, with labelled CPU tensors as devices."""

import weakref

import pytest
import torch
from torch import nn

from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.findings import DeviceMismatchError, MpcheckRuntimeWarning
from mpcheck.runtime.checks.sites import Site

S1 = Site("train.py", 10, "forward")
S2 = Site("train.py", 20, "forward")


def test_mismatch_raises_with_devices_site_and_module(labels):
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S1)
    a = labels.label(torch.randn(2, 2), "cuda:0")
    b = labels.label(torch.randn(2, 2), "cuda:1")
    ck.module_stack.append("model.blocks.7.attn")
    with pytest.raises(DeviceMismatchError) as err:
        ck.check_op(torch.mm, (a, b), {})
    f = err.value.finding
    assert isinstance(err.value, RuntimeError)
    assert (f.code, f.path, f.line) == ("MP001", "train.py", 10)
    assert f.devices == ("cuda:0", "cuda:1")
    assert f.modules == ("model.blocks.7.attn",)
    assert "to('cuda:0')" in f.suggestion


@pytest.mark.parametrize(
    "make",
    [
        lambda L: (torch.add, (L.label(torch.randn(3), "cuda:1"), torch.tensor(2.0)), {}),  # 0-dim CPU scalar
        lambda L: (torch.add, (torch.tensor(2.0), L.label(torch.randn(3), "cuda:1")), {}),  # scalar first
        lambda L: (torch.Tensor.__getitem__, (L.label(torch.randn(3), "cuda:1"), torch.tensor([0, 2])), {}),
        lambda L: (torch.Tensor.__setitem__, (L.label(torch.randn(3), "cuda:1"), slice(0, 2), torch.ones(2)), {}),
    ],
    ids=["scalar", "scalar-first", "cpu-index", "cpu-value-setitem"],
)
def test_allowed_mixes_are_not_mismatches(labels, make):
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S1)
    func, args, kwargs = make(labels)
    assert ck.check_op(func, args, kwargs) == (args, kwargs)
    assert ck.findings == []


def test_cpu_tensor_with_gpu_tensor_in_ordinary_op_is_a_mismatch(labels):
    ck = Checker(labels, on_mismatch="warn", sites=lambda: S1)
    with pytest.warns(MpcheckRuntimeWarning, match="MP001"):
        ck.check_op(torch.add, (labels.label(torch.randn(3), "cuda:1"), torch.randn(3)), {})
    assert [f.devices for f in ck.findings] == [("cuda:1", "cpu")]


def test_move_mode_moves_and_records_every_mismatch_once_with_a_count(labels):
    ck = Checker(labels, on_mismatch="move", sites=lambda: S1)
    a = labels.label(torch.randn(2), "cuda:0")
    b = labels.label(torch.randn(2), "cuda:1")
    for _ in range(3):
        args, kwargs = ck.check_op(torch.add, (a,), {"other": b})
        assert labels.device_of(kwargs["other"]) == "cuda:0"
        assert torch.equal(kwargs["other"], b)
    assert len(ck.findings) == 1 and ck.findings[0].extra["count"] == 3
    assert "keyword argument 'other'" in ck.findings[0].message


def test_mismatch_inside_a_list_argument(labels):
    ck = Checker(labels, on_mismatch="move", sites=lambda: S1)
    a = labels.label(torch.randn(2), "cuda:0")
    b = labels.label(torch.randn(2), "cuda:1")
    args, _ = ck.check_op(torch.cat, ([a, b],), {})
    assert [labels.device_of(t) for t in args[0]] == ["cuda:0", "cuda:0"]
    assert isinstance(args[0], list)


def test_module_entry_checks_kwargs_against_the_modules_own_device(labels):
    ck = Checker(labels, on_mismatch="move", sites=lambda: S2)
    lin = nn.Linear(2, 2)
    for p in lin.parameters():
        labels.label(p, "cuda:1")
    x = labels.label(torch.randn(1, 2), "cuda:0")
    ok = labels.label(torch.randn(1, 2), "cuda:1")
    ck.check_module_entry(lin, "model.head", (ok,), {"mask": x})
    (f,) = ck.findings
    assert f.modules == ("model.head",) and f.devices == ("cuda:1", "cuda:0") and f.line == 20
    assert "parameters and buffers are on cuda:1" in f.message


def test_split_container_is_not_checked_but_its_single_device_children_are(labels):
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S2)
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    for p in model[0].parameters():
        labels.label(p, "cuda:0")
    for p in model[1].parameters():
        labels.label(p, "cuda:1")
    x = labels.label(torch.randn(1, 2), "cuda:0")
    assert ck.module_device(model) is None
    ck.check_module_entry(model, "model", (x,), {})  # no error: the container is split
    with pytest.raises(DeviceMismatchError):
        ck.check_module_entry(model[1], "model.1", (x,), {})


def test_round_trip_names_both_lines(labels):
    ck = Checker(labels, on_mismatch="raise")
    x = labels.label(torch.randn(4), "cuda:0")
    y = labels.label(x.clone(), "cuda:1")
    ck.on_transfer(x, y, "cuda:0", "cuda:1", site=S1, module_path="model.a")
    back = labels.label(y.clone(), "cuda:0")
    ck.on_transfer(y, back, "cuda:1", "cuda:0", site=S2, module_path="model.b")
    (f,) = ck.findings
    assert f.code == "MP005" and f.line == 20 and f.extra["first_line"] == 10
    assert f.devices == ("cuda:0", "cuda:1")


def test_no_round_trip_when_work_was_done_on_the_other_device(labels):
    ck = Checker(labels, on_mismatch="raise")
    x = labels.label(torch.randn(4), "cuda:0")
    y = labels.label(x.clone(), "cuda:1")
    ck.on_transfer(x, y, "cuda:0", "cuda:1", site=S1, module_path=None)
    y.mul_(2)  # in-place work on cuda:1 bumps the version
    ck.on_transfer(y, y.clone(), "cuda:1", "cuda:0", site=S2, module_path=None)
    z = labels.label(y * 3, "cuda:1")  # a new result computed on cuda:1
    ck.on_transfer(z, z.clone(), "cuda:1", "cuda:0", site=S2, module_path=None)
    assert ck.findings == []


def test_repeated_transfer_within_a_step_and_in_later_steps_but_not_after_a_change(labels):
    ck = Checker(labels, on_mismatch="raise", repeat_min_bytes=0)  # a tiny mask: below the default threshold
    ck.module_stack.append("m")  # inside the model's forward (module m)
    mask = labels.label(torch.ones(8), "cuda:0")
    ck.on_transfer(mask, mask.clone(), "cuda:0", "cuda:1", site=S1, module_path="m")
    ck.on_transfer(mask, mask.clone(), "cuda:0", "cuda:1", site=S2, module_path="m")
    assert [(f.code, f.line, f.extra["scope"]) for f in ck.findings] == [("MP011", 20, "step")]
    ck.step_end()
    mask.add_(1)  # changed: moving it again is needed
    ck.on_transfer(mask, mask.clone(), "cuda:0", "cuda:1", site=S1, module_path="m")
    ck.on_transfer(mask, mask.clone(), "cuda:0", "cuda:2", site=S2, module_path="m")  # another device
    assert len(ck.findings) == 1
    ck.step_end()
    ck.on_transfer(mask, mask.clone(), "cuda:0", "cuda:1", site=S1, module_path="m")  # unchanged since last step
    # Held until the next step shows it was made inside the training loop (repeats.judge_repeats_after_training).
    assert len(ck.findings) == 1
    ck.step_end()
    assert [(f.line, f.extra["scope"]) for f in ck.findings] == [(20, "step"), (10, "steps")]


def test_copies_with_no_model_work_between_them_are_setup_not_a_repeat(labels):
    # Loading a checkpoint whose tied entries share one tensor copies it once per key, outside any
    # forward pass: a one-time cost, not data copied on every step (recurrence.py).
    ck = Checker(labels, on_mismatch="raise", repeat_min_bytes=0)
    shared = labels.label(torch.ones(8), "cpu")
    ck.on_transfer(shared, shared.clone(), "cpu", "cuda:0", site=S1, module_path=None)
    ck.on_transfer(shared, shared.clone(), "cpu", "cuda:0", site=S1, module_path=None)
    assert ck.findings == []
    # The same copy once the model has run (a loss, a step, a forward pass) is a repeat of the loop's.
    ck.end_top_pass()
    ck.on_transfer(shared, shared.clone(), "cpu", "cuda:0", site=S2, module_path=None)
    assert [(f.code, f.line) for f in ck.findings] == [("MP011", 20)]
    ck.step_end()
    ck.on_transfer(shared, shared.clone(), "cpu", "cuda:0", site=S2, module_path=None)
    ck.step_end()
    assert len(ck.findings) == 1 and ck.findings[0].extra["count"] == 2


def test_a_repeat_made_once_after_training_is_no_per_step_waste(labels):
    # The same inputs moved for two evaluations at the end of a run (the EMA weights and the live ones) cost
    # once; the same line repeating in an evaluation loop, or a repeat followed by another step, is waste.
    ck = Checker(labels, on_mismatch="raise", repeat_min_bytes=0)
    x = labels.label(torch.ones(8), "cpu")
    ck.step_end()  # training ran (its batches are other tensors)
    ck.on_transfer(x, x.clone(), "cpu", "cuda:0", site=S1, module_path=None)  # evaluation one
    ck.end_top_pass()
    ck.on_transfer(x, x.clone(), "cpu", "cuda:0", site=S1, module_path=None)  # evaluation two
    ck.finish()
    assert ck.findings == []

    ck = Checker(labels, on_mismatch="raise", repeat_min_bytes=0)
    ck.step_end()
    for _ in range(3):  # an evaluation loop moving the same data twice per batch
        ck.on_transfer(x, x.clone(), "cpu", "cuda:0", site=S1, module_path=None)
        ck.end_top_pass()
        ck.on_transfer(x, x.clone(), "cpu", "cuda:0", site=S2, module_path=None)
    ck.finish()
    assert sorted((f.code, f.line) for f in ck.findings) == [("MP011", 10), ("MP011", 20)]

    # Two copies within one iteration of a loop that trained before: per-step waste once the line repeats so in
    # a second iteration (an evaluation made twice between two training phases is a copy once).
    ck = Checker(labels, on_mismatch="raise", repeat_min_bytes=0)
    ck.step_end()
    for iteration in range(2):
        ck.on_transfer(x, x.clone(), "cpu", "cuda:0", site=S1, module_path=None)
        ck.end_top_pass()
        ck.on_transfer(x, x.clone(), "cpu", "cuda:0", site=S2, module_path=None)
        ck.step_end()  # inside the training loop after all
        # (and the next iteration's first copy repeats the last one's: the same data moved on every step)
        assert sorted((f.code, f.line) for f in ck.findings) == ([("MP011", 10), ("MP011", 20)] if iteration else [])


def test_freed_storage_whose_id_is_reused_is_not_a_repeat(labels):
    ck = Checker(labels, on_mismatch="raise")
    for _ in range(50):
        t = torch.ones(16)
        ck.on_transfer(t, t.clone(), "cpu", "cuda:1", site=S1, module_path=None)
        del t
    assert ck.findings == []


def test_ledger_aggregates_per_pair_site_module_and_step(labels):
    ck = Checker(labels, on_mismatch="raise")
    x = torch.randn(256)  # 1 KiB
    for _step in range(3):
        for _ in range(2):
            t = x.clone()
            ck.on_transfer(
                t,
                t,
                "cuda:0",
                "cuda:1",
                site=S1,
                module_path="model.s2",
                timing=labels.start_transfer("cuda:0", "cuda:1", 1024),
            )
        ck.on_transfer(
            None,
            None,
            "cuda:1",
            "cuda:0",
            site=S1,
            module_path="model.s2",
            phase="backward",
            nbytes=1024,
            contiguous=True,
            timing=labels.start_transfer("cuda:1", "cuda:0", 1024),
        )
        ck.step_end()
    ck.finish()
    pairs = ck.ledger.by_pair()
    fwd = pairs[("cuda:0", "cuda:1", "forward")]
    bwd = pairs[("cuda:1", "cuda:0", "backward")]
    assert (fwd.count, fwd.bytes, fwd.time_ms) == (6, 6 * 1024, 3.0)
    assert (bwd.count, bwd.bytes) == (3, 3 * 1024)
    assert len(ck.ledger.steps) == 3
    assert ck.ledger.steps[0].by_pair[("cuda:0", "cuda:1", "forward")].count == 2
    assert fwd.as_dict()["gb_per_s"] == pytest.approx(6 * 1024 / (3.0 * 1e6), rel=1e-3)


def test_noncontiguous_transfers_are_counted(labels):
    ck = Checker(labels, on_mismatch="raise")
    t = torch.randn(8, 8).t()
    ck.on_transfer(t, t.clone(), "cuda:0", "cuda:1", site=S1, module_path=None, timing=labels.start_transfer(0, 1, 0))
    ck.finish()
    (agg,) = ck.ledger.totals.values()
    assert agg.noncontiguous == 1 and agg.noncontiguous_time_ms == 0.5


def _split(labels, model, first, second):
    for p in model[0].parameters():
        labels.label(p, first)
    for p in model[1].parameters():
        labels.label(p, second)
    return model


def test_wrap_in_data_parallel_or_ddp_with_device_ids(labels):
    ck = Checker(labels, on_mismatch="move", sites=lambda: S1)
    model = _split(labels, nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), "cuda:0", "cuda:1")
    assert ck.on_wrap("DataParallel", model, device_ids=None, output_device=None, site=S1).code == "MP002"
    assert ck.on_wrap("DistributedDataParallel", model, device_ids=None, output_device=None, site=S1) is None
    f = ck.on_wrap("DistributedDataParallel", model, device_ids=[0], output_device=None, site=S2)
    assert f.code == "MP002" and f.line == 20 and f.devices == ("cuda:0", "cuda:1")
    single = _split(labels, nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), "cuda:0", "cuda:0")
    assert ck.on_wrap("DataParallel", single, device_ids=None, output_device=None, site=S1) is None


def test_collapse_of_a_split_model(labels):
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S1)
    model = _split(labels, nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), "cuda:0", "cuda:1")
    f = ck.on_module_move(model, "cuda:0", site=S2)  # not fatal: recorded, never raised
    assert f.code == "MP007" and f.severity == "error" and f.line == 20  # mpcheck/codes.py: one severity
    assert ck.on_module_move(model, "cpu", site=S2) is None
    single = _split(labels, nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), "cuda:1", "cuda:1")
    assert ck.on_module_move(single, "cuda:0", site=S2) is None


def test_select_limits_the_checks(labels):
    ck = Checker(labels, on_mismatch="raise", select=["MP011"], sites=lambda: S1)
    a = labels.label(torch.randn(2), "cuda:0")
    b = labels.label(torch.randn(2), "cuda:1")
    ck.check_op(torch.add, (a, b), {})  # MP001 not selected: no raise
    assert ck.findings == []


def test_bad_on_mismatch_is_a_clear_error(labels):
    with pytest.raises(ValueError, match="on_mismatch must be one of raise, warn, move"):
        Checker(labels, on_mismatch="explode")


def test_rule_names_match_the_linter_registry():
    from mpcheck import codes
    from mpcheck.rules import rules_by_code
    from mpcheck.runtime.checks.findings import RULE_NAMES

    registry = rules_by_code()
    for code, name in RULE_NAMES.items():
        # A run-time code the linter also reports must be a registered rule of the same name.
        if codes.LINT in codes.get(code).faces:
            assert code in registry, f"{code} is missing from the lint registry"
            assert registry[code].name == name, code


def _hops(ck, labels, devs, sites, work=True):
    """Move one activation along `devs` (a new result computed on each device in between, by a layer, unless
    work=False); returns weak references to every tensor made."""
    x = labels.label(torch.randn(4), devs[0])
    refs = [weakref.ref(x)]
    for dst, site in zip(devs[1:], sites):
        y = labels.label(x.clone(), dst)
        ck.on_transfer(x, y, labels.device_of(x), dst, site=site, module_path="model")
        if work:
            ck._tls.module_calls += 1  # the layer on `dst` (what the module hooks count)
            ck.note_unseen_reads((y,), {})  # ...which read what arrived (what the capture layer marks)
        x = labels.label(y * 2, dst) if work else y
        refs += [weakref.ref(y), weakref.ref(x)]
    return refs


def test_layers_alternating_devices_reported_once_per_chain_at_the_first_transfer_back(labels):
    ck = Checker(labels, on_mismatch="raise")
    sites = [Site("train.py", 30 + i, "forward") for i in range(5)]
    for step in range(2):  # two steps, one finding counted twice
        refs = _hops(ck, labels, ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0", "cuda:1"], sites)
        # judged when the forward pass is over, not at each transfer
        assert [f.extra["count"] for f in ck.findings] == ([] if step == 0 else [1])
        ck.step_end()
    (f,) = ck.findings
    assert (f.code, f.line, f.devices, f.severity) == ("MP006", 31, ("cuda:0", "cuda:1"), "warning")
    assert f.extra["count"] == 2 and f.extra["crossings"] == 5 and f.extra["first_site"].endswith(":30")
    assert "5 times per forward" in f.message and f.modules == ("model",)
    assert "where 1 crossing would do" in f.message  # two devices: one crossing, said in words
    assert "stretches 1-3 on cuda:0, 4-6 on cuda:1" in f.suggestion
    assert all(r() is None for r in refs)  # no tensor kept alive


@pytest.mark.parametrize(
    "devs",
    [
        ["cuda:0", "cuda:1"],
        ["cuda:0", "cuda:1", "cuda:0"],  # two stages and the way back to the labels
        ["cuda:0", "cuda:1", "cuda:2", "cuda:3"],  # a four-stage pipeline
        ["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0"],
        ["cpu", "cuda:0", "cpu", "cuda:0", "cpu"],  # host <-> device traffic is not a layer split
    ],
    ids=["one-hop", "there-and-back", "four-stages", "four-stages-and-back", "cpu"],
)
def test_one_crossing_per_stage_boundary_is_not_ping_pong(labels, devs):
    ck = Checker(labels, on_mismatch="raise", select=["MP006"])
    for _ in range(3):
        _hops(ck, labels, devs, [Site("train.py", 40 + i, "forward") for i in range(len(devs))])
        ck.step_end()
    ck.finish()
    assert ck.findings == []


def _expert_layers(ck, labels, residual):
    """Four layers under no_grad: the tokens leave cuda:0 for an expert on cuda:1 and the result comes back;
    with `residual` the tokens that left are kept and summed with it, else the result alone goes on."""

    def gone(t):  # the labels hold storages: let a temporary go as the program would
        labels.labels.pop(id(t.untyped_storage()))

    tokens = [labels.label(torch.randn(4), "cuda:0")]  # the one reference to the current tokens
    for _ in range(4):
        x = tokens.pop()
        y = labels.label(x.clone(), "cuda:1")
        ck.on_transfer(x, y, "cuda:0", "cuda:1", site=S1, module_path="model")
        kept = x if residual else gone(x)
        del x
        ck.note_reads((y,), {})  # the expert reads what arrived (the capture mode tells the checker so)
        ck._tls.module_calls += 1  # the expert, a layer on cuda:1
        r = labels.label(y * 2, "cuda:1")
        back = labels.label(r.clone(), "cuda:0")
        ck.on_transfer(r, back, "cuda:1", "cuda:0", site=S2, module_path="model")
        gone(r)
        ck.note_reads((back,), {})
        ck._tls.module_calls += 1  # the next layer, on cuda:0
        tokens.append(labels.label(back + kept if kept is not None else back * 2, "cuda:0"))
        del kept, back, r, y


@pytest.mark.parametrize("residual", [True, False])
def test_without_a_graph_an_out_and_back_counts_only_when_what_left_is_gone(labels, residual):
    ck = Checker(labels, on_mismatch="raise", select=["MP006"])
    with torch.no_grad():
        _expert_layers(ck, labels, residual)
    ck.finish()
    assert [f.code for f in ck.findings] == ([] if residual else ["MP006"])


def test_hops_without_work_in_between_are_round_trips_not_ping_pong(labels):
    ck = Checker(labels, on_mismatch="raise")
    _hops(ck, labels, ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"], [S1, S2, S1, S2], work=False)
    ck.finish()
    assert {f.code for f in ck.findings} == {"MP005"}


def test_separate_forward_passes_do_not_chain(labels):
    # cuda:0 -> cuda:1 -> cuda:0 in each forward pass (the hooks count passes), no step in between
    ck = Checker(labels, on_mismatch="raise")
    ck.module_stack.append("model")
    for _ in range(4):
        ck._tls.forwards += 1
        _hops(ck, labels, ["cuda:0", "cuda:1", "cuda:0"], [S1, S2])
    ck.finish()
    assert ck.findings == []
    ck._tls.forwards += 1
    _hops(ck, labels, ["cuda:0", "cuda:1", "cuda:0", "cuda:1"], [S1, S2, S1])  # ping-pong within one pass
    ck.finish()
    assert [(f.code, f.line) for f in ck.findings] == [("MP006", 20)]


def test_a_round_trip_that_starts_a_loop_is_taken_back_even_when_a_stale_entry_has_the_new_datas_id(labels):
    # The first pass sends a beam's sequences back to the first GPU unchanged (MP005, once); every later pass moves
    # new data from that line, which takes the finding back. A freed storage's id reused by the new data must not
    # hide that: its stale arrival entry counts as no entry.
    from mpcheck.runtime.checks.storage_ref import StorageRef

    ck = Checker(labels, on_mismatch="raise", repeat_min_bytes=0)
    seqs = labels.label(torch.ones(64, 64), "cuda:0")
    moved = labels.label(seqs.clone(), "cuda:1")
    ck.on_transfer(seqs, moved, "cuda:0", "cuda:1", site=S1, module_path=None)
    back = labels.label(moved.clone(), "cuda:0")
    ck.on_transfer(moved, back, "cuda:1", "cuda:0", site=S2, module_path="m")
    assert [f.code for f in ck.findings] == ["MP005"]
    grown = labels.label(torch.ones(64, 65), "cuda:1")
    other = torch.ones(3)
    ck._arrivals[id(grown.untyped_storage())] = (StorageRef(other), "cuda:0", S1)  # a stale entry, reused id
    ck.on_transfer(grown, labels.label(grown.clone(), "cuda:0"), "cuda:1", "cuda:0", site=S2, module_path="m")
    assert ck.findings == []
