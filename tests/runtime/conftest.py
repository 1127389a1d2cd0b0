import pytest

torch = pytest.importorskip("torch")


class LabelDevices:
    """A Devices for testing the core without GPUs: the device of a CPU tensor is a
    label kept per storage (unlabelled storages are on "cpu"); move() relabels a copy."""

    name = "label"

    def __init__(self):
        self.labels = {}

    def label(self, t, dev):
        self.labels[id(t.untyped_storage())] = (t.untyped_storage(), dev)
        return t

    def device_of(self, t):
        entry = self.labels.get(id(t.untyped_storage()))
        return entry[1] if entry and entry[0] is t.untyped_storage() else "cpu"

    def normalize(self, d):
        return None if d is None else str(d)

    def move(self, t, device):
        return self.label(t.clone(), device)

    def start_transfer(self, src, dst, nbytes):
        return FixedTiming(0.5)


class FixedTiming:
    def __init__(self, ms):
        self.ms = ms
        self.stopped = False

    def stop(self):
        self.stopped = True

    def ready(self):
        return True

    def elapsed_ms(self):
        return self.ms


@pytest.fixture
def labels():
    return LabelDevices()


@pytest.fixture(autouse=True)
def _no_leftover_session():
    yield
    from mpcheck.runtime.capture import session

    assert session.active() is None, "a debug session was left active"
    assert torch._C._len_torch_function_stack() == 0, "a torch function mode was left on the stack"
