"""The waste checks of the core alone, on labelled CPU tensors: a detour through the host (MP005), predictions
moved to the targets' device (MP014 warning), a broadcast view moved at its full size (MP016), and the
provenance that lets MP011 see fresh copies of constant data (provenance.py)."""

import torch

from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.provenance import Provenance
from mpcheck.runtime.checks.sites import Site

S1 = Site("train.py", 10, "forward")
S2 = Site("train.py", 20, "forward")
BIG = 128 * 256  # float32 elements: 128 KiB, above the 64 KiB threshold


def _move(ck, labels, t, src, dst, site):
    out = labels.label(t.clone(), dst)
    ck.on_transfer(t, out, src, dst, site=site, module_path="model")
    return out


def test_host_detour_is_reported_at_the_copy_up_with_the_copy_down(labels):
    ck = Checker(labels, on_mismatch="raise")
    h = labels.label(torch.randn(BIG), "cuda:0")
    down = _move(ck, labels, h, "cuda:0", "cpu", S1)
    _move(ck, labels, down, "cpu", "cuda:1", S2)
    (f,) = ck.findings
    assert (f.code, f.line, f.extra["first_line"]) == ("MP005", 20, 10)
    assert f.devices == ("cuda:0", "cpu", "cuda:1")


def test_host_detour_after_host_work_or_below_the_threshold_is_silent(labels):
    ck = Checker(labels, on_mismatch="raise")
    h = labels.label(torch.randn(BIG), "cuda:0")
    down = _move(ck, labels, h, "cuda:0", "cpu", S1)
    down.mul_(2)  # work on the host: the copy down was needed
    _move(ck, labels, down, "cpu", "cuda:1", S2)
    small = labels.label(torch.randn(16), "cuda:0")
    _move(ck, labels, _move(ck, labels, small, "cuda:0", "cpu", S1), "cpu", "cuda:1", S2)
    assert ck.findings == []


def test_predictions_moved_to_small_targets_name_the_move(labels):
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S2)
    logits = labels.label(torch.randn(16, 4096), "cuda:1")  # 256 KiB
    moved = _move(ck, labels, logits, "cuda:1", "cuda:0", S1)
    targets = labels.label(torch.randint(0, 4096, (16,)), "cuda:0")
    ck.on_loss((moved, targets), {})
    (f,) = ck.findings
    assert (f.code, f.line, f.severity) == ("MP014", 10, "warning")  # a warning, not raised
    assert f.extra["bytes_saved"] == 16 * 4096 * 4 - 16 * 8
    assert f.extra["loss_site"] == "train.py:20"


def test_predictions_computed_after_the_move_or_as_large_as_the_targets_are_silent(labels):
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S2)
    logits = labels.label(torch.randn(16, 4096), "cuda:1")
    moved = _move(ck, labels, logits, "cuda:1", "cuda:0", S1)
    ck.on_loss((moved, labels.label(torch.randn(16, 4096), "cuda:0")), {})  # targets as large
    moved.mul_(2)  # changed on cuda:0 after the move: not the bare move any more
    ck.on_loss((moved, labels.label(torch.randint(0, 4096, (16,)), "cuda:0")), {})
    assert ck.findings == []


def test_provenance_follows_constants_and_drops_what_mixes_in_other_data():
    prov = Provenance(torch.Tensor)
    buf = torch.randn(6, 8)
    prov.made_by_factory(buf)  # a source, as a buffer would be
    view = buf[2]
    prov.derive((buf, 2), {}, view)
    fresh = view.repeat(4, 1)
    prov.derive((view, 4, 1), {}, fresh)
    assert prov.is_const(fresh)
    mixed = fresh * torch.randn(8)  # an input mixed in
    prov.derive((fresh, torch.randn(8)), {}, mixed)
    assert not prov.is_const(mixed)
    fresh.add_(1)  # changed in place after it was marked
    assert not prov.is_const(fresh)
    assert not prov.is_const(torch.randn(3))


def test_provenance_lists_a_roots_buffers_until_they_change_but_never_running_statistics():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    model.register_buffer("table", torch.randn(4))
    prov = Provenance(torch.Tensor)
    prov.refresh([model], epoch=0)
    assert prov.is_const(model.table)
    # BatchNorm's kernel updates its running statistics in every training forward without bumping
    # their version counter: they are never constant
    assert not prov.is_const(model[1].running_mean)
    model.table.add_(1)
    assert not prov.is_const(model.table)


