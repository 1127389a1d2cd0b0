"""What arrived where (checks/arrivals.py): an arrived tensor is known by its Python object's id, and an
id outlives nothing. Once the object is freed CPython gives its memory, and so its id, to the next
object of its size, often a tensor made a moment later; reading that one is no read of the arrival."""

import torch

from mpcheck.runtime.checks.checker import Checker
from mpcheck.runtime.checks.sites import Site

S1 = Site("train.py", 10, "forward")
S2 = Site("train.py", 20, "forward")


def _tensor_taking_id(wanted, keep):
    """A new tensor with the id `wanted` (a freed tensor's), or None; the others made on the way are kept
    in `keep`, so that each try takes new memory."""
    for _ in range(1000):
        t = torch.zeros(1)
        if id(t) == wanted:
            return t
        keep.append(t)
    return None


def test_a_tensor_that_took_a_freed_arrivals_id_reads_nothing_that_arrived(labels):
    # Micro-batches under no_grad: each chunk goes cuda:0 -> cuda:1 -> cuda:0 and waits there, unread, as a
    # detached copy for the final concatenation (`outs.append(h.to("cuda:0").detach())`); the arrived tensor
    # itself is freed. The next chunk's first op on cuda:0 reads a new tensor that took its id: before the
    # fix that read marked the waiting arrival read, so the next chunk's departure continued its chain and
    # four independent round trips read as one activation crossing at every layer (MP006).
    ck = Checker(labels, on_mismatch="raise", select=["MP005", "MP006"])

    def gone(t):  # the labels hold storages: let a temporary go as the program would
        labels.labels.pop(id(t.untyped_storage()))

    keep, outs, reused = [], [], 0
    with torch.no_grad():
        for _ in range(4):
            x = labels.label(torch.randn(4), "cuda:0")
            y = labels.label(x.clone(), "cuda:1")
            ck.on_transfer(x, y, "cuda:0", "cuda:1", site=S1, module_path=None)
            gone(x)
            del x  # what left cuda:0 is gone: nothing stays there to meet the result
            ck.note_reads((y,), {})  # stage 1 reads what arrived
            r = labels.label(y * 2, "cuda:1")
            back = labels.label(r.clone(), "cuda:0")
            ck.on_transfer(r, back, "cuda:1", "cuda:0", site=S2, module_path=None)
            outs.append(back.detach())  # shares the storage; the capture mode reports it as a view
            ck.note_view(back, outs[-1])
            freed = id(back)
            gone(y)
            gone(r)
            del back, y, r
            other = _tensor_taking_id(freed, keep)
            if other is not None:
                reused += 1
                ck.note_reads((other,), {})
            del other
    ck.finish()
    assert reused, "CPython gave no freed arrival's id to a new tensor: the case was not exercised"
    assert ck.findings == []


def test_a_view_of_a_tensor_that_took_a_freed_arrivals_id_is_no_arrival(labels):
    # The same id reuse, seen by note_view: a view of the new tensor is not a view of the arrived data, so
    # reading the view marks nothing read either.
    ck = Checker(labels, on_mismatch="raise")
    keep = []
    with torch.no_grad():
        x = labels.label(torch.randn(4), "cuda:0")
        back = labels.label(x.clone(), "cuda:1")
        ck.on_transfer(x, back, "cuda:0", "cuda:1", site=S1, module_path=None)
        waiting = back.detach()
        ck.note_view(back, waiting)
        freed = id(back)
        del back
        other = _tensor_taking_id(freed, keep)
        assert other is not None, "CPython gave the freed arrival's id to no new tensor"
        view = other.view(1)
        ck.note_view(other, view)
        ck.note_reads((view,), {})
        # The arrival is still unread: moved straight back unchanged, it is a round trip.
        ck.on_transfer(waiting, labels.label(waiting.clone(), "cuda:0"), "cuda:1", "cuda:0", site=S2, module_path=None)
    assert [(f.code, f.line) for f in ck.findings] == [("MP005", 20)]


def test_reading_the_arrived_tensor_itself_still_counts(labels):
    # The good twin: the arrived tensor, or a view of it, read where it arrived is worked on there, and
    # moving it back is no round trip.
    ck = Checker(labels, on_mismatch="raise")
    x = labels.label(torch.randn(4), "cuda:0")
    y = labels.label(x.clone(), "cuda:1")
    ck.on_transfer(x, y, "cuda:0", "cuda:1", site=S1, module_path=None)
    view = y.view(2, 2)
    ck.note_view(y, view)
    ck.note_reads((view,), {})
    ck.on_transfer(y, labels.label(y.clone(), "cuda:0"), "cuda:1", "cuda:0", site=S2, module_path=None)
    assert ck.findings == []
