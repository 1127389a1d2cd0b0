"""CudaDevices' transfer timings reuse their CUDA events and streams (real/devices.py's EventTimer):
a step's copies create no event once the first steps have given theirs back, and a timing read twice
gives its events back once. CUDA itself is faked here; tests/gpu times real copies."""

import pytest

torch = pytest.importorskip("torch")

from mpcheck.runtime.real import devices as real  # noqa: E402


class FakeEvent:
    made = 0

    def __init__(self, enable_timing=False):
        FakeEvent.made += 1
        self.recorded_on = []

    def record(self, stream):
        self.recorded_on.append(stream)

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return 2.0


@pytest.fixture
def fake_cuda(monkeypatch):
    FakeEvent.made = 0
    current = {"id": 7}
    made_streams = []

    def current_stream(index):
        made_streams.append(index)
        return ("stream", current["id"], index)

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    timer = real.EventTimer()
    timer._current = lambda index: (current["id"], index, 1)
    return timer, current, made_streams


def test_events_are_reused_once_read(fake_cuda):
    timer, _, _ = fake_cuda
    for _ in range(5):  # five steps of two copies each, read at each step end
        timings = [real.CudaTiming(timer, 1), real.CudaTiming(timer, 1)]
        for t in timings:
            t.stop()
        assert [t.elapsed_ms() for t in timings] == [2.0, 2.0]
    assert FakeEvent.made == 4  # the first step's; every later step took them from the pool


def test_a_timing_read_twice_gives_its_events_back_once(fake_cuda):
    timer, _, _ = fake_cuda
    t = real.CudaTiming(timer, 0)
    t.stop()
    assert t.elapsed_ms() == t.elapsed_ms() == 2.0
    assert len(timer._pools[0]) == 2
    a, b = real.CudaTiming(timer, 0), real.CudaTiming(timer, 0)
    assert {id(a.start), id(a.end)}.isdisjoint({id(b.start), id(b.end)})  # never one event in two timings


def test_pools_are_per_device_and_streams_follow_the_current_one(fake_cuda):
    timer, current, made_streams = fake_cuda
    t0 = real.CudaTiming(timer, 0)
    t0.stop()
    t0.elapsed_ms()
    t1 = real.CudaTiming(timer, 1)  # device 1 never takes device 0's events
    assert t1.start not in timer._pools[0] and FakeEvent.made == 4
    t1.stop()
    assert t1.start.recorded_on == t1.end.recorded_on == [("stream", 7, 1)]
    current["id"] = 9  # the user switched streams (`with torch.cuda.stream(s)`)
    t2 = real.CudaTiming(timer, 1)
    assert t2.start.recorded_on == [("stream", 9, 1)]
    real.CudaTiming(timer, 1)
    assert made_streams == [0, 1, 1]  # one Stream object per (stream, device), made once


def test_an_unrecorded_timing_reads_none_and_keeps_its_events(fake_cuda, monkeypatch):
    timer, _, _ = fake_cuda
    t = real.CudaTiming(timer, 0)

    def fails(end):
        raise RuntimeError("event not recorded")

    monkeypatch.setattr(t.start, "elapsed_time", fails)
    assert t.elapsed_ms() is None
    assert not timer._pools.get(0)