def test_provenance_reads_track_running_stats_of_each_module_its_class_or_its_own():
    # The class's answer is read once per class; a module's own attribute still overrides it.
    class Stats(torch.nn.Module):
        track_running_stats = True

        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.zeros(2))

    a, b, c = Stats(), Stats(), Stats()
    c.track_running_stats = False  # this one's buffer is a plain constant
    prov = Provenance(torch.Tensor)
    prov.refresh([torch.nn.Sequential(a, b, c)], epoch=0)
    assert not prov.is_const(a.mean) and not prov.is_const(b.mean)
    assert prov.is_const(c.mean)


def test_predictions_moved_without_grad_to_targets_and_weights_say_so(labels):
    ck = Checker(labels, on_mismatch="raise", sites=lambda: S2)
    logits = labels.label(torch.randn(16, 4096), "cuda:1")  # evaluation: no gradient to send back
    moved = _move(ck, labels, logits, "cuda:1", "cuda:0", S1)
    targets = labels.label(torch.randint(0, 4096, (16,)), "cuda:0")
    weights = labels.label(torch.ones(4096), "cuda:0")
    ck.on_loss((moved, targets), {"weight": weights})
    (f,) = ck.findings
    assert "only to meet the targets and weights (16.1 KiB)" in f.message  # 16 KiB of weights + 128 bytes
    assert "backward" not in f.message
    assert f.suggestion.endswith("move the targets and weights with `.to('cuda:1')`")


def _move_in_threads(ck, labels, t, dst, site, threads):
    """The same copy made in `threads` threads alive at once (a loader's thread pool): each one's own counts
    start at zero."""
    import threading

    ready = threading.Barrier(threads)

    def copy():
        _move(ck, labels, t, "cpu", dst, site)
        ready.wait(30)  # no thread ends before all have copied (a thread's id may be reused after it ends)

    running = [threading.Thread(target=copy) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()


def test_the_same_data_copied_in_two_threads_at_setup_is_not_a_repeat_but_after_the_model_ran_it_is(labels):
    """MP011's setup rule across threads (recurrence.py): two threads' own counts say nothing of each other's
    work; the model's work in all threads does. Copied in two threads before the model ran: setup. Copied in
    a thread again after a forward pass in the main thread: a repeat."""
    ck = Checker(labels, on_mismatch="raise")
    shared = torch.randn(BIG)
    _move_in_threads(ck, labels, shared, "cuda:0", S1, threads=2)
    assert ck.findings == []
    ck._tls.forwards += 1  # an outermost module call in this thread, as the module hooks count it
    ck.model_runs += 1
    _move_in_threads(ck, labels, shared, "cuda:0", S2, threads=1)
    (f,) = ck.findings
    assert (f.code, f.line) == ("MP011", 20)


def test_a_broadcast_view_moved_whole_is_reported_with_its_data_and_expanded_sizes(labels):
    ck = Checker(labels, on_mismatch="raise")
    bias = labels.label(torch.randn(1, 4, 64, 64), "cuda:0")  # 64 KiB of data
    view = bias.expand(8, -1, -1, -1)  # 512 KiB once written out
    _move(ck, labels, view, "cuda:0", "cuda:1", S1)
    (f,) = ck.findings
    assert (f.code, f.line, f.severity) == ("MP016", 10, "warning")
    assert f.devices == ("cuda:0", "cuda:1")
    assert f.extra["bytes_saved"] == 7 * 64 * 1024
    assert "64 KiB of data, expanded to 512 KiB" in f.message and "expand it on cuda:1" in f.suggestion


def test_a_dense_tensor_a_view_of_no_repeat_or_under_64_kib_more_or_moved_where_it_is_is_silent(labels):
    ck = Checker(labels, on_mismatch="raise")
    bias = labels.label(torch.randn(1, 4, 64, 64), "cuda:0")
    _move(ck, labels, bias.repeat(8, 1, 1, 1), "cuda:0", "cuda:1", S1)  # dense: no trace of the repeat
    _move(ck, labels, bias.expand(1, -1, -1, -1), "cuda:0", "cuda:1", S1)  # a view of all its data once
    small = labels.label(torch.randn(1, 64), "cuda:0")
    _move(ck, labels, small.expand(64, -1), "cuda:0", "cuda:1", S1)  # 16 KiB in all
    ck.on_transfer(bias.expand(8, -1, -1, -1), None, "cuda:0", "cuda:0", site=S1, module_path="model")
    assert ck.findings == []
